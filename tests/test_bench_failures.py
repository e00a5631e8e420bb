"""The figures of benchmarks/bench_failures.py against plain implementations: ROC AUC against scikit-learn and a
loop over pairs, the failure rule on runs clearly above and at the majority class."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.fast

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_failures.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_failures", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_precision_and_recall_count_runs(bench) -> None:
    flagged = np.array([True, True, False, False, True])
    failed = np.array([True, False, True, False, True])
    assert bench.precision_recall(flagged, failed) == (2 / 3, 2 / 3)


def test_a_run_fails_when_it_is_not_above_the_majority_class(bench) -> None:
    labels = [0] * 60 + [1] * 40
    assert bench.failed_by_score("rte", [0] * 100, labels, 200)  # the majority class itself
    assert not bench.failed_by_score("rte", labels, labels, 200)  # every example right
    assert bench.failed_by_score("cola", [1] * 100, labels, 200)  # Matthews 0
    assert not bench.failed_by_score("cola", labels[:90] + [0] * 10, labels, 200)
