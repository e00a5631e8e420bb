"""The run's one writer (``callbacks.publisher``) with a recording writer and trackers: nothing written off world
process zero, the layer means sent once per statistic and step, a failing tracker dropped with one warning while the
others go on, the verdict's finite values only, the pattern shares once a step when their statistics are in."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from bertwatch.callbacks._safe import BertWatchWarning
from bertwatch.callbacks.publisher import Publisher
from bertwatch.core.rules import PATTERN_REQUIRED
from bertwatch.core.verdict import Verdict
from bertwatch.probe.records import NamedValues

pytestmark = pytest.mark.fast


class Writer:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


class Tracker:
    def __init__(self, fails: bool = False) -> None:
        self.fails, self.logs = fails, []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.fails:
            raise RuntimeError("the tracker's server is gone")
        self.logs.append(dict(logs))


def _publisher(writer, trackers=()) -> Publisher:
    return Publisher(writer, trackers, SimpleNamespace(), SimpleNamespace(global_step=3), {}, [], {"max_length": 8})


def test_off_world_process_zero_nothing_is_written() -> None:
    publisher = _publisher(None)
    publisher.publish(3, {"entropy": np.zeros((2, 2))}, {}, [], [])
    publisher.publish_records([NamedValues("series", {"a": 1.0}, "a series")], 3)
    publisher.publish_alerts([], 2, 2, 3, 0, to_trackers=True)
    publisher.flush()
    publisher.close()  # nothing to close, no error


def test_layer_means_go_once_per_statistic_and_step_and_a_failing_tracker_is_dropped() -> None:
    good, bad = Tracker(), Tracker(fails=True)
    publisher = _publisher(Writer(), [good, bad])
    grid = np.array([[1.0, 3.0], [2.0, 4.0]], dtype=np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        publisher.send_layer_means(3, {"entropy": grid}, {"entropy"})
        publisher.send_layer_means(3, {"entropy": grid}, {"entropy"})  # the same step again: nothing new
    assert len(good.logs) == 1 and good.logs[0]["bertwatch/entropy/layer_0"] == pytest.approx(2.0)
    assert good.logs[0]["bertwatch/entropy/layer_1"] == pytest.approx(3.0)
    assert publisher.trackers == [good]
    assert [str(w.message) for w in caught if w.category is BertWatchWarning][0].startswith("bertwatch: Tracker failed")
    assert len([w for w in caught if w.category is BertWatchWarning]) == 1
    publisher.send_layer_means(4, {"entropy": grid}, {"entropy"})
    assert len(good.logs) == 2  # the next step goes on


def test_the_verdict_goes_with_its_finite_values_only() -> None:
    tracker = Tracker()
    publisher = _publisher(Writer(), [tracker])
    publisher.send_verdict(Verdict(3, 1, ("at risk",), evidence=-1.5, margin=0.02), {"loss_mean": 0.7})
    publisher.send_verdict(Verdict(4, 0, (), known=False), {"loss_mean": math.nan})
    first, second = tracker.logs
    assert first["bertwatch/verdict/level"] == 1.0 and first["bertwatch/verdict/margin"] == 0.02
    assert first["bertwatch/verdict/evidence"] == -1.5 and first["bertwatch/run_health/loss_mean"] == 0.7
    assert "bertwatch/verdict/margin" not in second and "bertwatch/verdict/evidence" not in second
    assert second["bertwatch/verdict/known"] == 0.0 and "bertwatch/run_health/loss_mean" not in second


def test_the_pattern_shares_are_written_once_a_step_when_their_statistics_are_in() -> None:
    writer = Writer()
    publisher = _publisher(writer)
    publisher.uniform = {}  # no probe roles here: the baselines are not what this test reads
    some = {name: np.zeros((2, 2), np.float32) for name in list(PATTERN_REQUIRED)[:-1]}
    publisher.publish(3, some, some, [], [])
    patterns = [c for c in writer.calls if c[0] == "add_named_values"]
    assert not patterns  # a statistic the classes need is missing
    every = {name: np.zeros((2, 2), np.float32) for name in PATTERN_REQUIRED}
    publisher.publish(3, every, every, [], [])
    publisher.publish(3, every, every, [], [])  # the same step again: written once
    patterns = [c for c in writer.calls if c[0] == "add_named_values"]
    assert len(patterns) == 1 and patterns[0][1][1] and publisher.patterns_written == {3}
