"""The report side of ``bench_failures.py``: the evidence a live ``BertWatchCallback`` had at a step, replayed from a
run's record (``core.evidence.Evidence``), the verdict on it (``core.verdict.judge``), and the figures over runs
with bootstrap intervals.

A record keeps the Trainer's log of every step (``logging_steps=1``); the replay keeps what a user logging every
``logging_steps`` steps would have had: at each multiple of it, the mean of the step losses since the log before
(the Trainer's own logged ``loss``) and the learning rate then; the evaluations as logged (``eval_score`` is the
accuracy on SST-2, MRPC and RTE: read as ``eval_accuracy``); the run-health values and alerts of the steps
bertwatch measured; the constant prediction on the dev set (from its labels) and on the examples trained on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from bertwatch.core.evidence import Constant, Evidence
from bertwatch.core.verdict import VerdictSettings, judge

#: The fractions of training at which each score is read, then the end.
FRACTIONS = (0.1, 0.2, 0.3)
BATCH, PROBE = 16, 32
#: A run learned when its final dev score is at least this far above the majority class's.
LEARNED_MARGIN = 0.05


def metric(task: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """The score a run is labelled by: Matthews correlation for CoLA, accuracy for the others (MRPC's F1 would
    credit the majority class, which predicts every pair a paraphrase, with 0.81)."""
    from bertwatch.data.metrics import metric_fn

    return metric_fn(task, None if task == "cola" else "accuracy")


def majority_score(task: str, labels: Sequence[int]) -> float:
    y = np.asarray(labels)
    return metric(task)(np.full_like(y, np.bincount(y).argmax()), y)


def failed_by_score(task: str, predictions: Sequence[int], labels: Sequence[int], boot: int, seed: int = 0) -> bool:
    """Whether the 95% paired bootstrap interval of (score − majority classifier's score) on the dev examples
    reaches 0: the run is not better than predicting the majority class beyond chance."""
    score = metric(task)
    p, y = np.asarray(predictions), np.asarray(labels)
    majority = np.full_like(y, np.bincount(y).argmax())
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(boot):
        i = rng.integers(0, len(y), len(y))
        diffs.append(score(p[i], y[i]) - score(majority[i], y[i]))
    return bool(np.quantile(diffs, 0.025) <= 0)


def learned_by_score(task: str, predictions: Sequence[int], labels: Sequence[int]) -> bool:
    """Whether the final dev score is at least ``LEARNED_MARGIN`` above the majority class's."""
    return metric(task)(np.asarray(predictions), np.asarray(labels)) >= majority_score(task, labels) + LEARNED_MARGIN


@cache
def _train_labels(task: str, glue_dir: str | None) -> tuple[int, ...]:
    from bertwatch.data.glue import load_glue

    return tuple(int(r["label"]) for r in load_glue(task, "train", glue_dir))


def train_constant(record: dict, glue_dir: str | None) -> Constant | None:
    """The constant prediction on the examples the run trained on (the first ``steps`` × 16 of the training set,
    fewer on a small set, whose last 32 are the probe set)."""
    labels = _train_labels(record["task"], glue_dir)
    used = min(record["steps"] * BATCH, len(labels) - PROBE)
    return Constant.of_labels(labels[:used])


def evidence_at(record: dict, step: int, logging_steps: int = 10, constant: Constant | None = None) -> Evidence:
    """What the live callback had at ``step`` of the recorded run, its Trainer logging every ``logging_steps``
    steps (module doc); ``constant``: the constant prediction on the examples trained on."""
    evidence = Evidence(max_steps=int(record["steps"]), train_constant=constant)
    evidence.eval_constant = Constant.of_labels(record["dev_labels"])
    per_step = {int(h["step"]): h for h in record["log_history"] if "loss" in h}
    for end in range(logging_steps, step + 1, logging_steps):
        window = [per_step[k]["loss"] for k in range(end - logging_steps + 1, end + 1) if k in per_step]
        if window:
            evidence.note_log(end, {"loss": sum(window) / len(window), "learning_rate": per_step[end]["learning_rate"]})
    for h in record["log_history"]:
        if "eval_loss" in h and int(h["step"]) <= step:
            metrics = {k: v for k, v in h.items() if k.startswith("eval_")}
            if record["task"] != "cola" and "eval_score" in metrics:
                metrics["eval_accuracy"] = metrics.pop("eval_score")
            evidence.note_evaluation(int(h["step"]), metrics)
    for at, health in record["health"]:
        if at <= step:
            evidence.note_probe(at, health)
    for at, count in record["alerts"]:
        if at <= step:
            evidence.note_alerts(at, count)
    evidence.evaluations.sort(key=lambda row: row[0])
    return evidence


def at_fraction(record: dict, fraction: float) -> int:
    """The step at ``fraction`` of the run (the step its early dev predictions were taken at)."""
    return max(1, round(record["steps"] * fraction))


def scores(
    record: dict, fraction: float | None, settings: VerdictSettings, logging_steps: int, glue_dir: str | None
) -> dict[str, float]:
    """Each failure score of one run at ``fraction`` of its training (None: the end), higher = more likely
    failed: the verdict's level, the early dev score's distance below the majority's (Dodge et al.'s baseline),
    the last logged training loss, and the verdict recorded live (the probe-count verdict the runs were made with)."""
    step = record["steps"] if fraction is None else at_fraction(record, fraction)
    evidence = evidence_at(record, step, logging_steps, train_constant(record, glue_dir))
    verdict = judge(evidence, settings)
    out = {"verdict": float(verdict.level) if verdict is not None else 0.0}
    live = [level for at, level, _ in record["live_verdicts"] if at <= step]
    out["recorded verdict"] = float(live[-1]) if live else 0.0
    early = record["early"].get(str(step)) if fraction is not None else record["final"]
    if early is not None:
        y = np.asarray(record["dev_labels"])
        out["dev score"] = -(metric(record["task"])(np.asarray(early), y) - majority_score(record["task"], y))
    out["training loss"] = evidence.losses[-1][1] if evidence.losses else math.nan
    return out


def auc(scores: np.ndarray, failed: np.ndarray) -> float:
    """ROC AUC of ``scores`` (higher = failed) for the labels ``failed`` ``[n]`` bool: the share of (failed,
    healthy) pairs ordered right, ties counting half, over the runs with a score (a training loss is missing
    before the first log); NaN without both classes."""
    known = np.isfinite(scores)
    pos, neg = scores[known & failed], scores[known & ~failed]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def share(flagged: np.ndarray, among: np.ndarray) -> float:
    """The share of the runs ``among`` that are ``flagged`` (both ``[n]`` bool); NaN for none."""
    return float((flagged & among).sum() / among.sum()) if among.sum() else math.nan


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
    if not draws or not math.isfinite(value):
        return value, math.nan, math.nan
    low, high = np.quantile(np.asarray(draws), [0.025, 0.975], axis=0)
    return value, float(low), float(high)


def interval(figure: tuple[float, float, float]) -> str:
    value, low, high = figure
    if not math.isfinite(value):
        return "n/a"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]" if math.isfinite(low) else f"{value:.2f}"
