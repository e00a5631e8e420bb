"""The ablation sweep against the naive loop on BERT-shaped random encoders, bf16, on a GPU.

    python benchmarks/bench_gpu_sweep.py                        # bert-base and bert-large, seq 128 and 512
    python benchmarks/bench_gpu_sweep.py --shapes tiny --seqs 32 --examples 16   # CPU smoke test (no GPU)

For each shape and sequence length, on ``--examples`` random examples of exactly that length:

* ``naive``: each configuration evaluated on its own, one full forward per batch through bertwatch's attention
  (what ``capture(model, intervention=...)`` gives a user);
* ``naive_sdpa_hook`` (``zero`` mode): the strongest naive loop a careful user would write: the model's own SDPA
  attention and a forward pre-hook on each layer's attention output projection (``attention.output.dense``) that
  zeroes the disabled heads' slices of its input (exactly Michel's zeroing);
* ``sweep``: bertwatch's engine (layer reuse, first-token last layer) one configuration per forward, and
  ``sweep_batched`` with configurations stacked along the batch, as many as fit in the free memory.

The naive loops run on ``--naive-configs`` configurations spread evenly over the sweep (the whole sweep would take
hours at bert-large x 512); all figures are per configuration. Also the pruning curve (10% of heads a step, random
importance) against the naive loop over the same masks. Printed (JSON): seconds and configurations per second
of each, and the ratios: ``sweep_over_naive`` (time per configuration, target <= 0.4 with batching),
``batched_speedup`` (configurations per second over the naive loop's, target >= 5), the same against the SDPA hook,
and ``pruning_over_naive`` (target <= 0.6). Predictions are checked against the naive loop (argmax agreement).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shapes import SHAPES, random_classifier, random_rows, run_grid, timed  # noqa: E402


def on(inputs: dict, device: torch.device) -> dict:
    return {k: v.to(device) for k, v in inputs.items()}


def naive_capture(model, batches, configs, mode: str) -> dict[str, np.ndarray]:
    """Each configuration on its own: one full forward per batch through bertwatch's attention."""
    from bertwatch.heads.capture import Intervention, capture

    out = {}
    for config in configs:
        intervention = Intervention.disable(torch.as_tensor(config.mask), mode)
        with torch.inference_mode(), capture(model, record=False, intervention=intervention):
            out[config.id] = np.concatenate(
                [model(**on(b.inputs, model.device)).logits.float().cpu().numpy() for b in batches]
            )
    return out


def naive_sdpa_hook(model, batches, configs) -> dict[str, np.ndarray]:
    """Zero mode the way a careful user would: SDPA, and a pre-hook on each attention output projection zeroing
    the disabled heads' slices of its input."""
    layers = model.bert.encoder.layer
    heads = model.config.num_attention_heads
    width = model.config.hidden_size // heads
    current: dict[str, torch.Tensor] = {}

    def hook_for(index: int):
        def zero_heads(module, args):
            keep = current["keep"][index]  # [heads] float, 0 = disabled
            hidden = args[0]
            scale = keep.to(hidden.dtype).repeat_interleave(width)
            return (hidden * scale,)

        return zero_heads

    handles = [layer.attention.output.dense.register_forward_pre_hook(hook_for(i)) for i, layer in enumerate(layers)]
    out = {}
    try:
        with torch.inference_mode():
            for config in configs:
                current["keep"] = torch.as_tensor(~config.mask, dtype=torch.float32, device=model.device)
                out[config.id] = np.concatenate(
                    [
                        model(**{k: v.to(model.device) for k, v in b.inputs.items()}).logits.float().cpu().numpy()
                        for b in batches
                    ]
                )
    finally:
        for handle in handles:
            handle.remove()
    return out


def sweep_engine(runner, batches, configs, per_forward: int) -> dict[str, np.ndarray]:
    from bertwatch.ablation.evaluate import run_shard

    with torch.inference_mode():
        return run_shard(runner, batches, configs, per_forward, None)


def pruning_engine(runner, batches, importance) -> int:
    """The sweep's pruning curve over every step (none crosses a limit); returns the number of steps."""
    from bertwatch.ablation.inputs import EvalBatch, EvalData
    from bertwatch.ablation.pruning import pruning_curve
    from bertwatch.ablation.store import Processes, Store

    local, start = [], 0
    for b in batches:
        local.append(EvalBatch(np.arange(start, start + b.size), b.inputs))
        start += b.size
    data = EvalData([{}] * start, np.zeros(start, dtype=int), shards=[local])
    with torch.inference_mode():
        entries, _ = pruning_curve(
            runner,
            data,
            Store(None, "bench", False),
            Processes(False),
            1,
            lambda logits: 0.0,
            importance,
            0.1,
            lambda value: False,
            False,
            "bench",
        )
    return len(entries)


def spread(items: list, count: int) -> list:
    if count >= len(items):
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, count).round()]


def bench_one(name: str, length: int, opts, device, dtype) -> dict:
    from bertwatch.ablation.configs import HeadMask, pruning_masks, sweep_configs
    from bertwatch.ablation.inputs import EvalData, make_batches
    from bertwatch.ablation.runner import Runner, default_configs_per_batch

    shape = SHAPES[name]
    model = random_classifier(shape, length).to(device=device, dtype=dtype).eval()
    rows = random_rows(shape, opts.examples, length)
    data = EvalData([{"input_ids": r["input_ids"]} for r in rows], np.array([r["label"] for r in rows]))
    make_batches(data, opts.batch_size, opts.examples, 0)
    batches = data.shards[0]
    configs = sweep_configs(shape.layers, shape.heads, keep_only=True)
    subset = spread(configs, opts.naive_configs)
    runner = Runner(model, opts.mode)
    batched = opts.configs_per_batch or default_configs_per_batch(model, device, opts.batch_size, length)

    naive_capture(model, batches[:1], subset[:2], opts.mode)  # warm-up (kernels, allocator)
    sweep_engine(runner, batches[:1], subset[:2], 1)
    naive, t_naive = timed(lambda: naive_capture(model, batches, subset, opts.mode), device)
    one, t_one = timed(lambda: sweep_engine(runner, batches, configs, 1), device)
    many, t_many = timed(lambda: sweep_engine(runner, batches, configs, batched), device)
    figures = {
        "shape": name,
        "seq": length,
        "examples": opts.examples,
        "batch_size": opts.batch_size,
        "mode": opts.mode,
        "configurations": len(configs),
        "naive_configurations": len(subset),
        "configs_per_batch": batched,
        "seconds": {"naive": round(t_naive, 3), "sweep": round(t_one, 3), "sweep_batched": round(t_many, 3)},
    }
    rate = {"naive": len(subset) / t_naive, "sweep": len(configs) / t_one, "sweep_batched": len(configs) / t_many}
    if opts.mode == "zero":
        sdpa_model = random_classifier(shape, length, attn="sdpa").to(device=device, dtype=dtype).eval()
        naive_sdpa_hook(sdpa_model, batches[:1], subset[:2])
        hooked, t_hook = timed(lambda: naive_sdpa_hook(sdpa_model, batches, subset), device)
        figures["seconds"]["naive_sdpa_hook"] = round(t_hook, 3)
        rate["naive_sdpa_hook"] = len(subset) / t_hook
        figures["sdpa_hook_agrees"] = float(
            np.mean([np.array_equal(hooked[c.id].argmax(-1), naive[c.id].argmax(-1)) for c in subset])
        )
    figures["configs_per_second"] = {k: round(v, 2) for k, v in rate.items()}
    figures["sweep_over_naive"] = round(rate["naive"] / rate["sweep"], 3)
    figures["sweep_batched_over_naive"] = round(rate["naive"] / rate["sweep_batched"], 3)
    figures["batched_speedup"] = round(rate["sweep_batched"] / rate["naive"], 2)
    if "naive_sdpa_hook" in rate:
        figures["sweep_batched_over_sdpa_hook"] = round(rate["naive_sdpa_hook"] / rate["sweep_batched"], 3)
        figures["batched_speedup_over_sdpa_hook"] = round(rate["sweep_batched"] / rate["naive_sdpa_hook"], 2)
    figures["argmax_agreement"] = {
        "sweep": float(np.mean([np.array_equal(one[c.id].argmax(-1), naive[c.id].argmax(-1)) for c in subset])),
        "sweep_batched": float(
            np.mean([np.array_equal(many[c.id].argmax(-1), naive[c.id].argmax(-1)) for c in subset])
        ),
    }
    if not opts.no_prune:
        importance = np.random.default_rng(0).random((shape.layers, shape.heads))
        masks = pruning_masks(importance, 0.1)
        steps, t_prune = timed(lambda: pruning_engine(runner, batches, importance), device)
        prune_configs = [HeadMask(f"prune:{int(m.sum())}", m) for m in spread(masks, opts.naive_configs)]
        _, t_prune_naive = timed(lambda: naive_capture(model, batches, prune_configs, opts.mode), device)
        figures["pruning_steps"] = steps
        figures["seconds"]["pruning"] = round(t_prune, 3)
        figures["seconds"]["naive_pruning"] = round(t_prune_naive, 3)
        figures["pruning_over_naive"] = round((t_prune / steps) / (t_prune_naive / len(prune_configs)), 3)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["bert-base", "bert-large"], choices=sorted(SHAPES))
    parser.add_argument("--seqs", nargs="+", type=int, default=[128, 512])
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--mode", choices=("uniform", "zero"), default="zero")
    parser.add_argument("--naive-configs", type=int, default=48, help="configurations the naive loops time")
    parser.add_argument("--configs-per-batch", type=int, default=0, help="0: as many as fit in the free memory")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    opts = parser.parse_args(argv)
    return run_grid(opts, bench_one)


if __name__ == "__main__":
    sys.exit(main())
