"""Will this fine-tune fail? Many short fine-tunes of the packaged MiniLM that differ only in seed (and a few
learning rates, some above the usual to provoke failures), each labelled failed or healthy from its final dev
score; for the verdict and each run-health signal at 10%, 20% and 30% of training, how well it tells the failed
runs apart, against two baselines read at the same step: the training loss and the dev score (Dodge et al.
2020's early stopping).

    nice python benchmarks/bench_failures.py --tasks rte --seeds 0-3 --lrs 2e-5,1e-4,3e-4 --out failures.jsonl
    python benchmarks/bench_failures.py --out failures.jsonl --report   # the figures of what finished

Resumable: each finished run appends one JSON line to ``--out`` and is skipped when the command is run again.

A run is **failed** when its final dev score is not better than the majority-class classifier's beyond chance:
the 95% paired bootstrap interval (``--boot`` resamples of the dev examples) of (run's score − majority's score)
reaches 0 (accuracy for RTE, MRPC and SST-2, Matthews correlation for CoLA, whose majority classifier scores 0 on every
resample). The dev-score baseline applies the same rule to the dev score at 10/20/30% of training ("would stop
it"). Figures: ROC AUC of each signal as a failure score (higher = more likely failed), with a 95% bootstrap
interval over runs; precision and recall at each signal's threshold (the verdict's defaults,
``core.verdict.VerdictSettings``), with bootstrap intervals too. Training: linear schedule, 10% warm-up, AdamW,
batch 16, ``--steps`` steps on the first ``--steps`` × 16 training examples, sequences cut to ``--max-length``;
the probe set: 32 training examples the run never trains on, measured every 10% of the steps.
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

#: The fractions of training at which each signal is read.
FRACTIONS = (0.1, 0.2, 0.3)
BATCH = 16
PROBE = 32


def _encode(tok, rows: list[dict], max_length: int) -> list[dict]:
    """The rows tokenized (truncated to ``max_length``), one dict per example with its "label": a plain list, which
    the Trainer, its padding collator and bertwatch's ``probe_dataset`` all take (no ``datasets`` needed)."""
    pairs = [r.get("text_pair") for r in rows]
    texts = [r["text"] for r in rows]
    encoded = tok(texts, pairs if any(p is not None for p in pairs) else None, truncation=True, max_length=max_length)
    return [{**{k: v[i] for k, v in encoded.items()}, "label": int(r["label"])} for i, r in enumerate(rows)]


def _metric(task: str):
    """The score a run is labelled by: Matthews correlation for CoLA, accuracy for the others (MRPC's F1 would
    credit the majority class, which predicts every pair a paraphrase, with 0.81)."""
    from bertwatch.data.metrics import metric_fn

    return metric_fn(task, None if task == "cola" else "accuracy")


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


def failed_by_score(task: str, predictions: list[int], labels: list[int], boot: int, seed: int = 0) -> bool:
    """Whether the 95% paired bootstrap interval of (score − majority classifier's score) on the dev examples
    reaches 0: the run is not better than predicting the majority class beyond chance."""
    metric = _metric(task)
    p, y = np.asarray(predictions), np.asarray(labels)
    majority = np.full_like(y, np.bincount(y).argmax())
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(boot):
        i = rng.integers(0, len(y), len(y))
        diffs.append(metric(p[i], y[i]) - metric(majority[i], y[i]))
    return bool(np.quantile(diffs, 0.025) <= 0)


def auc(scores: np.ndarray, failed: np.ndarray) -> float:
    """ROC AUC of ``scores`` (higher = failed) for the labels ``failed`` ``[n]`` bool: the share of (failed,
    healthy) pairs ordered right, ties counting half; NaN without both classes."""
    pos, neg = scores[failed], scores[~failed]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def precision_recall(flagged: np.ndarray, failed: np.ndarray) -> tuple[float, float]:
    """Precision and recall of the runs ``flagged`` ``[n]`` bool (NaN where undefined)."""
    hits = float((flagged & failed).sum())
    precision = hits / flagged.sum() if flagged.sum() else math.nan
    recall = hits / failed.sum() if failed.sum() else math.nan
    return precision, recall


def bootstrap(figure, arrays: tuple[np.ndarray, ...], boot: int, seed: int = 0) -> tuple[float, float, float]:
    """``figure(*arrays)`` and its 95% bootstrap interval over runs (resamples where it is NaN are dropped)."""
    value = figure(*arrays)
    rng = np.random.default_rng(seed)
    n = len(arrays[0])
    draws = []
    for _ in range(boot):
        i = rng.integers(0, n, n)
        v = figure(*(a[i] for a in arrays))
        if np.all(np.isfinite(v)):
            draws.append(v)
    if not draws:
        return value, math.nan, math.nan
    low, high = np.quantile(np.asarray(draws), [0.025, 0.975], axis=0)
    return value, float(low), float(high)


def _prior_entropy(labels: list[int]) -> float:
    counts = np.bincount(np.asarray(labels))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def _with_prior(record: dict) -> None:
    """Give a record's health points the probe set's prior loss where they lack it (records written before the
    signal existed): the entropy of the labels of its probe examples, the 32 training examples after those trained
    on."""
    from bertwatch.core.health_names import PRIOR_LOSS
    from bertwatch.data.glue import load_glue

    if all(PRIOR_LOSS in values for _, values in record["health"]):
        return
    rows = load_glue(record["task"], "train", default_glue_dir())[record["steps"] * BATCH :][:PROBE]
    prior = _prior_entropy([int(r["label"]) for r in rows])
    for _, values in record["health"]:
        values.setdefault(PRIOR_LOSS, prior)


def signals_at(record: dict, fraction: float, boot: int) -> dict[str, tuple[float, bool | None]]:
    """Each signal of one run at ``fraction`` of its training: ``{name: (failure score, flagged at its
    threshold)}`` (higher score = more likely failed; flagged None where a signal has no threshold)."""
    from bertwatch.core.health_names import LOSS_MEAN, LOSS_STD, PREDICTION_SHARE, PRIOR_LOSS
    from bertwatch.core.verdict import VerdictSettings, judge_run, lower_gradient_ratio

    s = VerdictSettings()
    _with_prior(record)
    steps, every = record["steps"], max(1, round(record["steps"] * 0.1))
    step = max(1, round(steps * fraction))
    history = [(int(k), v) for k, v in record["health"] if int(k) <= step]
    reference, now = history[0][1], history[-1][1]
    verdict = judge_run(history, 0, s)
    ratio, _ = lower_gradient_ratio(now, reference, s.lower_share)
    loss_ratio = now[LOSS_MEAN] / reference[LOSS_MEAN]
    prior_ratio = now[LOSS_MEAN] / now[PRIOR_LOSS]
    losses = {int(k): v for k, v in record["train_loss"].items()}
    window = [losses[k] for k in losses if step - every < k <= step]
    train_loss = float(np.mean(window)) if window else math.nan
    entropy = _prior_entropy(record["dev_labels"])
    early, labels = record["early"].get(str(step)), record["dev_labels"]
    metric = _metric(record["task"])
    y = np.asarray(labels)
    majority = metric(np.full_like(y, np.bincount(y).argmax()), y)
    dev_gap = metric(np.asarray(early), y) - majority if early is not None else math.nan
    return {
        "verdict (failing)": (float(verdict.level), verdict.level >= 2),
        "verdict (at risk or failing)": (float(verdict.level), verdict.level >= 1),
        "prediction share": (now[PREDICTION_SHARE], now[PREDICTION_SHARE] >= s.collapse_share),
        "lower-layer gradient / step 0": (-ratio, ratio < s.risk_fraction),
        "probe loss / step 0": (loss_ratio, loss_ratio >= s.stuck_fraction),
        "probe loss / prior loss": (prior_ratio, prior_ratio >= s.stuck_fraction),
        "probe loss std": (-now[LOSS_STD], None),
        "baseline: training loss": (train_loss, train_loss >= s.stuck_fraction * entropy),
        "baseline: dev score": (-dev_gap, failed_by_score(record["task"], early, labels, boot) if early else None),
    }


def report(records: list[dict], boot: int) -> list[str]:
    """The figures of the finished runs, as lines."""
    failed = np.array([failed_by_score(r["task"], r["final"], r["dev_labels"], boot) for r in records])
    lines = [f"{len(records)} runs, {int(failed.sum())} failed (final dev score not above the majority class)"]
    for r, f in zip(records, failed):
        final = _metric(r["task"])(np.asarray(r["final"]), np.asarray(r["dev_labels"]))
        lines.append(f"  {r['key']}: final {final:.3f} {'failed' if f else 'healthy'} ({r['seconds']:.0f} s)")
    for fraction in FRACTIONS:
        per_run = [signals_at(r, fraction, boot) for r in records]
        lines.append(f"\nat {fraction:.0%} of training  {'AUC [95% CI]':>22} {'precision [95% CI]':>22} "
                     f"{'recall [95% CI]':>22} flagged")  # fmt: skip
        for name in per_run[0]:
            scores = np.array([p[name][0] for p in per_run], dtype=float)
            flags = [p[name][1] for p in per_run]
            a = bootstrap(auc, (scores, failed), boot)
            row = f"  {name:<32} {_interval(a):>22}"
            if all(f is not None for f in flags):
                flagged = np.array(flags, dtype=bool)
                prec = bootstrap(lambda fl, fa: precision_recall(fl, fa)[0], (flagged, failed), boot)
                rec = bootstrap(lambda fl, fa: precision_recall(fl, fa)[1], (flagged, failed), boot)
                row += f" {_interval(prec):>22} {_interval(rec):>22} {int(flagged.sum())}"
            lines.append(row)
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


def _interval(figure: tuple[float, float, float]) -> str:
    value, low, high = figure
    return f"{value:.2f} [{low:.2f}, {high:.2f}]" if math.isfinite(value) else "n/a"


def _seeds(text: str) -> list[int]:
    if "-" in text:
        first, last = text.split("-")
        return list(range(int(first), int(last) + 1))
    return [int(x) for x in text.split(",")]


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
    for task in sorted({r["task"] for r in records}):
        print(f"\n== {task}")
        print("\n".join(report([r for r in records if r["task"] == task], opts.boot)), flush=True)


if __name__ == "__main__":
    main()
