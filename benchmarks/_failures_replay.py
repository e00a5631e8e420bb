"""The report side of ``bench_failures.py``: the verdict replayed on what a run had shown by a step (its record
keeps the evidence the live ``BertWatchCallback`` read: ``core.evidence.Evidence.as_dict``), the baselines read at
the same step, the outcome from the unseen dev half, and the figures over runs with bootstrap intervals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from bertwatch.core.evidence import Evidence
from bertwatch.core.verdict import VerdictSettings, judge

#: The fractions of training at which each score is read, then the end.
FRACTIONS = (0.1, 0.2, 0.3)
BATCH, PROBE = 16, 32
#: A run learned when its final dev score is at least this far above the majority class's.
LEARNED_MARGIN = 0.05


#: Tasks whose labels are scores, not classes: a run is labelled by its Spearman correlation, 0 for any constant.
REGRESSION = ("stsb",)


def metric(task: str) -> Callable[[np.ndarray, np.ndarray], float]:
    """The score a run is labelled by: Matthews correlation for CoLA, Spearman's for STS-B (0 for predictions that
    do not vary, as any constant's), accuracy for the others (MRPC's F1 would credit the majority class, which
    predicts every pair a paraphrase, with 0.81)."""
    from bertwatch.data.metrics import metric_fn

    if task in REGRESSION:
        spearman = metric_fn(task, "spearmanr")
        return lambda p, y: float(np.nan_to_num(spearman(p, y), nan=0.0))
    return metric_fn(task, None if task == "cola" else "accuracy")


def _constant(task: str, y: np.ndarray) -> np.ndarray | None:
    """The best constant prediction's answers on labels ``y``: the majority class; None for a regression (any
    constant's correlation is 0)."""
    return None if task in REGRESSION else np.full_like(y, np.bincount(y).argmax())


def majority_score(task: str, labels: Sequence[float]) -> float:
    """The best constant prediction's score on ``labels``: the majority class's, 0 for a regression."""
    y = np.asarray(labels)
    constant = _constant(task, y)
    return 0.0 if constant is None else metric(task)(constant, y)


def failed_by_score(task: str, predictions: Sequence[float], labels: Sequence[float], boot: int, seed: int = 0) -> bool:
    """Whether the 95% paired bootstrap interval of (score − the best constant prediction's score) on the dev
    examples reaches 0: the run is not better than predicting the majority class (a regression: any constant)
    beyond chance."""
    score = metric(task)
    p, y = np.asarray(predictions), np.asarray(labels)
    constant = _constant(task, y)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(boot):
        i = rng.integers(0, len(y), len(y))
        diffs.append(score(p[i], y[i]) - (0.0 if constant is None else score(constant[i], y[i])))
    return bool(np.quantile(diffs, 0.025) <= 0)


def learned_by_score(task: str, predictions: Sequence[float], labels: Sequence[float]) -> bool:
    """Whether the final dev score is at least ``LEARNED_MARGIN`` above the best constant prediction's."""
    return metric(task)(np.asarray(predictions), np.asarray(labels)) >= majority_score(task, labels) + LEARNED_MARGIN


def at_fraction(record: dict, fraction: float) -> int:
    """The step at ``fraction`` of the run (the step its early dev predictions were taken at)."""
    return max(1, round(record["steps"] * fraction))


def evidence_of(record: dict) -> Evidence:
    """The evidence the live verdict read, as the run recorded it (``Evidence.as_dict``)."""
    return Evidence.from_dict(record["evidence"])


def verdict_at(record: dict, step: int, settings: VerdictSettings | None = None):
    """The verdict replayed on what the run had shown by ``step`` (``core.verdict.judge``)."""
    return judge(evidence_of(record).until(step), settings)


def loss_trend_score(evidence: Evidence, step: int, hold: float) -> float:
    """The plain training-loss trend rule: the least-squares slope of the losses logged over the last ``hold``
    steps up to ``step`` (the higher, the less the loss falls); NaN with fewer than three."""
    window = [(s, v) for s, v in evidence.losses if step - hold < s <= step and math.isfinite(v)]
    if len(window) < 3:
        return math.nan
    x = np.array([s for s, _ in window], dtype=np.float64)
    y = np.array([v for _, v in window], dtype=np.float64)
    x -= x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum()) if (x * x).sum() > 0 else math.nan


def scores(record: dict, fraction: float | None, settings: VerdictSettings) -> dict[str, float]:
    """Each failure score of one run at ``fraction`` of its training (None: the end), higher = more likely
    failed: the verdict's rank (failing first, then the smallest margin of learning), the early dev score's
    distance below the majority's on the seen dev half (Dodge et al.'s baseline), the last logged training loss,
    the training loss's trend over the last ``hold_share`` of training, and the verdict the run judged live."""
    step = record["steps"] if fraction is None else at_fraction(record, fraction)
    evidence = evidence_of(record).until(step)
    verdict = judge(evidence, settings)
    out = {"verdict": verdict.rank if verdict is not None else math.nan}
    out["level"] = float(verdict.level) if verdict is not None else math.nan
    out["cannot tell"] = float(verdict.level == 0 and not verdict.known) if verdict is not None else math.nan
    live = [level for at, level, *_ in record["live_verdicts"] if at <= step]
    out["live verdict"] = float(live[-1]) if live else math.nan
    early = record["early"].get(str(step)) if fraction is not None else None
    if early is not None:
        y = np.asarray(record["seen_labels"])
        out["dev score"] = -(metric(record["task"])(np.asarray(early), y) - majority_score(record["task"], y))
    out["training loss"] = evidence.losses[-1][1] if evidence.losses else math.nan
    out["loss trend"] = loss_trend_score(evidence, step, settings.hold_share * record["steps"])
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
