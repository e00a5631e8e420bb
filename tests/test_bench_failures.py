"""The figures of benchmarks/bench_failures.py against plain implementations: ROC AUC against scikit-learn and a
loop over pairs, the shares of runs flagged, the failure and learning rules on runs clearly above and at the
majority class, and the replay of a record: the training loss a user logging every 10 steps would have had."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.fast

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("bench_failures")


@pytest.fixture(scope="module")
def replay(bench):
    return _load("_failures_replay")  # bench_failures put benchmarks/ on the path for its own import


def test_auc_matches_scikit_learn_and_a_loop_over_pairs(bench) -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    for _ in range(20):
        failed = rng.random(15) < 0.4
        scores = rng.integers(0, 4, 15).astype(float)  # ties included
        if failed.all() or not failed.any():
            continue
        pairs = [(p > n) + 0.5 * (p == n) for p in scores[failed] for n in scores[~failed]]
        assert bench.auc(scores, failed) == pytest.approx(sum(pairs) / len(pairs))
        assert bench.auc(scores, failed) == pytest.approx(roc_auc_score(failed, scores))
    assert math.isnan(bench.auc(np.ones(3), np.ones(3, dtype=bool)))


def test_recall_and_false_alarms_are_shares_of_runs(replay) -> None:
    flagged = np.array([True, True, False, False, True])
    failed = np.array([True, False, True, False, True])
    assert replay.share(flagged, failed) == 2 / 3  # recall: 2 of the 3 failed runs flagged
    assert replay.share(flagged, ~failed) == 1 / 2  # false alarms: 1 of the 2 others
    assert math.isnan(replay.share(flagged, np.zeros(5, dtype=bool)))


def test_a_run_learned_when_it_is_five_points_above_the_majority(bench) -> None:
    labels = [0] * 60 + [1] * 40
    assert bench.learned_by_score("rte", [0] * 35 + [1] * 65, labels)  # 0.75 against the majority's 0.60
    assert not bench.learned_by_score("rte", [0] * 100, labels)  # the majority's 0.60
    predictions = [0] * 60 + [1] * 4 + [0] * 36  # 0.64: 4 points above
    assert not bench.learned_by_score("rte", predictions, labels)


def test_the_replay_judges_what_the_run_had_shown_by_each_step(replay) -> None:
    from bertwatch.core.evidence import Constant, Evidence
    from bertwatch.core.verdict import judge

    rng = np.random.default_rng(0)
    e = Evidence(max_steps=40, train_constant=Constant(0.5, math.log(2), 640))
    for step in range(1, 41):
        e.note_log(step, {"loss": 0.7 + 0.3 * step / 40 + 0.02 * float(rng.standard_normal()), "learning_rate": 1e-3})
    record = {"steps": 40, "evidence": e.as_dict()}
    for step in (5, 12, 40):
        assert replay.verdict_at(record, step) == judge(e.until(step))
    assert replay.verdict_at(record, 40).label == "failing"


def test_the_loss_trend_baseline_is_a_least_squares_slope(replay) -> None:
    from bertwatch.core.evidence import Evidence

    rng = np.random.default_rng(1)
    e = Evidence()
    values = rng.uniform(0.3, 0.9, 30)
    for step, value in enumerate(values, start=1):
        e.note_log(step, {"loss": float(value)})
    slope = np.polyfit(np.arange(21, 31, dtype=np.float64), values[20:30], 1)[0]  # the last 10 steps up to step 30
    assert replay.loss_trend_score(e, 30, 10) == pytest.approx(slope, rel=1e-9)
    assert math.isnan(replay.loss_trend_score(e, 2, 10))  # two logs: no trend


def test_a_run_fails_when_it_is_not_above_the_majority_class(bench) -> None:
    labels = [0] * 60 + [1] * 40
    assert bench.failed_by_score("rte", [0] * 100, labels, 200)  # the majority class itself
    assert not bench.failed_by_score("rte", labels, labels, 200)  # every example right
    assert bench.failed_by_score("cola", [1] * 100, labels, 200)  # Matthews 0
    assert not bench.failed_by_score("cola", labels[:90] + [0] * 10, labels, 200)


def test_a_regression_run_is_labelled_by_its_spearman_correlation_against_zero(bench, replay) -> None:
    rng = np.random.default_rng(3)
    labels = rng.uniform(0, 5, 200)
    noise = rng.standard_normal(200)
    assert bench.failed_by_score("stsb", [2.5] * 200, labels, 200)  # a constant: no correlation at all
    assert bench.failed_by_score("stsb", noise, labels, 200)  # predictions that ignore the labels
    assert not bench.failed_by_score("stsb", labels + noise, labels, 200)
    ranks = lambda x: np.argsort(np.argsort(x)).astype(np.float64)  # noqa: E731  (no ties in uniform draws)
    plain = np.corrcoef(ranks(labels + noise), ranks(labels))[0, 1]  # Spearman: Pearson's of the ranks
    assert bench.metric("stsb")(labels + noise, labels) == pytest.approx(plain, rel=1e-9)
    assert bench.learned_by_score("stsb", labels + noise, labels) and replay.majority_score("stsb", labels) == 0.0
    assert not bench.learned_by_score("stsb", [2.5] * 200, labels)  # its correlation counts as 0, not NaN
