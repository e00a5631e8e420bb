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


def test_the_replay_logs_every_ten_steps_as_the_trainer_would(replay) -> None:
    rng = np.random.default_rng(0)
    losses = rng.uniform(0.3, 0.9, 37)
    rates = np.linspace(1e-4, 0, 37)
    log = [{"loss": float(l), "learning_rate": float(r), "step": k + 1} for k, (l, r) in enumerate(zip(losses, rates))]
    log.insert(20, {"eval_loss": 0.6, "eval_score": 0.7, "eval_runtime": 1.0, "step": 20})
    record = {"steps": 37, "task": "rte", "dev_labels": [0, 1, 1], "log_history": log, "health": [[0, {"loss_mean": 0.7}]],
              "alerts": [[0, 0]]}  # fmt: skip
    e = replay.evidence_at(record, 35)
    assert [s for s, _ in e.losses] == [10, 20, 30]
    for step, value in e.losses:  # the mean of the step losses since the log before, as the Trainer logs it
        assert value == pytest.approx(float(np.mean(losses[step - 10 : step])), rel=1e-12)
    assert e.rates == [(s, float(rates[s - 1])) for s in (10, 20, 30)]
    assert e.evaluations == [(20, {"eval_loss": 0.6, "eval_accuracy": 0.7})]  # eval_score is accuracy here
    assert e.max_steps == 37 and e.eval_constant.share == 2 / 3
    assert replay.evidence_at(record, 19).evaluations == []


def test_a_run_fails_when_it_is_not_above_the_majority_class(bench) -> None:
    labels = [0] * 60 + [1] * 40
    assert bench.failed_by_score("rte", [0] * 100, labels, 200)  # the majority class itself
    assert not bench.failed_by_score("rte", labels, labels, 200)  # every example right
    assert bench.failed_by_score("cola", [1] * 100, labels, 200)  # Matthews 0
    assert not bench.failed_by_score("cola", labels[:90] + [0] * 10, labels, 200)
