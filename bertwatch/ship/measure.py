"""What each shipped variant costs against the float32 export, as pure functions of predictions: the task metric
with its paired-bootstrap interval (``bertwatch.ablation.bootstrap.paired_bootstrap``, every variant on the same
resamples of the same examples), the share of examples whose prediction is unchanged, and how many predictions
another batching of the same examples changes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from bertwatch.ablation.bootstrap import kernel_name, metric_on_counts, paired_bootstrap, resample_counts
from bertwatch.core.baseline import ConstantComparison, compare_with_constant
from bertwatch.core.task_names import metric_label

__all__ = ["agreement", "batch_dependence", "compare_variants", "against_constant", "size_mb"]

#: The metrics of class predictions with a vectorised paired bootstrap.
_CLASS_METRICS = ("accuracy", "f1", "matthews_correlation")


def agreement(reference: np.ndarray, predictions: np.ndarray) -> float:
    """Share of examples whose predicted class equals the reference's.

    Args:
        reference: ``[n]`` class ids.
        predictions: ``[n]`` class ids.

    Returns:
        A share in [0, 1].

    Raises:
        ValueError: no examples, or the two disagree on n.

    Example:
        >>> agreement(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0]))
        0.75
    """
    reference, predictions = np.asarray(reference), np.asarray(predictions)
    if reference.shape != predictions.shape or reference.size == 0:
        raise ValueError(f"cannot compare {predictions.shape} predictions with {reference.shape} reference ones")
    return float(np.mean(reference == predictions))


def compare_variants(
    reference: np.ndarray,
    variants: Mapping[str, np.ndarray],
    labels: np.ndarray,
    metric: str = "accuracy",
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    reference_name: str = "reference",
) -> dict[str, dict[str, float]]:
    """The metric of the reference and of every variant, each variant's change with its paired-bootstrap interval
    and p-value, and its agreement with the reference.

    Args:
        reference: ``[n]`` class predictions of the reference (the float32 export).
        variants: name -> ``[n]`` class predictions on the same examples, in the same order.
        labels: ``[n]`` gold class ids.
        metric: a metric with a vectorised bootstrap (``accuracy``, ``f1``, ``matthews_correlation``).
        n_resamples: bootstrap resamples (``numpy.random.default_rng(seed)``).
        seed: the resamples' seed.
        confidence: the interval's level.
        reference_name: the reference's key in the result.

    Returns:
        ``{name: {"value", "delta", "ci_low", "ci_high", "p", "agreement"}}`` with ``reference_name`` first (its delta 0,
        interval [0, 0], p 1, agreement 1).

    Raises:
        ValueError: no examples, shapes that disagree, or a metric that is not one of class predictions.

    Example:
        >>> table = compare_variants(np.array([1, 0, 1, 1]), {"int8": np.array([1, 0, 0, 1])},
        ...                          np.array([1, 0, 1, 0]), n_resamples=200)
        >>> table["reference"]["value"], table["int8"]["value"], table["int8"]["agreement"]
        (0.75, 0.5, 0.75)
    """
    if kernel_name(metric) not in _CLASS_METRICS:
        raise ValueError(f"no paired bootstrap for metric {metric!r}: use accuracy, f1 or matthews_correlation")
    reference, labels = np.asarray(reference), np.asarray(labels)
    names = list(variants)
    table = {reference_name: {"value": 0.0, "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p": 1.0, "agreement": 1.0}}
    if not names:
        table[reference_name]["value"] = float(
            paired_bootstrap(reference, reference[None], labels, metric, 1, seed, confidence).baseline
        )
        return table
    stacked = np.stack([np.asarray(variants[name]) for name in names])
    result = paired_bootstrap(reference, stacked, labels, metric, n_resamples, seed, confidence)
    table[reference_name]["value"] = result.baseline
    for k, name in enumerate(names):
        table[name] = {
            "value": float(result.value[k]),
            "delta": float(result.delta[k]),
            "ci_low": float(result.ci_low[k]),
            "ci_high": float(result.ci_high[k]),
            "p": float(result.p[k]),
            "agreement": agreement(reference, stacked[k]),
        }
    return table


def batch_dependence(
    served: Mapping[str, np.ndarray], batched: Mapping[str, np.ndarray], labels: np.ndarray, metric: str = "accuracy"
) -> dict[str, dict[str, float]]:
    """How much each variant's predictions depend on how the examples are batched: the examples whose predicted
    class differs between two batchings of the same set, and the metric at the second one.

    Args:
        served: name -> ``[n]`` class predictions at the serving batching (the table's metric).
        batched: name -> ``[n]`` class predictions of the same examples, in the same order, at another batching.
        labels: ``[n]`` gold class ids.
        metric: ``accuracy``, ``f1`` or ``matthews_correlation``.

    Returns:
        ``{name: {"changed": number of examples whose prediction differs, "value": the metric at the other
        batching}}``, for every name of ``served``.

    Raises:
        ValueError: a name of ``served`` missing from ``batched``, shapes that disagree, or another metric.

    Example:
        >>> batch_dependence({"int8": np.array([1, 0, 1])}, {"int8": np.array([1, 1, 1])}, np.array([1, 0, 0]))
        {'int8': {'changed': 1, 'value': 0.3333333333333333}}
    """
    if kernel_name(metric) not in _CLASS_METRICS:
        raise ValueError(f"no metric of class predictions named {metric!r}: use accuracy, f1 or matthews_correlation")
    missing = [name for name in served if name not in batched]
    if missing:
        raise ValueError(f"no predictions at the other batching for {missing}")
    labels = np.asarray(labels)
    result = {}
    for name, predictions in served.items():
        predictions, other = np.asarray(predictions), np.asarray(batched[name])
        if predictions.shape != other.shape or other.shape != labels.shape:
            raise ValueError(f"{name}: predictions {predictions.shape} and {other.shape}, labels {labels.shape}")
        value = float(metric_on_counts(metric, other, labels, np.ones(len(labels)))[0, 0])
        result[name] = {"changed": int(np.count_nonzero(predictions != other)), "value": value}
    return result


def against_constant(
    served: Mapping[str, np.ndarray],
    labels: np.ndarray,
    num_classes: int,
    metric: str = "accuracy",
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    classes: tuple[str, ...] = (),
) -> ConstantComparison:
    """Every variant against the constant answer on the same examples (:mod:`bertwatch.core.baseline`): its metric
    minus the constant's with a paired-bootstrap interval (the resamples of :func:`compare_variants`), and the share
    of each predicted class.

    Args:
        served: name -> ``[n]`` class predictions at the serving batch (the reference first).
        labels: ``[n]`` gold class ids.
        num_classes: C.
        metric: ``accuracy``, ``f1`` or ``matthews_correlation``.
        n_resamples: bootstrap resamples (``numpy.random.default_rng(seed)``).
        seed: the resamples' seed.
        confidence: the interval's level.
        classes: the classes' names (:func:`bertwatch.core.baseline.class_names`).

    Returns:
        A :class:`~bertwatch.core.baseline.ConstantComparison` with one row per variant, in ``served``'s order.

    Raises:
        ValueError: another metric, or shapes that disagree.

    Example:
        >>> found = against_constant({"fp32": np.ones(10, int)}, np.array([1] * 7 + [0] * 3), 2, "f1", 200)
        >>> round(found.value, 4), found.no_better(), found.collapsed()
        (0.8235, True, 1)
    """
    name = kernel_name(metric)
    if name not in _CLASS_METRICS:
        raise ValueError(f"no metric of class predictions named {metric!r}: use accuracy, f1 or matthews_correlation")
    labels = np.asarray(labels)
    return compare_with_constant(
        np.stack([np.asarray(p) for p in served.values()]),
        labels,
        lambda p, y, w: metric_on_counts(name, p, y, w),
        resample_counts(len(labels), n_resamples, seed),
        metric=name,
        label=metric_label(name),
        num_classes=num_classes,
        classes=classes,
        rows=tuple(served),
        confidence=confidence,
    )


def size_mb(size_bytes: int) -> float:
    """A file size in megabytes of 10^6 bytes.

    Example:
        >>> size_mb(90_988_134)
        90.988134
    """
    return size_bytes / 1e6
