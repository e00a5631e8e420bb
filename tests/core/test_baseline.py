"""The trivial baseline (bertwatch.core.baseline): the constant's score and the paired bootstrap of (model −
constant), each checked against a plain float64 implementation written with loops, and the verdict's words."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertwatch.ablation.bootstrap import metric_on_counts, resample_indices
from bertwatch.core.baseline import (
    COLLAPSE_SHARE,
    ConstantComparison,
    class_names,
    class_shares,
    compare_with_constant,
    constant_class,
)

pytestmark = pytest.mark.fast


def plain_metric(name: str, preds, labels) -> float:
    """Accuracy, F1 of class 1 and binary/multi-class Matthews from confusion counts, with loops."""
    n = len(labels)
    if name == "accuracy":
        return sum(1.0 for p, y in zip(preds, labels) if p == y) / n
    if name == "f1":
        tp = sum(1.0 for p, y in zip(preds, labels) if p == 1 and y == 1)
        fp = sum(1.0 for p, y in zip(preds, labels) if p == 1 and y != 1)
        fn = sum(1.0 for p, y in zip(preds, labels) if p != 1 and y == 1)
        return 0.0 if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    if name == "matthews_correlation":
        classes = sorted(set(labels) | set(preds))
        t = {c: sum(1.0 for y in labels if y == c) for c in classes}
        p = {c: sum(1.0 for q in preds if q == c) for c in classes}
        c = sum(1.0 for q, y in zip(preds, labels) if q == y)
        cov_ytyp = c * n - sum(t[k] * p[k] for k in classes)
        cov_ypyp = n * n - sum(p[k] ** 2 for k in classes)
        cov_ytyt = n * n - sum(t[k] ** 2 for k in classes)
        return 0.0 if cov_ypyp * cov_ytyt == 0 else cov_ytyp / math.sqrt(cov_ytyt * cov_ypyp)
    raise ValueError(name)


def plain_comparison(name, preds, labels, num_classes, indices, confidence=0.95):
    """The best constant (ties to the most frequent label), its score, and the percentile interval of the model's
    metric minus the constant's over the resamples of ``indices`` ``[R, n]``, with loops in float64."""
    scores = [plain_metric(name, [c] * len(labels), labels) for c in range(num_classes)]
    best = max(scores)
    frequency = [sum(1 for y in labels if y == c) for c in range(num_classes)]
    constant = max((c for c in range(num_classes) if scores[c] >= best - 1e-12), key=lambda c: (frequency[c], -c))
    diffs = []
    for row in indices:
        p = [preds[i] for i in row]
        y = [labels[i] for i in row]
        diffs.append(plain_metric(name, p, y) - plain_metric(name, [constant] * len(y), y))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(np.array(diffs, dtype=np.float64), [tail, 100 - tail])
    return constant, scores[constant], plain_metric(name, preds, labels) - scores[constant], low, high


def counts_of(indices: np.ndarray, n: int) -> np.ndarray:
    counts = np.zeros((len(indices), n))
    for r, row in enumerate(indices):
        for i in row:
            counts[r, i] += 1
    return counts


@pytest.mark.parametrize("name", ["accuracy", "f1", "matthews_correlation"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_constant_score_and_paired_interval_match_a_plain_implementation(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, classes = 90, 2 if name == "f1" else 3
    labels = rng.choice(classes, size=n, p=[0.3, 0.7] if classes == 2 else [0.2, 0.5, 0.3])
    preds = np.where(rng.random(n) < 0.75, labels, rng.integers(0, classes, n))
    indices = resample_indices(n, 300, seed)
    score = lambda p, y, w: metric_on_counts(name, p, y, w)  # noqa: E731
    found = compare_with_constant(preds, labels, score, counts_of(indices, n), metric=name, num_classes=classes)
    constant, value, delta, low, high = plain_comparison(name, preds.tolist(), labels.tolist(), classes, indices)
    assert found.constant == constant
    assert found.value == pytest.approx(value, rel=1e-12, abs=1e-12)
    assert found.delta[0] == pytest.approx(delta, rel=1e-9, abs=1e-12)
    assert found.ci_low[0] == pytest.approx(low, rel=1e-9, abs=1e-12)
    assert found.ci_high[0] == pytest.approx(high, rel=1e-9, abs=1e-12)
    assert found.no_better() == (low <= 0)


@pytest.mark.parametrize("p_positive", [0.684, 0.3, 0.9])
def test_the_constant_matches_the_facts_of_each_metric(p_positive: float) -> None:
    n = 1000
    labels = np.zeros(n, dtype=int)
    labels[: int(round(p_positive * n))] = 1
    p = labels.mean()
    ones = np.ones((1, n))
    for name, expected_class, expected in (
        ("accuracy", int(p > 0.5), max(p, 1 - p)),
        ("f1", 1, 2 * p / (1 + p)),  # always-positive: the only constant with F1 above 0
        ("matthews_correlation", int(p > 0.5), 0.0),  # 0 for any constant: the majority class is named
    ):
        constant, value = constant_class(labels, 2, lambda q, y, w, m=name: metric_on_counts(m, q, y, w))
        assert (constant, value) == (expected_class, pytest.approx(expected, rel=1e-12, abs=1e-12)), name
        assert value == pytest.approx(plain_metric(name, [constant] * n, labels.tolist()), abs=1e-12)
    assert metric_on_counts("f1", np.ones((1, n), int), labels, ones)[0, 0] == pytest.approx(2 * p / (1 + p))


def test_a_collapsed_model_is_no_better_and_a_learned_one_is() -> None:
    rng = np.random.default_rng(0)
    n = 408
    labels = (rng.random(n) < 0.684).astype(int)
    counts = counts_of(resample_indices(n, 500, 0), n)
    f1 = lambda p, y, w: metric_on_counts("f1", p, y, w)  # noqa: E731
    names = ("not paraphrase", "paraphrase")
    collapsed = compare_with_constant(
        np.ones(n, int), labels, f1, counts, metric="f1", label="F1", num_classes=2, classes=names
    )
    assert collapsed.no_better() and collapsed.collapsed() == 1
    assert collapsed.delta[0] == 0.0 and collapsed.ci_low[0] == 0.0 == collapsed.ci_high[0]
    first = collapsed.about("its ablation figures").lines()
    assert first[0].startswith("this model is no better than always answering 'paraphrase' (F1 ")
    assert "collapsed to one class" in first[0]
    assert first[0].endswith(": its ablation figures describe a model not worth shipping")
    labelled = f"labels: paraphrase {labels.mean():.1%}, not paraphrase {1 - labels.mean():.1%}"
    assert first[1] == f"predicted: paraphrase 100.0%, not paraphrase 0.0% (collapsed to one class); {labelled}"

    learned_preds = np.where(rng.random(n) < 0.9, labels, 1 - labels)  # 90% right: well above the constant
    learned = compare_with_constant(learned_preds, labels, f1, counts, metric="f1", label="F1", classes=names)
    assert not learned.no_better() and learned.collapsed() is None
    assert learned.ci_low[0] > 0
    assert learned.sentence().startswith("better than always answering 'paraphrase': F1 0.9")

    # one class for just under COLLAPSE_SHARE of the examples is not collapsed; at the share it is
    almost = np.ones(n, int)
    almost[: int(math.floor(n * (1 - COLLAPSE_SHARE))) + 1] = 0
    assert class_shares(almost, 2)[1] < COLLAPSE_SHARE
    found = compare_with_constant(almost, labels, f1, counts, metric="f1", classes=names)
    assert found.collapsed() is None


def test_correlations_say_they_are_undefined_for_a_constant() -> None:
    labels = np.linspace(0, 5, 40)
    pearson = lambda p, y, w: metric_on_counts("pearson", p, y, w)  # noqa: E731
    found = compare_with_constant(labels + 0.1, labels, pearson, np.ones((3, 40)), metric="pearson", label="Pearson")
    assert found.value is None and not found.no_better()
    assert "undefined for a constant prediction" in found.sentence()
    assert " 0.0000 against" not in found.sentence()
    assert found.to_json()["value"] is None and found.to_json()["no_better_than_constant"] is False


def test_json_round_trip_and_class_names() -> None:
    labels = np.array([1, 1, 1, 0, 0, 1, 1, 0])
    acc = lambda p, y, w: metric_on_counts("accuracy", p, y, w)  # noqa: E731
    found = compare_with_constant(
        np.ones((2, 8), int), labels, acc, np.ones((5, 8)), metric="accuracy", rows=("fp32", "int8"), num_classes=2
    )
    doc = found.to_json()
    assert doc["no_better_than_constant"] is True and doc["no_better_rows"] == [True, True]
    assert doc["value"] == pytest.approx(5 / 8) and doc["label_shares"] == [3 / 8, 5 / 8]
    again = ConstantComparison.from_json(doc)
    assert again.sentence() == found.sentence() and again.no_better(1)
    assert class_names(["LABEL_0", "LABEL_1"], "mrpc") == ("not paraphrase", "paraphrase")
    assert class_names(["LABEL_0", "LABEL_1", "LABEL_2"], "mrpc") == ("class 0", "class 1", "class 2")
    assert class_names(["bad", "good"], "sst2") == ("bad", "good")
