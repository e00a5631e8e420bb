"""Paired bootstrap: vectorised GLUE metrics and intervals against plain loops over resamples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import f1_score, matthews_corrcoef

from bertwatch.ablation.bootstrap import (
    bootstrap_p,
    metric_on_counts,
    paired_bootstrap,
    resample_counts,
    resample_indices,
)
from bertwatch.core.significance import benjamini_hochberg
from bertwatch.data.metrics import metric_fn


def _plain(name: str, p: np.ndarray, y: np.ndarray) -> float:
    if name == "accuracy":
        return float(np.mean(p == y))
    if name == "f1":
        return float(f1_score(y, p, zero_division=0.0))
    if name == "matthews_correlation":
        return float(matthews_corrcoef(y, p))
    if np.all(p == p[0]) or np.all(y == y[0]):
        return float("nan")
    if name == "pearson":
        return float(pearsonr(p, y)[0])
    return float(spearmanr(p, y)[0])


def _data(name: str, n: int, k: int, seed: int = 0, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if name in ("pearson", "spearmanr"):
        labels = np.round(rng.uniform(0, 5, n), 1)  # STS-B-like scores with ties
        preds = np.round(labels[None] + rng.normal(0, 1.5, (k, n)), 1)
        return preds, labels
    labels = rng.integers(0, classes, n)
    flip = rng.random((k, n)) < 0.3
    preds = np.where(flip, rng.integers(0, classes, (k, n)), labels[None])
    return preds, labels


@pytest.mark.parametrize("name", ["accuracy", "f1", "matthews_correlation", "pearson", "spearmanr"])
def test_vectorised_metric_equals_a_loop_over_resamples(name: str) -> None:
    preds, labels = _data(name, n=37, k=3)
    idx = resample_indices(37, 50, seed=3)
    fast = metric_on_counts(name, preds, labels, resample_counts(37, 50, seed=3))
    slow = np.array([[_plain(name, p[i], labels[i]) for i in idx] for p in preds])
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_multiclass_matthews_equals_sklearn() -> None:
    preds, labels = _data("matthews_correlation", n=41, k=2, classes=3)
    idx = resample_indices(41, 30, seed=1)
    fast = metric_on_counts("mcc", preds, labels, resample_counts(41, 30, seed=1))
    slow = np.array([[matthews_corrcoef(labels[i], p[i]) for i in idx] for p in preds])
    np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["accuracy", "f1", "matthews_correlation", "pearson", "spearmanr"])
def test_whole_set_value_equals_the_glue_metric(name: str) -> None:
    preds, labels = _data(name, n=60, k=1, seed=5)
    task = {"f1": "mrpc", "matthews_correlation": "cola", "pearson": "stsb", "spearmanr": "stsb"}.get(name, "sst2")
    ours = metric_on_counts(name, preds, labels, np.ones((1, 60)))[0, 0]
    assert ours == pytest.approx(metric_fn(task, name)(preds[0], labels), rel=1e-12, abs=1e-12)


def test_constant_predictions_give_nan_correlation_and_zero_f1() -> None:
    labels = np.array([0.0, 1.0, 2.0, 3.0])
    assert np.isnan(metric_on_counts("pearson", np.full((1, 4), 2.0), labels, np.ones((1, 4)))[0, 0])
    assert metric_on_counts("f1", np.zeros((1, 4), dtype=int), np.zeros(4, dtype=int), np.ones((1, 4)))[0, 0] == 0.0


def _plain_bootstrap(base, configs, labels, name, n_resamples, seed, confidence):
    """The definition, one resample at a time."""
    idx = resample_indices(len(labels), n_resamples, seed)
    rows = []
    for p in configs:
        deltas = np.array([_plain(name, p[i], labels[i]) - _plain(name, base[i], labels[i]) for i in idx])
        deltas = deltas[np.isfinite(deltas)]
        lo, hi = np.percentile(deltas, [100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2])
        below = sum(d <= 0 for d in deltas)
        above = sum(d >= 0 for d in deltas)
        p_value = min(1.0, 2 * min(below + 1, above + 1) / (len(deltas) + 1))
        delta = _plain(name, p, labels) - _plain(name, base, labels)
        rows.append((delta, lo, hi, p_value))
    return np.array(rows)


@pytest.mark.parametrize("name", ["accuracy", "f1", "matthews_correlation", "spearmanr"])
def test_paired_bootstrap_equals_the_plain_definition(name: str) -> None:
    preds, labels = _data(name, n=45, k=4, seed=2)
    result = paired_bootstrap(preds[0], preds[1:], labels, name, n_resamples=200, seed=11, confidence=0.9)
    expected = _plain_bootstrap(preds[0], preds[1:], labels, name, 200, 11, 0.9)
    got = np.stack([result.delta, result.ci_low, result.ci_high, result.p], axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    assert result.cells().shape == (3, 5)


def test_callable_metric_gives_the_same_as_the_kernel() -> None:
    preds, labels = _data("accuracy", n=30, k=3, seed=4)
    fast = paired_bootstrap(preds[0], preds[1:], labels, "accuracy", n_resamples=100, seed=0)
    slow = paired_bootstrap(preds[0], preds[1:], labels, lambda p, y: float(np.mean(p == y)), n_resamples=100, seed=0)
    np.testing.assert_allclose(fast.cells(), slow.cells(), rtol=1e-12, atol=1e-12)


def test_unchanged_configuration_has_zero_interval_and_p_one() -> None:
    preds, labels = _data("accuracy", n=25, k=1)
    result = paired_bootstrap(preds[0], preds[:1], labels, "accuracy", n_resamples=300, seed=0)
    assert result.delta[0] == 0 and result.ci_low[0] == 0 and result.ci_high[0] == 0 and result.p[0] == 1


def test_a_clearly_better_configuration_is_significant_and_seeded() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    worse = np.where(rng.random(400) < 0.4, 1 - labels, labels)
    better = np.where(rng.random(400) < 0.1, 1 - labels, labels)
    a = paired_bootstrap(worse, better[None], labels, "accuracy", n_resamples=500, seed=7)
    b = paired_bootstrap(worse, better[None], labels, "accuracy", n_resamples=500, seed=7)
    assert a.ci_low[0] > 0 and a.p[0] < 0.01
    np.testing.assert_array_equal(a.cells(), b.cells())
    c = paired_bootstrap(worse, better[None], labels, "accuracy", n_resamples=500, seed=8)
    assert c.ci_low[0] != a.ci_low[0] or c.ci_high[0] != a.ci_high[0]


def test_bootstrap_p_definition_and_nan_rows() -> None:
    deltas = np.array([[-1.0, 0.0, 1.0, 2.0, 3.0], [np.nan] * 5])
    p = bootstrap_p(deltas)
    assert p[0] == pytest.approx(2 * min(2 + 1, 4 + 1) / 6)
    assert np.isnan(p[1])


def test_benjamini_hochberg_equals_the_step_up_definition() -> None:
    rng = np.random.default_rng(1)
    p = np.concatenate([rng.uniform(0, 0.02, 5), rng.uniform(0, 1, 20), [np.nan]])
    q = benjamini_hochberg(p)
    finite = p[:-1]
    m = len(finite)
    expected = np.array(
        [min(1.0, min(sorted(finite)[j] * m / (j + 1) for j in range(m) if sorted(finite)[j] >= v)) for v in finite]
    )
    np.testing.assert_allclose(q[:-1], expected, rtol=1e-12)
    assert np.isnan(q[-1])


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        paired_bootstrap(np.zeros(0), np.zeros((1, 0)), np.zeros(0), "accuracy")
    with pytest.raises(ValueError, match="no vectorised"):
        metric_on_counts("bleu", np.zeros((1, 3)), np.zeros(3), np.ones((1, 3)))
    with pytest.raises(ValueError, match="disagree"):
        paired_bootstrap(np.zeros(3), np.zeros((1, 4)), np.zeros(3), "accuracy")
