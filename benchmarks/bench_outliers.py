"""Activation outliers on a real fine-tune: what the probe pass pays for them, and how far each layer's max |x| grows
from its pretrained value at a usual and at a high learning rate (the figures behind ``AlertSettings.outlier_multiple``).

    python benchmarks/bench_outliers.py cost --threads 1
    python benchmarks/bench_outliers.py growth --lrs 3e-5,1e-3 --max-steps 80 --threads 2

``cost``: the packaged MiniLM with a 2-class head and a 32-example SST-2 dev probe set (max_length 64); one probe
pass of the default statistics (``BertWatchCallback.default_stats`` less the outlier ones) against the same pass
with the outlier statistics too, with ``ffn_inf_norm`` alone (what the alert needs), the outlier statistics alone
and a plain shared forward (``entropy`` alone), interleaved, median of ``--repeats``. ``growth``: MiniLM fine-tuned on SST-2 train
(batch 16, max_length 64, constant learning rate, seed 0) with ``BertWatchCallback(stats=OUTLIER_NAMES)`` every
``--every`` steps on 32 dev examples; for each run, each layer's ``ffn_inf_norm`` and ``residual_inf_norm`` over
their step-0 value at every probe step, the largest ratio, and the outlier alerts raised. One JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, sst2_dataset, train_quietly  # noqa: E402


def cost(opts: argparse.Namespace) -> dict:
    """Seconds of one probe pass with and without the outlier statistics (module doc)."""
    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback
    from bertwatch.callbacks._context import TrainerContext
    from bertwatch.callbacks.watched_run import join
    from bertwatch.core.stat_names import OUTLIER_NAMES
    from bertwatch.data.glue import load_glue
    from bertwatch.options.settings import ProbeSettings
    from bertwatch.probe.probe_pass import execute, plan_pass

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    texts = load_glue("sst2", "dev", opts.glue_dir, limit=32)
    out = tempfile.mkdtemp(prefix="bench_outliers_")
    settings = ProbeSettings(texts=texts, batch_size=32, max_length=64, logging_dir=out)
    args = T.TrainingArguments(output_dir=out, report_to="none", use_cpu=True)
    watched = join(model, settings, args, T.TrainerState(), {"processing_class": tok}, TrainerContext())
    base = [n for n in BertWatchCallback.default_stats if n not in OUTLIER_NAMES]
    plans = {
        "default": plan_pass("step", 1, base, base, reference_ready=True),
        "default+outliers": plan_pass("step", 1, base + list(OUTLIER_NAMES), base, reference_ready=True),
        "default+ffn_inf_norm": plan_pass("step", 1, [*base, "ffn_inf_norm"], base, reference_ready=True),
        "outliers alone": plan_pass("step", 1, list(OUTLIER_NAMES), base, reference_ready=True),
        "one forward (entropy alone)": plan_pass("step", 1, ["entropy"], base, reference_ready=True),
    }
    execute(plan_pass("begin", 0, base, base), watched.context)  # the drift reference, once
    times: dict[str, list[float]] = {name: [] for name in plans}
    for _ in range(opts.repeats):
        for name, plan in plans.items():
            start = time.perf_counter()
            execute(plan, watched.context)
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "threads": opts.threads,
        "probe_examples": 32,
        "seconds": {k: round(v, 4) for k, v in median.items()},
        "added": {
            name: round(median[name] / median["default"] - 1, 4) for name in plans if name.startswith("default+")
        },
    }


def growth(lr: float, opts: argparse.Namespace, out: str) -> dict:
    """One fine-tune at ``lr``: each layer's inf norms over their step-0 values (module doc)."""
    import numpy as np
    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback, ProbeOptions, watch
    from bertwatch.core.stat_names import OUTLIER_NAMES

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    train = sst2_dataset(tok, "train", opts.glue_dir, opts.max_steps * opts.batch_size, max_length=64)
    dev = sst2_dataset(tok, "dev", opts.glue_dir, 64, max_length=64)
    T.set_seed(0)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    cb = BertWatchCallback(
        stats=list(OUTLIER_NAMES), every_n_steps=opts.every, num_probe_examples=32, num_maps=0,
        on_alert="none", probing=ProbeOptions(on_evaluate=False),
    )  # fmt: skip
    args = T.TrainingArguments(
        output_dir=out, per_device_train_batch_size=opts.batch_size, max_steps=opts.max_steps, learning_rate=lr,
        lr_scheduler_type="constant", logging_steps=10, save_strategy="no", report_to="none", seed=0,
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    trainer = T.Trainer(
        model=model, args=args, train_dataset=train, eval_dataset=dev, processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok), callbacks=[cb],
    )  # fmt: skip
    watch(trainer)
    seconds = train_quietly(trainer)
    history = cb.history
    first = history[0][1]
    ratios = {
        stat: {int(step): np.round(grids[stat][:, 0] / first[stat][:, 0], 3).tolist() for step, grids in history}
        for stat in ("ffn_inf_norm", "residual_inf_norm")
    }
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return {
        "lr": lr,
        "steps": opts.max_steps,
        "step0": {stat: np.round(first[stat][:, 0], 3).tolist() for stat in ratios},
        "ratios": ratios,
        "max_ratio": {stat: max(max(r) for r in per.values()) for stat, per in ratios.items()},
        "alerts": [a.describe() for a in cb.alerting.raised if a.rule == "outlier_growth"],
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("cost", "growth"))
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--lrs", default="3e-5,1e-3", help="comma-separated learning rates")
    parser.add_argument("--max-steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--every", type=int, default=10, help="probe every N steps")
    opts = parser.parse_args()
    if opts.what == "cost":
        print(json.dumps(cost(opts)), flush=True)
        return
    root = tempfile.mkdtemp(prefix="bench_outliers_")
    for lr in (float(x) for x in opts.lrs.split(",")):
        print(json.dumps(growth(lr, opts, str(Path(root) / f"lr_{lr:g}"))), flush=True)


if __name__ == "__main__":
    main()
