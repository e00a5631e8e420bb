"""How benchmarks/bench_sweep.py reads its three ways from whole runs, on hand-built trials: bertwatch stops a trial
after the first step its live verdict was failing before the last; Optuna's own MedianPruner, handed the trials'
evaluations in order, stops a trial below the median of the earlier ones after its startup trials; the table's
compute is the steps and seconds up to each stop."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_sweep

        yield bench_sweep
    finally:
        sys.path.remove(str(BENCHMARKS))


def _trial(index, scores, levels=None, steps=40, final=None):
    return {
        "index": index, "lr": 1e-4 * (index + 1), "task": "sst2", "steps": steps,
        "clock": [0.5 * (s + 1) for s in range(steps)],
        "levels": {str(s): v for s, v in (levels or {}).items()},
        "evaluations": {str(10 * (k + 1)): v for k, v in enumerate(scores)},
        "seen_final": scores[-1] if final is None else final,
        "unseen_final": [1, 0, 1, 1], "unseen_labels": [1, 0, 0, 1],
    }  # fmt: skip


def test_bertwatch_stops_after_the_first_failing_step_before_the_last(bench) -> None:
    assert bench.stop_bertwatch(_trial(0, [0.5], {0: 0, 6: 1, 8: 2, 12: 2})) == 8
    assert bench.stop_bertwatch(_trial(0, [0.5], {0: 0, 40: 2})) == 40  # failing at the last step: nothing to save
    assert bench.stop_bertwatch(_trial(0, [0.5], {0: 0, 20: 1})) == 40


def test_the_median_pruner_is_optunas_own(bench) -> None:
    good = [_trial(i, [0.8, 0.85, 0.9, 0.9]) for i in range(5)]  # the startup trials: never pruned
    bad = _trial(5, [0.5, 0.5, 0.5, 0.5])
    better = _trial(6, [0.9, 0.9, 0.95, 0.95])
    assert bench.stops_median([*good, bad, better]) == [40] * 5 + [10, 40]


def test_the_table_counts_the_steps_and_seconds_up_to_each_stop(bench) -> None:
    trials = [_trial(i, [0.8, 0.85, 0.9, 0.9]) for i in range(5)]
    trials.append(_trial(5, [0.5, 0.5, 0.5, 0.5], {0: 0, 10: 2}))
    lines = bench.report(trials, boot=50)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[4:]}
    assert rows["no pruning"][:3] == ["0", "240", "120"]
    assert rows["bertwatch"][:3] == ["1", "210", "105"] and rows["bertwatch"][3].startswith("12% steps")
    assert rows["MedianPruner"][:3] == ["1", "210", "105"]
