"""How a configuration's logits are scored: the task metric on the whole set and inside the paired bootstrap."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from bertwatch.ablation.bootstrap import (
    additive_bootstrap,
    kernel_name,
    metric_on_counts,
    paired_bootstrap,
    resample_counts,
)
from bertwatch.core.baseline import ConstantComparison, compare_with_constant
from bertwatch.core.task_names import metric_label

logger = logging.getLogger(__name__)


@dataclass
class Metric:
    """How to score logits ``[n, C]``: the value on the whole set and the paired bootstrap's metric."""

    name: str
    labels: np.ndarray
    predictions: Callable[[np.ndarray], np.ndarray]
    score: Callable[[np.ndarray], float]
    kernel: str | None
    on_logits: Callable[[np.ndarray, np.ndarray], float] | None = None
    all_metrics: Callable[[np.ndarray], dict[str, float]] | None = None
    #: For a metric of summed per-example parts (``predictions`` gives the parts ``[n, k]``): sums -> value.
    combine: Callable[[np.ndarray], np.ndarray] | None = None
    #: False for a metric where lower is better whatever the settings say (masked-LM loss, perplexity).
    greater_is_better: bool = True

    def bootstrap(
        self, baseline: np.ndarray, configs: list[np.ndarray], n_resamples: int, seed: int, confidence: float
    ):
        if self.combine is not None:
            parts = np.stack([self.predictions(c) for c in configs])
            return additive_bootstrap(self.predictions(baseline), parts, self.combine, n_resamples, seed, confidence)
        if self.kernel is not None:
            preds = np.stack([self.predictions(c) for c in configs])
            return paired_bootstrap(
                self.predictions(baseline), preds, self.labels, self.kernel, n_resamples, seed, confidence
            )
        return paired_bootstrap(baseline, np.stack(configs), self.labels, self.on_logits, n_resamples, seed, confidence)


def _default_predictions(regression: bool) -> Callable[[np.ndarray], np.ndarray]:
    def predictions(logits: np.ndarray) -> np.ndarray:
        logits = np.asarray(logits)
        return logits.reshape(len(logits), -1)[:, 0] if regression else logits.argmax(-1)

    return predictions


def make_metric(
    task: str | None, compute_metrics: Callable | None, metric: str | None, labels: np.ndarray, regression: bool
) -> Metric:
    predictions = _default_predictions(regression)
    if compute_metrics is not None:
        from transformers import EvalPrediction

        def full(logits: np.ndarray, lab: np.ndarray = labels) -> dict[str, float]:
            values = compute_metrics(EvalPrediction(predictions=logits, label_ids=lab))
            return {k: float(v) for k, v in values.items() if isinstance(v, (int, float, np.floating, np.integer))}

        name = metric[len("eval_") :] if metric and metric.startswith("eval_") else metric
        spec = Metric(name or "", labels, predictions, lambda logits: 0.0, None, all_metrics=full)

        def named(values: Mapping[str, float]) -> float:
            if not spec.name:
                spec.name = _pick_metric(values, task)
            if spec.name not in values:
                raise ValueError(f"compute_metrics returned {sorted(values)}, not the metric {spec.name!r}")
            return values[spec.name]

        spec.score = lambda logits: named(full(logits))
        spec.on_logits = lambda logits, lab: named(full(logits, lab))
        return spec
    if task is not None:
        from bertwatch.data.metrics import glue_metrics, metric_fn, predictions_from_logits, primary_metric

        name = metric or primary_metric(task)
        fn = metric_fn(task, name)

        def task_predictions(logits: np.ndarray) -> np.ndarray:
            return predictions_from_logits(task, logits)

        return Metric(
            name,
            labels,
            task_predictions,
            lambda logits: fn(task_predictions(logits), labels),
            kernel_name(name),
            on_logits=lambda logits, lab: fn(task_predictions(logits), lab),
            all_metrics=lambda logits: glue_metrics(task, task_predictions(logits), labels),
        )
    name = metric or ("pearson" if regression else "accuracy")
    if kernel_name(name) is None:
        raise ValueError(
            f"metric {name!r} needs a task or compute_metrics; built in: accuracy, f1, "
            "matthews_correlation, pearson, spearmanr"
        )

    def score(logits: np.ndarray) -> float:
        return float(metric_on_counts(name, predictions(logits)[None], labels, np.ones((1, len(labels))))[0, 0])

    return Metric(name, labels, predictions, score, kernel_name(name), all_metrics=lambda logits: {name: score(logits)})


def _pick_metric(values: Mapping[str, float], task: str | None) -> str:
    if task is not None:
        from bertwatch.data.metrics import primary_metric

        if primary_metric(task) in values:
            return primary_metric(task)
    for preferred in ("accuracy", "f1", "matthews_correlation", "pearson"):
        if preferred in values:
            return preferred
    if not values:
        raise ValueError("compute_metrics returned no numeric metric")
    return next(iter(values))


def settle_metric(metric: Metric, logits: Mapping[str, np.ndarray]) -> None:
    """With compute_metrics: fix the metric's name and use the vectorised bootstrap when the user's function
    gives exactly what the built-in one gives on every configuration (else call it once per resample)."""
    if metric.all_metrics is None or metric.kernel is not None or metric.combine is not None:
        return
    if np.asarray(metric.labels).ndim != 1:  # token labels, QA spans, multi-label: no built-in to compare with
        metric.score(next(iter(logits.values())))
        return
    metric.score(next(iter(logits.values())))
    name = kernel_name(metric.name)
    if name is None:
        return
    ones = np.ones((1, len(metric.labels)))
    for value in logits.values():
        theirs = metric.score(value)
        ours = float(metric_on_counts(name, metric.predictions(value)[None], metric.labels, ones)[0, 0])
        if not (math.isclose(theirs, ours, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(theirs) and math.isnan(ours))):
            logger.info(
                "compute_metrics' %s differs from the built-in one; bootstrapping it resample by resample", metric.name
            )
            return
    metric.kernel = name


def parts_metric(
    kind: str, parts: Callable[[np.ndarray], np.ndarray], labels: np.ndarray, metric: str | None
) -> Metric:
    """A task metric of summed per-example parts (entity F1, exact match, micro-F1, ...): ``metric`` picks one
    of the task's metrics (default: its first), all of them are reported for the baseline."""
    from bertwatch.data.task_metrics import ADDITIVE_METRICS

    metrics = {m.name: m for m in ADDITIVE_METRICS[kind]}
    name = metric[len("eval_") :] if metric and metric.startswith("eval_") else metric
    name = name or next(iter(metrics))
    if name not in metrics:
        raise ValueError(f"metric {name!r} is not one of this task's metrics: {', '.join(metrics)}")
    chosen = metrics[name]
    return Metric(
        name,
        labels,
        parts,
        lambda outputs: float(chosen(parts(outputs).sum(0))),
        None,
        all_metrics=lambda outputs: {n: float(m(parts(outputs).sum(0))) for n, m in metrics.items()},
        combine=chosen,
        greater_is_better=chosen.greater_is_better,
    )


#: Task metrics that are a mean of per-example scores in [0, 1] (one example's share is 1/n).
_MEAN_METRICS = ("exact_match", "squad_f1")


def one_example_change(metric: Metric, logits: np.ndarray) -> tuple[float | None, str]:
    """The largest change of ``metric`` one example makes, on the baseline's outputs ``logits``, and how it was
    measured (:mod:`bertwatch.core.resolution`): ``"flip"`` (one example's predicted class changes: 1/n for
    accuracy, the largest such change of F1 or Matthews on the confusion counts), ``"left out"`` (one example left
    out: correlations and metrics of summed per-example counts), or ``(None, "")`` for a metric it cannot take
    apart (a ``compute_metrics`` without a built-in equal)."""
    n = len(metric.labels)
    if metric.kernel == "accuracy" or (metric.combine is not None and metric.name in _MEAN_METRICS):
        return 1.0 / n, "flip"
    if metric.combine is not None:
        parts = np.asarray(metric.predictions(logits), dtype=np.float64)
        total = parts.sum(0)
        base = float(metric.combine(total))
        with np.errstate(invalid="ignore", divide="ignore"):
            left = np.asarray(metric.combine(total[None] - parts), dtype=np.float64)
        return _largest(left - base), "left out"
    if metric.kernel in ("f1", "matthews_correlation"):
        return _largest_flip(metric, logits), "flip"
    if metric.kernel in ("pearson", "spearmanr"):
        preds = metric.predictions(logits)[None]
        base = metric_on_counts(metric.kernel, preds, metric.labels, np.ones((1, n)))[0, 0]
        changes = []
        for start in range(0, n, 256):  # one row of weights per example left out, 256 rows at a time
            rows = np.ones((min(256, n - start), n))
            rows[np.arange(len(rows)), start + np.arange(len(rows))] = 0.0
            changes.append(metric_on_counts(metric.kernel, preds, metric.labels, rows)[0] - base)
        return _largest(np.concatenate(changes)), "left out"
    return None, ""


def _largest(changes: np.ndarray) -> float | None:
    finite = np.abs(changes[np.isfinite(changes)])
    return float(finite.max()) if finite.size else None


def _largest_flip(metric: Metric, logits: np.ndarray) -> float | None:
    """The largest change of a metric of predicted classes when one example's prediction moves to another class:
    one example of each (label, prediction) pair tried with every other class."""
    preds = np.asarray(metric.predictions(logits))
    labels = np.asarray(metric.labels)
    classes = np.union1d(np.unique(labels), np.unique(preds))
    if np.asarray(logits).ndim == 2 and np.asarray(logits).shape[1] > 1:
        classes = np.union1d(classes, np.arange(np.asarray(logits).shape[1]))
    variants = []
    for y, p in {(a, b) for a, b in zip(labels.tolist(), preds.tolist())}:
        i = int(np.flatnonzero((labels == y) & (preds == p))[0])
        for q in classes:
            if q != p:
                changed = preds.copy()
                changed[i] = q
                variants.append(changed)
    if not variants:
        return None
    ones = np.ones((1, len(labels)))
    base = metric_on_counts(metric.kernel, preds[None], labels, ones)[0, 0]
    return _largest(metric_on_counts(metric.kernel, np.stack(variants), labels, ones)[:, 0] - base)


def constant_comparison(
    metric: Metric, logits: np.ndarray, classes: tuple[str, ...], n_resamples: int, seed: int, confidence: float
) -> ConstantComparison | None:
    """The model's outputs ``logits`` (``[n, C]``, or ``[n, 1]`` for a regression) against the constant answer on
    the same examples and the bootstrap's resamples (:mod:`bertwatch.core.baseline`); None for a metric without a
    vectorised form or labels that are not one per example (token labels, spans, label lists)."""
    labels = np.asarray(metric.labels)
    if metric.kernel is None or metric.combine is not None or labels.ndim != 1:
        return None
    logits = np.asarray(logits)
    regression = metric.kernel in ("pearson", "spearmanr")
    num_classes = None if regression else int(logits.reshape(len(logits), -1).shape[1])
    kernel = metric.kernel
    return compare_with_constant(
        metric.predictions(logits),
        labels if regression else labels.astype(np.int64),
        lambda p, y, w: metric_on_counts(kernel, p, y, w),
        resample_counts(len(labels), n_resamples, seed),
        metric=kernel,
        label=metric_label(metric.name),
        num_classes=num_classes,
        classes=classes,
        confidence=confidence,
    )
