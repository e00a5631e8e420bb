"""What measuring probe examples whole costs: ``ProbeOptions(max_length=128)`` against ``None`` (the model's maximum).

The packaged MiniLM (6 x 12 heads, at most 512 tokens); 32 probe texts of which ``--long`` are about 600 words
(cut to 128 tokens, or to 512 with ``None``) and the rest short sentences. Per length it prints the seconds of one
probe pass (maps and every map statistic, the best of ``--repeat``), the largest attention tensor of a batch
``[batch, layers, heads, T, T]`` float32 and the size of the float16 reference cache (cropped maps, n² per
example), and the ratios ``None / 128``.

    PYTHONPATH=. python benchmarks/bench_probe_length.py --long 4 --repeat 2
"""

from __future__ import annotations

import argparse
import time

import torch

from bertwatch.heads.capture import capture
from bertwatch.heads.loading import load_model
from bertwatch.heads.maps.stats import STAT_NAMES, compute_stats
from bertwatch.probe.probe_set import build_probe_set, crop_maps


def _texts(long: int) -> list[str]:
    short = ["the movie was good .", "a dull , long plot and bad actors .", "it is not a great film , sadly ."]
    story = " ".join(["the film opens slowly , and the actors , all of them good , carry a thin plot ."] * 40)
    long_at = {i * (32 // long) for i in range(long)} if long else set()
    return [story if i in long_at else short[i % 3] for i in range(32)]


def _measure(model, tokenizer, texts, length, repeat: int, batch_size: int) -> dict[str, float]:
    probe = build_probe_set(tokenizer, texts=texts, model=model, max_length=length, batch_size=batch_size)
    best, peak, cache = float("inf"), 0, 0
    for _ in range(repeat):
        start, cache = time.perf_counter(), 0
        for k, batch in enumerate(probe.batches):
            roles = probe.roles[k]
            with torch.no_grad(), capture(model) as cap:
                model(**{n: v for n, v in batch.items() if n != "labels"})
            peak = max(peak, cap.attentions.numel() * 4)
            compute_stats(cap.attentions, roles, STAT_NAMES)
            cache += sum(m.numel() * 2 for m in crop_maps(cap.attentions, roles.real))
        best = min(best, time.perf_counter() - start)
    return {
        "seconds": best,
        "peak_mib": peak / 2**20,
        "cache_mib": cache / 2**20,
        "longest": probe.length_info()["longest"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--long", type=int, default=4, help="long probe texts among the 32")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_model("minilm")
    texts = _texts(args.long)
    rows = {length: _measure(model, tokenizer, texts, length, args.repeat, args.batch_size) for length in (128, None)}
    for length, row in rows.items():
        print(
            f"max_length={length!s:>4}: longest {row['longest']:>3} tokens, one pass {row['seconds']:.2f} s, "
            f"largest batch maps {row['peak_mib']:.0f} MiB, reference cache {row['cache_mib']:.1f} MiB"
        )
    a, b = rows[128], rows[None]
    print(
        f"None / 128 ({args.long} of 32 texts long): time x{b['seconds'] / a['seconds']:.1f}, "
        f"batch maps x{b['peak_mib'] / a['peak_mib']:.1f}, reference cache x{b['cache_mib'] / a['cache_mib']:.1f}"
    )


if __name__ == "__main__":
    main()
