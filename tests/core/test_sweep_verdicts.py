"""The sweep table's rules on hand-built runs: a run's verdict from its verdict series, the rank order, the strip
(one mark a judged step, the worst of each stretch when long), the runs to stop now and the steps that saves."""

from __future__ import annotations

import math

import pytest

from bertwatch.core.sweep_verdicts import ranked, stop_now, strip, sweep_json, sweep_run

pytestmark = pytest.mark.fast


def _run(name, levels, margin=math.nan, ended=False, max_steps=100, known=1.0):
    judged = [(10 * (i + 1), level, [f"reason {i}"]) for i, level in enumerate(levels)]
    last = judged[-1][0]
    columns = {"known": {last: known}, "margin": {last: margin}, "evidence": {last: 10 * margin}}
    return sweep_run(name, judged, columns, {"max_steps": max_steps, "learning_rate": "3e-5", "seed": 4}, ended)


def test_a_run_is_read_from_its_verdict_series() -> None:
    run = _run("a", [0, 1, 2], margin=-0.2)
    assert (run.verdict.step, run.verdict.level, run.verdict.reasons) == (30, 2, ("reason 2",))
    assert run.verdict.margin == -0.2 and run.verdict.evidence == -2.0
    assert [label for _, label in run.history] == ["healthy", "at risk", "failing"]
    assert (run.learning_rate, run.seed, run.max_steps, run.steps_left) == (3e-5, 4, 100, 70)
    unsure = _run("b", [0], known=0.0)
    assert unsure.verdict.label == "cannot tell" and unsure.verdict.margin != unsure.verdict.margin  # NaN
    assert _run("c", [2], max_steps=0).max_steps is None and _run("c", [2], max_steps=0).steps_left is None
    assert _run("d", [2], ended=True).steps_left == 0


def test_worst_first_failing_then_by_the_smallest_margin() -> None:
    runs = [_run("good", [0], 0.6), _run("fails", [2], 0.1), _run("worse", [2], -0.3), _run("risky", [1], 0.0)]
    assert [r.name for r in ranked(runs)] == ["worse", "fails", "risky", "good"]
    tied = [_run("b", [0], known=0.0), _run("a", [0], known=0.0)]
    assert [r.name for r in ranked(tied)] == ["a", "b"]  # no margin: by name


def test_a_regression_run_is_ranked_as_its_series_says() -> None:
    regression = sweep_run("sts", [(10, 1, [])], {"margin": {10: -2.0}, "regression": {10: 1.0}}, {}, False)
    assert regression.verdict.regression and not _run("cls", [1], -2.0).verdict.regression
    runs = [regression, _run("cls", [1], -0.05), _run("good", [0], 0.3)]
    assert [r.name for r in ranked(runs)] == ["cls", "sts", "good"]  # its loss above the variance says little


def test_the_strip_shows_the_worst_of_each_stretch() -> None:
    assert strip([(0, "cannot tell"), (1, "healthy"), (2, "at risk"), (3, "failing")]) == "?+!X"
    history = [(i, "healthy") for i in range(48)]
    history[5] = (5, "failing")
    assert strip(history, width=24) == "++X" + "+" * 21  # steps 4-5 are the third stretch


def test_the_runs_to_stop_are_the_failing_ones_still_training() -> None:
    runs = ranked(
        [_run("ended", [2], ended=True), _run("live", [1, 2]), _run("ok", [0], 0.5), _run("open", [2], max_steps=0)]
    )
    assert [r.name for r in stop_now(runs)] == ["live", "open"]
    table = sweep_json(runs, "logs")
    assert table["stop_now"] == [{"run": "live", "steps_left": 80}, {"run": "open", "steps_left": None}]
    assert table["steps_saved"] == 80 and [r["run"] for r in table["runs"]] == [r.name for r in runs]
    assert table["runs"][-1]["margin"] == 0.5 and table["runs"][0]["margin"] is None


def test_judged_steps_keep_the_levels_in_range_with_their_reasons() -> None:
    from bertwatch.core.sweep_verdicts import judged_steps
    from bertwatch.core.verdict import LEVELS

    steps, levels = [0, 5, 10, 15, 20, 25], [0.0, math.nan, 1.0, 3.0, -1.0, 2.0]
    reasons = {10: ["at risk"], 25: ["diverged", "collapsed"], 15: ["out of range"]}
    expected = []
    for step, level in zip(steps, levels):  # by hand: a finite level that indexes LEVELS
        if level == level and level in range(len(LEVELS)):
            expected.append((step, int(level), reasons.get(step, [])))
    assert (
        judged_steps(steps, levels, reasons)
        == expected
        == [(0, 0, []), (10, 1, ["at risk"]), (25, 2, ["diverged", "collapsed"])]
    )
    assert judged_steps([], []) == []
