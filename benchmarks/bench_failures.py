"""Will this fine-tune fail? Fine-tunes of the packaged MiniLM on SST-2, MRPC and RTE drawn from their index
(learning rate log-uniform in 1e-5..5e-3, 40 to 300 steps, the seed = the index; every other run evaluates on dev
every 20% of its steps; every fifth is measured every 10 steps, the rest at ``BertWatchCallback``'s default
cadence), each labelled from its final dev score; the verdict (``core.verdict``) replayed on each run's evidence
at 10%, 20% and 30% of training and at the end, against two baselines read at the same step: the dev score
(Dodge et al. 2020's early stopping) and the training loss.

    nice python benchmarks/bench_failures.py --runs 0-149 --out failures.jsonl   # resumable, one line a run
    python benchmarks/bench_failures.py --out failures.jsonl --report            # the figures of what finished

A run **failed** when its final dev score is not better than the majority class's beyond chance: the 95% paired
bootstrap interval (``--boot`` resamples of the dev examples) of (run's score − majority's score) reaches 0
(accuracy). It **learned** when its final dev score is at least 5 points above the majority's. Each record keeps
the raw evidence (the Trainer's log of every step, the run-health values, alerts in force and reason of each
measured step, the dev predictions at 10/20/30%), so the verdict is replayed as the live callback would have seen
it with the Trainer logging every ``--logging-steps`` steps (``_failures_replay``). Figures, each with a 95%
bootstrap interval over runs: the ROC AUC of the verdict's level, of the early dev score's distance below the
majority's and of the last logged training loss as failure scores at 10/20/30%; at the end, the recall of
"failing" on the failed runs and the share of the runs that learned that end "at risk" or worse (false alarms);
by cadence, by evaluation, by task, by index parity, and on the runs recorded after the verdict's defaults were
chosen (``--held-out-after``: the first 92 lines of the file they were chosen on). Training: linear
schedule, 10% warm-up, AdamW, batch 16, ``steps`` × 16 training examples (a smaller set is gone round again),
sequences cut to ``--max-length``; the probe set: 32 training examples the run never trains on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, train_quietly  # noqa: E402
from _failures_replay import (  # noqa: E402
    BATCH,
    FRACTIONS,
    PROBE,
    auc,
    bootstrap,
    failed_by_score,
    interval,
    learned_by_score,
    metric,
    scores,
)
from _failures_replay import share as share_of  # noqa: E402


def _encode(tok, rows: list[dict], max_length: int) -> list[dict]:
    """The rows tokenized (truncated to ``max_length``), one dict per example with its "label": a plain list, which
    the Trainer, its padding collator and bertwatch's ``probe_dataset`` all take (no ``datasets`` needed)."""
    pairs = [r.get("text_pair") for r in rows]
    texts = [r["text"] for r in rows]
    encoded = tok(texts, pairs if any(p is not None for p in pairs) else None, truncation=True, max_length=max_length)
    return [{**{k: v[i] for k, v in encoded.items()}, "label": int(r["label"])} for i, r in enumerate(rows)]


_metric = metric  # the score a run is labelled by (and evaluates with)


def dev_predictions(model, tok, dev: list[dict], batch_size: int = 64) -> list[int]:
    """Class predictions on ``dev`` (tokenized rows), in eval mode and without gradients, on the model's device;
    the model's mode is restored (no random number is drawn, so training is unchanged)."""
    import torch
    from transformers import DataCollatorWithPadding

    collate = DataCollatorWithPadding(tok)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[int] = []
    with torch.no_grad():
        for start in range(0, len(dev), batch_size):
            rows = [{k: v for k, v in row.items() if k != "label"} for row in dev[start : start + batch_size]]
            batch = {k: v.to(device) for k, v in collate(rows).items()}
            out.extend(model(**batch).logits.argmax(-1).tolist())
    model.train(was_training)
    return out


def run_one(config: dict, opts: argparse.Namespace) -> dict:
    """One fine-tune of ``config`` (:func:`configs`) with ``BertWatchCallback()`` at its defaults (the overhead
    budget's cadence, every statistic) or pinned every 10 steps; its JSON record holds the raw evidence a verdict
    reads, so any version of the verdict can be replayed on it: the Trainer's ``log_history`` (training loss and
    learning rate every step, the evaluations), the run-health values and the stability alerts in force at each
    measured step, why each step was measured, and the dev predictions at 10/20/30% of training and at the end."""
    import tempfile

    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback, watch
    from bertwatch.data.glue import load_glue

    task, seed, lr, steps = config["task"], config["seed"], config["lr"], config["steps"]
    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    rows = load_glue(task, "train", opts.glue_dir)
    used = min(steps * BATCH, len(rows) - PROBE)  # a small training set (MRPC, RTE) is trained on for epochs
    train = _encode(tok, rows[:used], opts.max_length)
    probe_rows = rows[used:][:PROBE]
    probe = _encode(tok, probe_rows, opts.max_length)
    dev_rows = load_glue(task, "dev", opts.glue_dir, limit=opts.dev_size)
    dev = _encode(tok, dev_rows, opts.max_length)
    checkpoints = {max(1, round(steps * f)) for f in FRACTIONS}
    early: dict[int, list[int]] = {}
    alerts: dict[int, int] = {}
    verdicts: dict[int, list] = {}

    class DevAt(T.TrainerCallback):
        """The dev predictions at 10/20/30% of training (the early-stopping baseline) and, after bertwatch's own
        events, the alerts in force and the verdict at each step it judged."""

        def _note(self):
            judged = cb.alerting._judged_step
            if judged is not None:
                alerts[judged] = len(cb.alerting.alerts)
            v = cb.alerting.verdict
            if v is not None:
                verdicts[v.step] = [v.level, list(v.reasons)]

        def on_step_begin(self, args, state, control, **kwargs):
            self._note()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            self._note()
            if state.global_step in checkpoints:
                early[state.global_step] = dev_predictions(model, tok, dev)

        def on_evaluate(self, args, state, control, **kwargs):
            self._note()

        def on_train_end(self, args, state, control, **kwargs):
            self._note()

    T.set_seed(seed)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2, dtype=torch.float32)
    options = {"every_n_steps": 10} if config["pinned"] else {}
    cb = BertWatchCallback(probe_dataset=probe, num_probe_examples=PROBE, on_alert="none", quiet=True, **options)
    metric = _metric(task)

    def compute_metrics(prediction):
        return {"score": float(metric(np.asarray(prediction.predictions).argmax(-1), prediction.label_ids))}

    evaluate = config["evaluate"]
    with tempfile.TemporaryDirectory(prefix="bench_failures_") as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=BATCH, per_device_eval_batch_size=64, max_steps=steps,
            learning_rate=lr, warmup_steps=max(1, round(steps * 0.1)), lr_scheduler_type="linear",
            logging_steps=1, save_strategy="no", report_to="none", seed=seed, data_seed=seed,
            use_cpu=opts.device == "cpu",
            disable_tqdm=True, dataloader_num_workers=0,
            eval_strategy="steps" if evaluate else "no", eval_steps=max(1, round(steps * evaluate)) if evaluate else None,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=dev, processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok), callbacks=[cb, DevAt()],
            compute_metrics=compute_metrics if evaluate else None,
        )  # fmt: skip
        trainer.remove_callback(T.trainer_callback.PrinterCallback)  # no dict printed a step
        watch(trainer)
        seconds = train_quietly(trainer)
    kept = ("step", "loss", "learning_rate", "train_loss")  # and every evaluation's eval_* values
    log = [
        {k: v for k, v in h.items() if isinstance(v, (int, float)) and (k in kept or k.startswith("eval_"))}
        for h in trainer.state.log_history
    ]
    losses = {int(h["step"]): float(h["loss"]) for h in log if "loss" in h}
    return {
        "key": run_key(config, opts),
        **config,
        "max_length": opts.max_length,
        "dev_labels": [int(r["label"]) for r in dev_rows],
        "probe_labels": [int(r["label"]) for r in probe_rows],
        "final": dev_predictions(model, tok, dev),
        "early": {str(k): v for k, v in sorted(early.items())},
        "train_loss": {str(k): v for k, v in sorted(losses.items())},
        "log_history": log,
        "health": [[step, values] for step, values in cb.health],
        "alerts": sorted([k, v] for k, v in alerts.items()),
        "live_verdicts": sorted([k, *v] for k, v in verdicts.items()),
        "measured": [[r.step, r.reason] for r in cb.pacing.log],
        "bertwatch_seconds": round(cb.pacing.meter.own, 2),
        "device": opts.device,
        "model": "packaged" if not os.environ.get("MINILM_PATH") else "copy with float16-rounded weights",
        "seconds": round(seconds, 1),
    }


#: What the runs are drawn from (:func:`configs`).
TASKS = ("sst2", "mrpc", "rte")
STEPS = (40, 80, 150, 300)
LR_RANGE = (1e-5, 5e-3)


def configs(count: int, tasks: tuple[str, ...] = TASKS, first: int = 0) -> list[dict]:
    """Runs ``first`` .. ``first + count - 1``, each drawn from its own index (so any prefix is a fair sample and
    runs add up over sittings): the task in turn, a learning rate log-uniform in ``LR_RANGE``, a length from
    ``STEPS``, the seed = the index; every other run evaluates on dev every 20% of its steps (the rest never
    evaluate), and every fifth is pinned every 10 steps instead of the default cadence."""
    out = []
    for i in range(first, first + count):
        rng = np.random.default_rng([7, i])
        low, high = (math.log10(x) for x in LR_RANGE)
        out.append(
            {
                "index": i,
                "task": tasks[i % len(tasks)],
                "seed": i,
                "lr": float(f"{10 ** rng.uniform(low, high):.2g}"),
                "steps": int(rng.choice(STEPS)),
                "evaluate": 0.2 if (i // len(tasks)) % 2 == 0 else 0.0,
                "pinned": i % 5 == 4,
            }
        )
    return out


def run_key(config: dict, opts: argparse.Namespace) -> str:
    c = config
    every = "10" if c["pinned"] else "default"
    return (
        f"{c['task']}|seed={c['seed']}|lr={c['lr']:g}|steps={c['steps']}|eval={c['evaluate']:g}|every={every}"
        f"|len={opts.max_length}|dev={opts.dev_size}" + ("" if opts.device == "cpu" else f"|{opts.device}")
    )


# ------------------------------------------------------------------------------------------------- the figures

#: The slices of the runs the table is cut into: (name, which runs).
SLICES = (
    ("all runs", lambda r: True),
    ("default cadence", lambda r: not r["pinned"]),
    ("every 10 steps", lambda r: r["pinned"]),
    ("evaluating every 20%", lambda r: bool(r["evaluate"])),
    ("not evaluating", lambda r: not r["evaluate"]),
    ("SST-2", lambda r: r["task"] == "sst2"),
    ("MRPC", lambda r: r["task"] == "mrpc"),
    ("RTE", lambda r: r["task"] == "rte"),
    ("even index", lambda r: r["index"] % 2 == 0),
    ("odd index", lambda r: r["index"] % 2 == 1),
    ("recorded after the defaults were chosen", lambda r: r["_line"] >= r["_held_out_from"]),
)
POINTS = (*FRACTIONS, None)  # None: the end of training
SCORES = ("verdict", "dev score", "training loss", "recorded verdict")


def run_table(records: list[dict], opts: argparse.Namespace) -> dict[str, np.ndarray]:
    """Per run: ``failed``, ``learned``, and each score (``SCORES``) at each point of ``POINTS``, as arrays."""
    from bertwatch.core.verdict import VerdictSettings

    settings = VerdictSettings()
    table: dict[str, list] = {"failed": [], "learned": []}
    for r in records:
        table["failed"].append(failed_by_score(r["task"], r["final"], r["dev_labels"], opts.boot))
        table["learned"].append(learned_by_score(r["task"], r["final"], r["dev_labels"]))
        for point in POINTS:
            got = scores(r, point, settings, opts.logging_steps, opts.glue_dir)
            for name in SCORES:
                table.setdefault(f"{name}@{point}", []).append(got.get(name, math.nan))
    return {k: np.asarray(v, dtype=bool if k in ("failed", "learned") else float) for k, v in table.items()}


def _figures(t: dict[str, np.ndarray], boot: int) -> dict[str, tuple[float, float, float]]:
    failed, learned = t["failed"], t["learned"]
    out = {}
    for point in FRACTIONS:
        for name in SCORES:
            out[f"AUC {name}@{point}"] = bootstrap(auc, (t[f"{name}@{point}"], failed), boot)
    end = t["verdict@None"]
    out["recall"] = bootstrap(share_of, (end >= 2, failed), boot)
    out["false alarms"] = bootstrap(share_of, (end >= 1, learned), boot)
    out["false failing"] = bootstrap(share_of, (end >= 2, learned), boot)
    return out


def report(records: list[dict], opts: argparse.Namespace) -> list[str]:
    """The figures of the finished runs, as Markdown: the AUC of each score at 10/20/30% and the end-of-run recall
    and false alarms on all runs, then the same figures slice by slice."""
    t = run_table(records, opts)
    failed, learned = t["failed"], t["learned"]
    lines = [
        f"{len(records)} runs: {int(failed.sum())} failed (final dev score not above the majority's), "
        f"{int(learned.sum())} learned (5 points or more above it), {len(records) - int((failed | learned).sum())} "
        f"neither; Trainer logging every {opts.logging_steps} steps (the training loss's AUC is over the runs that "
        f"had logged one by then); {opts.boot} bootstrap resamples",
        "",
        "| AUC [95% interval], failure score | 10% of training | 20% | 30% |",
        "|---|---|---|---|",
    ]
    figures = _figures(t, opts.boot)
    for name in SCORES:
        cells = [interval(figures[f"AUC {name}@{p}"]) for p in FRACTIONS]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    end = t["verdict@None"]
    recall, alarms = figures["recall"], figures["false alarms"]
    lines += [
        "",
        f'At the end: "failing" on {int((end >= 2)[failed].sum())} of {int(failed.sum())} failed runs (recall '
        f'{interval(recall)}); "at risk" or worse on {int((end >= 1)[learned].sum())} of {int(learned.sum())} runs '
        f'that learned (false alarms {interval(alarms)}), "failing" on {int((end >= 2)[learned].sum())} of them.',
        "",
        "| runs | n | failed | learned | AUC at 20%: verdict | dev score | training loss | end: recall of failing "
        "| false alarms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line, r in enumerate(records):
        r["_line"], r["_held_out_from"] = line, opts.held_out_after
    for name, keep in SLICES:
        rows = np.array([keep(r) for r in records], dtype=bool)
        if not rows.any():
            continue
        part = {k: v[rows] for k, v in t.items()}
        f = _figures(part, opts.boot)
        cells = [interval(f[f"AUC {s}@0.2"]) for s in SCORES[:3]] + [interval(f["recall"]), interval(f["false alarms"])]
        lines.append(f"| {name} | {int(rows.sum())} | {int(part['failed'].sum())} | {int(part['learned'].sum())} | "
                     f"{' | '.join(cells)} |")  # fmt: skip
    return lines


def health_cost(opts: argparse.Namespace, rounds: int = 7) -> list[str]:
    """The gradient pass over 32 dev examples of the first task (MiniLM, ``--max-length`` tokens, 16 a batch)
    without the run-health signals, with the outputs' (predictions, losses), and with the layers' gradient norms
    too, interleaved ``rounds`` times; the fastest round of each and their ratios."""
    import torch
    import transformers as T

    from bertwatch.data.glue import load_glue
    from bertwatch.heads.health import HealthAccumulator
    from bertwatch.heads.importance import gradient_stats
    from bertwatch.heads.roles import token_roles

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    rows = load_glue(opts.tasks.split(",")[0], "dev", opts.glue_dir, limit=PROBE)
    batches = []
    for start in range(0, PROBE, BATCH):
        part = rows[start : start + BATCH]
        pairs = [r.get("text_pair") for r in part]
        enc = tok([r["text"] for r in part], pairs if pairs[0] is not None else None, truncation=True,
                  max_length=opts.max_length, padding=True, return_tensors="pt")  # fmt: skip
        batch = {**enc, "labels": torch.tensor([int(r["label"]) for r in part])}
        batches.append((batch, token_roles(batch["input_ids"], batch["attention_mask"], tok)))
    times: dict[str, list[float]] = {"without": [], "outputs": [], "gradients": []}
    for _ in range(rounds):
        for mode in times:
            start = time.perf_counter()
            health = None if mode == "without" else HealthAccumulator.for_model(model, 6, mode == "gradients")
            for batch, roles in batches:
                gradient_stats(model, batch, roles, health=health)
            times[mode].append(time.perf_counter() - start)
    best = {mode: min(t) for mode, t in times.items()}
    return [f"{mode}: fastest {t:.2f} s, {t / best['without']:.2f} x without" for mode, t in best.items()]


def _append(out: Path, record: dict) -> None:
    """One JSON line appended in one write (parallel jobs share the file)."""
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _in_parallel(todo: list[dict], opts: argparse.Namespace) -> None:
    """``todo`` over ``opts.jobs`` processes of this script, each given every ``jobs``-th run (one ``--runs`` index
    at a time, ``--no-report``), appending to the same ``--out``."""
    import shlex
    import subprocess

    same = ["--tasks", opts.tasks, "--out", opts.out, "--device", opts.device, "--threads", str(opts.threads),
            "--max-length", str(opts.max_length), "--dev-size", str(opts.dev_size), "--no-report"]  # fmt: skip
    if opts.glue_dir:
        same += ["--glue-dir", opts.glue_dir]
    commands = []
    for share in (todo[j :: opts.jobs] for j in range(opts.jobs)):
        runs = [shlex.join([sys.executable, __file__, *same, "--runs", str(c["index"])]) for c in share]
        if runs:
            commands.append("; ".join(runs))
    procs = [subprocess.Popen(["bash", "-c", command]) for command in commands]
    for proc in procs:
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument(
        "--tasks", default=",".join(TASKS), help="comma-separated, taken in turn: sst2, mrpc, rte, cola"
    )
    parser.add_argument(
        "--runs",
        default="0-99",
        help="the run indices to run, a range 0-99 (each run's task, "
        "rate, length, seed, evaluation and cadence are drawn from its index)",
    )
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--dev-size", type=int, default=500, help="the first N dev examples")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument(
        "--logging-steps", type=int, default=10, help="the report replays a Trainer logging every N steps"
    )
    parser.add_argument(
        "--held-out-after",
        type=int,
        default=92,
        help="the verdict's defaults were chosen on the first N runs of --out; the report gives the later ones apart",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the runs train")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, each in its own process")
    parser.add_argument("--no-report", action="store_true", help="run only; print no figures")
    parser.add_argument("--out", default="failures.jsonl", help="one JSON line per finished run (resumable)")
    parser.add_argument("--report", action="store_true", help="only print the figures of the finished runs")
    parser.add_argument("--cost", action="store_true", help="only time the gradient pass with and without health")
    opts = parser.parse_args()
    if opts.cost:
        print("\n".join(health_cost(opts)))
        return
    out = Path(opts.out)
    done = {json.loads(line)["key"] for line in out.read_text().splitlines() if line.strip()} if out.exists() else set()
    if not opts.report:
        first, last = (int(x) for x in opts.runs.split("-")) if "-" in opts.runs else (int(opts.runs),) * 2
        todo = [
            c for c in configs(last - first + 1, tuple(opts.tasks.split(",")), first) if run_key(c, opts) not in done
        ]
        if opts.jobs > 1:
            _in_parallel(todo, opts)
        for config in todo if opts.jobs == 1 else ():
            record = run_one(config, opts)
            _append(out, record)
            print(f"{record['key']}: {record['seconds']} s (bertwatch {record['bertwatch_seconds']} s)", flush=True)
    if opts.no_report:
        return
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    print("\n".join(report(records, opts)), flush=True)


if __name__ == "__main__":
    main()
