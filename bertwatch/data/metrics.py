"""GLUE metrics computed offline (scikit-learn / scipy), the same definitions as GLUE's own evaluation."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bertwatch.data.glue import glue_task

__all__ = ["glue_metrics", "primary_metric", "metric_fn", "predictions_from_logits", "METRICS"]

Metric = Callable[[np.ndarray, np.ndarray], float]


def _accuracy(p: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(p == y))


def _f1(p: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y, p, zero_division=0.0))


def _matthews(p: np.ndarray, y: np.ndarray) -> float:
    from sklearn.metrics import matthews_corrcoef

    return float(matthews_corrcoef(y, p))


def _pearson(p: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import pearsonr

    if np.std(p) == 0 or np.std(y) == 0:
        return float("nan")
    return float(pearsonr(p, y)[0])


def _spearman(p: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if np.std(p) == 0 or np.std(y) == 0:
        return float("nan")
    return float(spearmanr(p, y)[0])


METRICS: dict[str, Metric] = {
    "accuracy": _accuracy,
    "f1": _f1,
    "matthews_correlation": _matthews,
    "pearson": _pearson,
    "spearmanr": _spearman,
}

_TASK_METRICS = {
    "cola": ("matthews_correlation",),
    "mrpc": ("f1", "accuracy"),
    "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearmanr"),
}


def _names(task: str) -> tuple[str, ...]:
    return _TASK_METRICS.get(glue_task(task).name, ("accuracy",))


def primary_metric(task: str) -> str:
    """The metric GLUE reports first for ``task`` (F1 for MRPC/QQP, Matthews for CoLA, Pearson for STS-B)."""
    return _names(task)[0]


def metric_fn(task: str, name: str | None = None) -> Metric:
    """A function (predictions, labels) -> float for one of the task's metrics (its primary one by default)."""
    name = name or primary_metric(task)
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose one of {', '.join(METRICS)}")
    return METRICS[name]


def glue_metrics(task: str, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Every GLUE metric of ``task`` on class predictions (or scores, for STS-B)."""
    p, y = np.asarray(predictions), np.asarray(labels)
    if p.shape != y.shape:
        raise ValueError(f"{len(p)} predictions for {len(y)} labels")
    return {name: METRICS[name](p, y) for name in _names(task)}


def predictions_from_logits(task: str, logits: np.ndarray) -> np.ndarray:
    """Class ids (argmax) or, for regression tasks, the single output as a score."""
    logits = np.asarray(logits)
    if glue_task(task).is_regression:
        return logits.reshape(len(logits), -1)[:, 0]
    return logits.argmax(-1)
