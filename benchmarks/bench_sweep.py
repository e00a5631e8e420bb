"""A sweep that stops its failed runs: trials of the packaged MiniLM on a GLUE task (SST-2 by default), the learning
rate log-uniform over a range where some runs fail, run three ways: no pruning, Optuna's ``MedianPruner`` on the
evaluation metric, and bertwatch's ``prune_failing`` (its verdict). It prints the compute each way used (training
steps and wall seconds, and the share no pruning's saved) and the best trial's score on dev examples no trial
evaluated on, with its 95% interval.

    nice python benchmarks/bench_sweep.py --trials 24 --jobs 2 --threads 1 --out sweep.jsonl
    python benchmarks/bench_sweep.py --out sweep.jsonl --report        # the figures of the finished trials

How the three ways are run: each trial is trained once, whole, with the same seed and data order whichever way,
watched by ``BertWatchCallback()`` at its defaults and evaluated on the *seen* dev half every ``--eval-every``
steps; the Trainer's own clock is read after every step. A stopped trial is that same run up to its stop, so each
way is read from the whole runs:

* **no pruning**: every trial to its end;
* **MedianPruner**: a real Optuna study with ``MedianPruner()`` (its defaults: 5 startup trials) is handed each
  trial's evaluations in trial order (``trial.report``); a trial stops at the first evaluation where Optuna's
  ``should_prune()`` says so, as ``Trainer.hyperparameter_search(backend="optuna")`` stops it;
* **bertwatch**: a trial stops after the first step whose verdict, judged live during the run, was failing before
  the last step, as ``prune_failing`` stops it.

Compute: the training steps and the wall seconds each trial ran up to its stop. The best trial of a way is, of the
trials it ran to the end, the one with the best final score on the seen half (what a user would pick); its score
on the *unseen* half (which no trial evaluated on) is the figure, with a 95% bootstrap interval. Targets: bertwatch
saves at least 40% of no pruning's compute with its best trial's unseen score within the interval of no pruning's
best, and saves more than the MedianPruner at an equal best score.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, train_quietly  # noqa: E402
from _failures_replay import bootstrap, metric  # noqa: E402
from bench_failures import PROBE, _encode, dev_predictions, splits  # noqa: E402


def trial_configs(count: int, low: float, high: float) -> list[dict]:
    """Trial ``i``'s learning rate, log-uniform in [``low``, ``high``] from its own index, and its seed = ``i``."""
    out = []
    for i in range(count):
        rng = np.random.default_rng([23, i])
        out.append({"index": i, "seed": i, "lr": float(f"{10 ** rng.uniform(math.log10(low), math.log10(high)):.2g}")})
    return out


def trial_key(config: dict, opts: argparse.Namespace) -> str:
    return f"{opts.task}|lr={config['lr']}|seed={config['seed']}|steps={opts.steps}|eval={opts.eval_every}"


def run_trial(config: dict, opts: argparse.Namespace) -> dict:
    """One trial trained whole: the wall clock after each step, its evaluations on the seen half, the live
    verdict's level after each step, and its final predictions on both halves."""
    import tempfile

    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback, watch

    torch.set_num_threads(opts.threads)
    path = minilm_path()
    tok = T.AutoTokenizer.from_pretrained(path)
    rows, seen_rows, unseen_rows = splits(opts.task, opts.glue_dir, opts.dev_size // 2)
    used = min(opts.steps * opts.batch, len(rows) - PROBE)
    train = _encode(tok, rows[:used], opts.max_length)
    probe = _encode(tok, rows[used:][:PROBE], opts.max_length)
    seen, unseen = _encode(tok, seen_rows, opts.max_length), _encode(tok, unseen_rows, opts.max_length)
    score = metric(opts.task)
    clock: dict[int, float] = {}
    levels: dict[int, int] = {}
    evaluations: dict[int, float] = {}

    class Record(T.TrainerCallback):
        """After bertwatch's own events of each step: the clock, the verdict's level, the evaluation."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def _level(self, state):
            if cb.alerting.verdict is not None:
                levels[state.global_step] = max(levels.get(state.global_step, 0), cb.alerting.verdict.level)

        def on_step_end(self, args, state, control, **kwargs):
            clock[state.global_step] = time.perf_counter() - self.start
            self._level(state)

        def on_log(self, args, state, control, **kwargs):
            self._level(state)

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            evaluations[state.global_step] = float(metrics["eval_score"])
            self._level(state)

    def compute_metrics(prediction):
        return {"score": float(score(np.asarray(prediction.predictions).argmax(-1), prediction.label_ids))}

    T.set_seed(config["seed"])
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2, dtype=torch.float32)
    cb = BertWatchCallback(probe_dataset=probe, num_probe_examples=PROBE, on_alert="none", quiet=True)
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=opts.batch, per_device_eval_batch_size=64,
            max_steps=opts.steps, learning_rate=config["lr"], warmup_steps=max(1, opts.steps // 10),
            logging_steps=10, save_strategy="no", report_to="none", seed=config["seed"], data_seed=config["seed"],
            use_cpu=True, disable_tqdm=True, eval_strategy="steps", eval_steps=opts.eval_every,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=seen, processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok), callbacks=[cb], compute_metrics=compute_metrics,
        )  # fmt: skip
        trainer.remove_callback(T.trainer_callback.PrinterCallback)
        watch(trainer)
        trainer.add_callback(Record())  # last: it reads what bertwatch judged at each event
        seconds = train_quietly(trainer)
    return {
        "key": trial_key(config, opts),
        **config,
        "task": opts.task,
        "steps": opts.steps,
        "clock": [clock[s] for s in sorted(clock)],
        "levels": {str(s): v for s, v in sorted(levels.items())},
        "evaluations": {str(s): v for s, v in sorted(evaluations.items())},
        "seen_final": float(
            score(np.asarray(dev_predictions(model, tok, seen)), np.asarray([r["label"] for r in seen]))
        ),
        "unseen_final": dev_predictions(model, tok, unseen),
        "unseen_labels": [int(r["label"]) for r in unseen_rows],
        "seconds": round(seconds, 1),
    }


def stop_bertwatch(record: dict) -> int:
    """The step ``prune_failing`` stops the trial after: the first whose live verdict was failing before the last."""
    last = record["steps"]
    failing = [int(s) for s, level in record["levels"].items() if level >= 2 and 0 < int(s) < last]
    return min(failing) if failing else last


def stops_median(records: list[dict]) -> list[int]:
    """The step each trial (in trial order) stops at under Optuna's own ``MedianPruner()``, maximising the score."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner())
    stops = []
    for record in records:
        trial = study.ask()
        stop = record["steps"]
        for step, value in sorted((int(s), v) for s, v in record["evaluations"].items()):
            trial.report(value, step)
            if trial.should_prune():
                stop = step
                break
        if stop < record["steps"]:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, record["seen_final"])
        stops.append(stop)
    return stops


def report(records: list[dict], boot: int) -> list[str]:
    """Each way's compute and best trial, as Markdown."""
    records = sorted(records, key=lambda r: r["index"])
    ways = {
        "no pruning": [r["steps"] for r in records],
        "MedianPruner": stops_median(records),
        "bertwatch": [stop_bertwatch(r) for r in records],
    }
    full_steps = sum(ways["no pruning"])
    full_seconds = sum(r["clock"][-1] for r in records)
    lines = [
        f"{len(records)} trials of {records[0]['task']}, {records[0]['steps']} steps each, learning rates "
        f"{min(r['lr'] for r in records):.2g} to {max(r['lr'] for r in records):.2g}",
        "",
        "| way | trials stopped | training steps | wall seconds | saved | best trial (lr) | its unseen score [95%] |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, stops in ways.items():
        steps = sum(stops)
        seconds = sum(r["clock"][s - 1] for r, s in zip(records, stops))
        finished = [r for r, s in zip(records, stops) if s >= r["steps"]]
        best = max(finished, key=lambda r: r["seen_final"]) if finished else None
        shown = "none finished" if best is None else f"{best['index']} ({best['lr']:.2g})"
        unseen = (np.asarray(best["unseen_final"]), np.asarray(best["unseen_labels"])) if best else None
        value = (
            "n/a" if best is None else "{:.3f} [{:.3f}, {:.3f}]".format(*bootstrap(metric(best["task"]), unseen, boot))
        )
        stopped = sum(s < r["steps"] for r, s in zip(records, stops))
        lines.append(
            f"| {name} | {stopped} | {steps} | {seconds:.0f} | {1 - steps / full_steps:.0%} steps, "
            f"{1 - seconds / full_seconds:.0%} time | {shown} | {value} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", default=default_glue_dir())
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--steps", type=int, default=100, help="training steps of each trial")
    parser.add_argument("--eval-every", type=int, default=10, help="evaluate on the seen dev half every N steps")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=48)
    parser.add_argument("--lr-range", type=float, nargs=2, default=(1e-5, 3e-3), metavar=("LOW", "HIGH"))
    parser.add_argument("--dev-size", type=int, default=400, help="dev examples: half seen, half unseen")
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="sweep.jsonl", help="one JSON line per finished trial (resumable)")
    parser.add_argument("--report", action="store_true", help="only print the figures of the finished trials")
    opts = parser.parse_args()
    out = Path(opts.out)
    done = {json.loads(line)["key"] for line in out.read_text().splitlines() if line.strip()} if out.exists() else set()
    if not opts.report:
        for config in trial_configs(opts.trials, *opts.lr_range):
            if trial_key(config, opts) in done:
                continue
            record = run_trial(config, opts)
            with out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{record['key']}: {record['seconds']} s, seen {record['seen_final']:.3f}", flush=True)
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    if records:
        print("\n".join(report(records, opts.boot)), flush=True)


if __name__ == "__main__":
    main()
