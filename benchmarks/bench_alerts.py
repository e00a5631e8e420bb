"""How early the stability alerts fire: fine-tune the packaged MiniLM on real SST-2 at a sane and at a diverging
learning rate, with ``BertWatchCallback(on_alert="none")`` judging every probe step, and report for each run the
first alert and the step the training loss blew up (the steps between them are the warning the alerts give).

    python benchmarks/bench_alerts.py --glue-dir ../shared/data/glue --max-steps 300 --lrs 3e-5,3e-3

A run's loss "blows up" at the first logged step whose loss is non-finite or above ``--blowup`` times the mean of
the first ``--window`` logged losses; the loss logged at step s is that of the batch of step s, on the weights
after step s - 1. Statistics: ``max_logit`` (when the probe pass measures it), ``entropy``, ``cls_mass``,
``sep_mass`` every ``--every`` steps on 16 dev examples. Prints one JSON line per run and a summary table; CPU,
about a minute per hundred steps on two cores.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, sst2_dataset, train_quietly  # noqa: E402


def blowup_step(losses: dict[int, float], factor: float, window: int) -> int | None:
    """The first logged step whose loss is non-finite or above ``factor`` x the mean of the first ``window``."""
    steps = sorted(losses)
    base = sum(losses[s] for s in steps[:window]) / max(1, len(steps[:window]))
    return next((s for s in steps if not math.isfinite(losses[s]) or losses[s] > factor * base), None)


def run(lr: float, opts: argparse.Namespace, out: str) -> dict:
    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback, ProbeOptions, watch
    from bertwatch.options.settings import ALL_STATS

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)

    train = sst2_dataset(tok, "train", opts.glue_dir, opts.max_steps * opts.batch_size, max_length=64)
    dev = sst2_dataset(tok, "dev", opts.glue_dir, 64, max_length=64)
    T.set_seed(0)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    stats = [n for n in ("max_logit", "entropy", "cls_mass", "sep_mass") if n in ALL_STATS]
    cb = BertWatchCallback(
        stats=stats,
        every_n_steps=opts.every,
        num_probe_examples=16,
        num_maps=0,
        on_alert="none",
        probing=ProbeOptions(on_evaluate=False),
    )
    args = T.TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=opts.batch_size,
        max_steps=opts.max_steps,
        learning_rate=lr,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to="tensorboard",
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = T.Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=dev,
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[cb],
    )
    watch(trainer)
    seconds = train_quietly(trainer)
    losses = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    first = min(cb.alerting.raised, key=lambda a: a.since, default=None)
    blowup = blowup_step(losses, opts.blowup, opts.window)
    by_rule: dict[str, int] = {}
    for alert in cb.alerting.raised:
        by_rule[alert.rule] = min(by_rule.get(alert.rule, alert.since), alert.since)
    return {
        "lr": lr,
        "steps": opts.max_steps,
        "stats": stats,
        "first_alert": None if first is None else {"step": first.since, "alert": first.describe()},
        "first_alert_by_rule": by_rule,
        "heads_alerted": len({(a.layer, a.head) for a in cb.alerting.raised}),
        "blowup_step": blowup,
        "warning_steps": None if first is None or blowup is None else blowup - first.since,
        "loss_first_mean": sum(losses[s] for s in sorted(losses)[: opts.window]) / opts.window,
        "loss_max": max(losses.values()),
        "loss_last": losses[max(losses)],
        "loss_last10_mean": sum(losses[s] for s in sorted(losses)[-10:]) / min(10, len(losses)),
        "seconds": round(seconds, 1),
        "logdir": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--lrs", default="3e-5,3e-3", help="comma-separated learning rates")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--every", type=int, default=5, help="probe every N steps")
    parser.add_argument("--blowup", type=float, default=1.5)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--logdir", default=None, help="keep the runs here (default: a temporary folder)")
    opts = parser.parse_args()
    root = opts.logdir or tempfile.mkdtemp(prefix="bench_alerts_")
    results = []
    for lr in (float(x) for x in opts.lrs.split(",")):
        result = run(lr, opts, str(Path(root) / f"lr_{lr:g}"))
        print(json.dumps(result), flush=True)
        results.append(result)
    print(f"\n{'lr':>8} {'first alert':>12} {'loss blow-up':>13} {'warning (steps)':>16}  first alert")
    for r in results:
        first = r["first_alert"]
        print(
            f"{r['lr']:>8g} {first['step'] if first else '-':>12} {r['blowup_step'] or '-':>13} "
            f"{r['warning_steps'] if r['warning_steps'] is not None else '-':>16}  {first['alert'] if first else ''}"
        )


if __name__ == "__main__":
    main()
