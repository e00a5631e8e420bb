"""``bertwatch.ship.measure`` against plain implementations written here: one loop over resamples and examples in
float64 for the metric, its paired interval and p-value, and a loop for the agreement and for the predictions another
batching changes."""

from __future__ import annotations

import numpy as np
import pytest

from bertwatch.ship.measure import agreement, batch_dependence, compare_variants, size_mb

pytestmark = pytest.mark.fast


def _plain_metric(name: str, predictions, labels) -> float:
    tp = fp = fn = correct = 0.0
    for p, y in zip(predictions, labels):
        correct += float(p == y)
        tp += float(p == 1 and y == 1)
        fp += float(p == 1 and y != 1)
        fn += float(p != 1 and y == 1)
    if name == "accuracy":
        return correct / len(labels)
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def _plain_interval(name, reference, variant, labels, resamples, seed, confidence=0.95):
    """The documented paired bootstrap, one resample and one example at a time."""
    n = len(labels)
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    deltas = []
    for row in draws:
        ref = [reference[i] for i in row]
        var = [variant[i] for i in row]
        gold = [labels[i] for i in row]
        deltas.append(_plain_metric(name, var, gold) - _plain_metric(name, ref, gold))
    low, high = np.percentile(np.array(deltas, dtype=np.float64), [50 * (1 - confidence), 50 * (1 + confidence)])
    below = sum(1 for d in deltas if d <= 0)
    above = sum(1 for d in deltas if d >= 0)
    p = min(1.0, 2 * min(below + 1, above + 1) / (resamples + 1))
    return low, high, p


def _plain_agreement(a, b) -> float:
    same = 0
    for x, y in zip(a, b):
        same += int(x == y)
    return same / len(a)


@pytest.mark.parametrize("metric", ["accuracy", "f1"])
@pytest.mark.parametrize("seed", [0, 3])
def test_metric_interval_and_agreement_equal_the_plain_loops(metric: str, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 57
    labels = rng.integers(0, 2, n)
    reference = np.where(rng.random(n) < 0.8, labels, 1 - labels)
    variants = {
        "int8": np.where(rng.random(n) < 0.1, 1 - reference, reference),
        "pruned": np.where(rng.random(n) < 0.3, 1 - reference, reference),
    }
    table = compare_variants(reference, variants, labels, metric, n_resamples=300, seed=seed, reference_name="fp32")
    assert list(table) == ["fp32", "int8", "pruned"]
    assert table["fp32"] == {"value": _plain_metric(metric, reference, labels), "delta": 0.0, "ci_low": 0.0,
                             "ci_high": 0.0, "p": 1.0, "agreement": 1.0}  # fmt: skip
    for name, predictions in variants.items():
        row = table[name]
        value = _plain_metric(metric, predictions, labels)
        low, high, p = _plain_interval(metric, reference, predictions, labels, 300, seed)
        assert row["value"] == pytest.approx(value, abs=1e-12)
        assert row["delta"] == pytest.approx(value - table["fp32"]["value"], abs=1e-12)
        assert (row["ci_low"], row["ci_high"], row["p"]) == pytest.approx((low, high, p), abs=1e-12)
        assert row["agreement"] == _plain_agreement(reference, predictions)


def test_an_unchanged_variant_has_a_zero_interval_and_p_one() -> None:
    labels = np.array([0, 1, 1, 0, 1, 2, 2])
    same = np.array([0, 1, 0, 0, 1, 2, 1])
    table = compare_variants(same, {"int8": same.copy()}, labels, "accuracy", n_resamples=50)
    assert table["int8"] == {"value": 5 / 7, "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p": 1.0, "agreement": 1.0}
    assert compare_variants(same, {}, labels)["reference"]["value"] == pytest.approx(5 / 7)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no paired bootstrap for metric 'pearson'"):
        compare_variants(np.zeros(3), {"x": np.zeros(3)}, np.zeros(3), "pearson")
    with pytest.raises(ValueError, match="cannot compare"):
        agreement(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="cannot compare"):
        agreement(np.zeros(0), np.zeros(0))
    assert size_mb(2_500_000) == 2.5


@pytest.mark.parametrize("metric", ["accuracy", "f1"])
def test_batch_dependence_counts_the_changed_predictions_and_the_other_metric(metric: str) -> None:
    rng = np.random.default_rng(7)
    n = 61
    labels = rng.integers(0, 2, n)
    served = {"fp32": np.where(rng.random(n) < 0.8, labels, 1 - labels)}
    served["int8"] = np.where(rng.random(n) < 0.1, 1 - served["fp32"], served["fp32"])
    batched = {
        "fp32": served["fp32"].copy(),
        "int8": np.where(rng.random(n) < 0.15, 1 - served["int8"], served["int8"]),
    }
    got = batch_dependence(served, batched, labels, metric)
    assert list(got) == ["fp32", "int8"]
    for name in served:
        changed = sum(1 for a, b in zip(served[name], batched[name]) if a != b)
        assert got[name]["changed"] == changed and isinstance(got[name]["changed"], int)
        assert got[name]["value"] == pytest.approx(_plain_metric(metric, batched[name], labels), abs=1e-12)
    assert got["fp32"]["changed"] == 0 and got["int8"]["changed"] > 0
    with pytest.raises(ValueError, match="no predictions at the other batching"):
        batch_dependence(served, {"fp32": batched["fp32"]}, labels)
    with pytest.raises(ValueError, match="int8"):
        batch_dependence(served, {**batched, "int8": batched["int8"][:-1]}, labels)
    with pytest.raises(ValueError, match="pearson"):
        batch_dependence(served, batched, labels, "pearson")
