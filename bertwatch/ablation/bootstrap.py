"""Paired bootstrap over evaluation examples: a 95% interval and a p-value for every change of a metric.

Resample ``n`` example indices with replacement ``R`` times (seeded). On each resample compute the metric of the
baseline and of every configuration on the *same* examples; the deltas form the bootstrap distribution.

* interval: the percentiles ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` of the deltas;
* p-value (two-sided, percentile inversion):
  ``p = min(1, 2 * min(1 + #{delta_b <= 0}, 1 + #{delta_b >= 0}) / (R + 1))``, so a configuration that changes
  no prediction gets p = 1 and ``p < 1 - confidence`` roughly when the interval excludes 0.

The GLUE metrics (accuracy, F1, Matthews, Pearson, Spearman) are vectorised over resamples: a resample is a row
of counts ``W[r, i]`` (how often example i was drawn), and each metric is a function of weighted sums, so all
resamples and all configurations cost a few matrix products. Any other metric is called once per resample.
Resamples on which a metric is undefined (e.g. Pearson of constant predictions) are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "additive_bootstrap",
    "BootstrapResult",
    "KERNELS",
    "bootstrap_p",
    "kernel_name",
    "metric_on_counts",
    "paired_bootstrap",
    "resample_counts",
    "resample_indices",
]

#: Metric names with a vectorised implementation, and their aliases.
KERNELS = {
    "accuracy": "accuracy",
    "acc": "accuracy",
    "f1": "f1",
    "matthews_correlation": "matthews_correlation",
    "matthews": "matthews_correlation",
    "mcc": "matthews_correlation",
    "pearson": "pearson",
    "pearsonr": "pearson",
    "spearmanr": "spearmanr",
    "spearman": "spearmanr",
}

MetricFn = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class BootstrapResult:
    """Per configuration (``[K]`` arrays): metric value, delta to the baseline, its interval and p-value."""

    baseline: float
    value: np.ndarray
    delta: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    p: np.ndarray
    n_resamples: int
    seed: int
    confidence: float

    def cells(self) -> np.ndarray:
        """``[K, 5]`` float64: value, delta, ci_low, ci_high, p (the order of the ablation tables)."""
        return np.stack([self.value, self.delta, self.ci_low, self.ci_high, self.p], axis=1)


def kernel_name(metric: str) -> str | None:
    """The vectorised metric behind a name (``"acc"`` -> ``"accuracy"``), or None when there is none."""
    return KERNELS.get(metric.lower())


def resample_indices(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """``[R, n]`` example indices drawn with replacement by ``numpy.random.default_rng(seed)``."""
    if n <= 0:
        raise ValueError("the bootstrap needs at least one example")
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def resample_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """``[R, n]`` float64: how often each example is drawn in each resample of :func:`resample_indices`."""
    idx = resample_indices(n, n_resamples, seed)
    flat = idx + n * np.arange(n_resamples)[:, None]
    return np.bincount(flat.ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(np.float64)


def _accuracy(preds: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    correct = (preds == labels[None, :]).astype(np.float64)
    return (correct @ w.T) / w.sum(1)[None, :]


def _f1(preds: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = labels[None, :] == 1
    p = preds == 1
    tp = (p & y).astype(np.float64) @ w.T
    fp = (p & ~y).astype(np.float64) @ w.T
    fn = (~p & y).astype(np.float64) @ w.T
    denom = 2 * tp + fp + fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def _matthews(preds: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Multi-class MCC from weighted confusion counts (scikit-learn's formula; 0 when undefined)."""
    classes = np.union1d(np.unique(labels), np.unique(preds))
    k, r = preds.shape[0], w.shape[0]
    conf = np.zeros((k, r, len(classes), len(classes)))
    for i, ci in enumerate(classes):
        yi = labels == ci
        for j, cj in enumerate(classes):
            conf[:, :, i, j] = ((preds == cj) & yi[None, :]).astype(np.float64) @ w.T
    t = conf.sum(3)
    p = conf.sum(2)
    c = np.trace(conf, axis1=2, axis2=3)
    s = conf.sum((2, 3))
    cov_ytyp = c * s - (t * p).sum(-1)
    cov_ypyp = s**2 - (p * p).sum(-1)
    cov_ytyt = s**2 - (t * t).sum(-1)
    denom = cov_ytyt * cov_ypyp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, cov_ytyp / np.sqrt(np.where(denom > 0, denom, 1)), 0.0)


def _weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson r per resample: x, y ``[R, n]`` or ``[n]``, weights ``[R, n]``; NaN where a side is constant."""
    x, y = np.broadcast_to(x, w.shape), np.broadcast_to(y, w.shape)
    drawn = w > 0
    total = w.sum(-1)
    mx = (w * x).sum(-1) / total
    my = (w * y).sum(-1) / total
    dx = x - mx[:, None]
    dy = y - my[:, None]
    sxy = (w * dx * dy).sum(-1)
    sxx = (w * dx * dx).sum(-1)
    syy = (w * dy * dy).sum(-1)
    ok = _varies(x, drawn) & _varies(y, drawn)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(ok, sxy / np.sqrt(np.where(ok, sxx * syy, 1)), np.nan)
    return np.clip(r, -1.0, 1.0)


def _varies(x: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """Whether the drawn values of each row are not all equal."""
    return np.where(drawn, x, -np.inf).max(-1) > np.where(drawn, x, np.inf).min(-1)


def _pearson(preds: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = labels.astype(np.float64)
    return np.stack([_weighted_pearson(p.astype(np.float64), y, w) for p in preds])


def _midranks(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``[R, n]`` average ranks (1-based, ties share their mean rank) of ``values`` within each weighted resample."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    group_of_sorted = np.cumsum(np.r_[True, sorted_values[1:] != sorted_values[:-1]]) - 1
    group_weight = np.add.reduceat(w[:, order], starts, axis=1)
    before = np.cumsum(group_weight, axis=1) - group_weight
    midrank = before + (group_weight + 1) / 2
    ranks = np.empty_like(w)
    ranks[:, order] = midrank[:, group_of_sorted]
    return ranks


def _spearman(preds: np.ndarray, labels: np.ndarray, w: np.ndarray) -> np.ndarray:
    label_ranks = _midranks(labels.astype(np.float64), w)
    out = np.empty((preds.shape[0], w.shape[0]))
    for k in range(preds.shape[0]):
        out[k] = _weighted_pearson(_midranks(preds[k].astype(np.float64), w), label_ranks, w)
    return out


_KERNELS = {
    "accuracy": _accuracy,
    "f1": _f1,
    "matthews_correlation": _matthews,
    "pearson": _pearson,
    "spearmanr": _spearman,
}


def metric_on_counts(metric: str, preds: np.ndarray, labels: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A GLUE metric of K prediction vectors on R weighted resamples: preds ``[K, n]``, counts ``[R, n]`` -> ``[K, R]``.

    With ``counts`` a row of ones this is the metric on the whole set.
    """
    name = kernel_name(metric)
    if name is None:
        raise ValueError(f"no vectorised bootstrap for metric {metric!r}; pass a function instead")
    preds = np.asarray(preds)
    if preds.ndim == 1:
        preds = preds[None, :]
    labels = np.asarray(labels)
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim == 1:
        counts = counts[None, :]
    if preds.shape[1] != labels.shape[0] or counts.shape[1] != labels.shape[0]:
        raise ValueError(f"predictions {preds.shape}, labels {labels.shape} and counts {counts.shape} disagree on n")
    return _KERNELS[name](preds, labels, counts)


def bootstrap_p(deltas: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p-value of each row of ``deltas`` ``[K, R]`` (NaNs dropped); see the module docstring."""
    deltas = np.atleast_2d(deltas)
    finite = np.isfinite(deltas)
    r = finite.sum(1)
    below = ((deltas <= 0) & finite).sum(1)
    above = ((deltas >= 0) & finite).sum(1)
    p = 2 * np.minimum(below + 1, above + 1) / (r + 1)
    return np.where(r > 0, np.minimum(p, 1.0), np.nan)


def _summarise(deltas: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo_q, hi_q = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    lows, highs = np.full(len(deltas), np.nan), np.full(len(deltas), np.nan)
    for k, row in enumerate(deltas):
        row = row[np.isfinite(row)]
        if row.size:
            lows[k], highs[k] = np.percentile(row, [lo_q, hi_q])
    return lows, highs, bootstrap_p(deltas)


def paired_bootstrap(
    baseline: np.ndarray,
    configs: np.ndarray,
    labels: np.ndarray,
    metric: str | MetricFn,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Paired bootstrap of ``metric(config) - metric(baseline)`` for every configuration.

    ``baseline``: predictions ``[n, ...]``; ``configs``: ``[K, n, ...]``; ``labels``: ``[n, ...]``. ``metric`` is
    a vectorised name (see :data:`KERNELS`) or a function ``(predictions, labels) -> float`` called on each
    resample (the arrays are indexed along their first axis, so logits work too).
    """
    baseline = np.asarray(baseline)
    configs = np.asarray(configs)
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n == 0:
        raise ValueError("the bootstrap needs at least one evaluation example")
    if configs.ndim == baseline.ndim:
        configs = configs[None]
    if baseline.shape[0] != n or configs.shape[1] != n:
        raise ValueError(
            f"baseline {baseline.shape}, configurations {configs.shape} and labels {labels.shape} disagree"
        )
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    everything = np.concatenate([baseline[None], configs], axis=0)
    if isinstance(metric, str):
        ones = np.ones((1, n))
        point = metric_on_counts(metric, everything, labels, ones)[:, 0]
        samples = metric_on_counts(metric, everything, labels, resample_counts(n, n_resamples, seed))
    else:
        point = np.array([metric(p, labels) for p in everything], dtype=np.float64)
        idx = resample_indices(n, n_resamples, seed)
        samples = np.array([[metric(p[i], labels[i]) for i in idx] for p in everything], dtype=np.float64)
    return _result(point, samples, n_resamples, seed, confidence)


def additive_bootstrap(
    baseline: np.ndarray,
    configs: np.ndarray,
    combine: Callable[[np.ndarray], np.ndarray],
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapResult:
    """Paired bootstrap of a metric ``combine(Σ_i parts_i)`` of per-example parts (entity counts, exact matches,
    ...): ``baseline`` ``[n, k]``, ``configs`` ``[K, n, k]``; each resample is ``combine(counts @ parts)``, the
    same resamples as :func:`paired_bootstrap`."""
    baseline = np.asarray(baseline, dtype=np.float64)
    configs = np.asarray(configs, dtype=np.float64).reshape(-1, *baseline.shape)
    n = baseline.shape[0]
    if n == 0:
        raise ValueError("the bootstrap needs at least one evaluation example")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    everything = np.concatenate([baseline[None], configs], axis=0)  # [K+1, n, k]
    point = np.asarray(combine(everything.sum(1)), dtype=np.float64)
    counts = resample_counts(n, n_resamples, seed)
    samples = np.asarray(combine(np.einsum("rn,cnk->crk", counts, everything)), dtype=np.float64)
    return _result(point, samples, n_resamples, seed, confidence)


def _result(point: np.ndarray, samples: np.ndarray, n_resamples: int, seed: int, confidence: float) -> BootstrapResult:
    """The baseline-first point values ``[K+1]`` and resampled values ``[K+1, R]`` as deltas with intervals."""
    lows, highs, p = _summarise(samples[1:] - samples[:1], confidence)
    return BootstrapResult(
        baseline=float(point[0]),
        value=point[1:],
        delta=point[1:] - point[0],
        ci_low=lows,
        ci_high=highs,
        p=p,
        n_resamples=int(n_resamples),
        seed=int(seed),
        confidence=float(confidence),
    )
