"""The flow of one training run through the callback side, recorded from the running code: from a Trainer event
to the event file a probe pass crosses at most six modules, the calls between bertwatch's modules go one way
(no module calls back into one that called it), and a probe step's callback side is the run and the few parts it
calls in turn, none of which calls back into it."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

import bertwatch
from bertwatch.callbacks import BertWatchCallback, watch, watched_run
from bertwatch.tb.writer import event_file
from tests.support.tiny_trainer import toy_trainer

pytestmark = pytest.mark.fast

ROOT = Path(bertwatch.__file__).parent


def _module(frame) -> str | None:
    """The bertwatch module a frame runs in (``callbacks.watch``), or None outside bertwatch."""
    path = Path(frame.f_code.co_filename)
    if not path.is_relative_to(ROOT):
        return None
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _recorded_run(tmp_path, monkeypatch):
    """A short Trainer run with BertWatchCallback at its defaults; returns the calls between bertwatch modules
    ``{(caller, callee)}`` and, for each event record written, the bertwatch modules on the stack, outermost first."""
    writes: list[list[str]] = []
    real = event_file.EventFile.add_event

    def add_event(self, event):
        stack, frame = [], sys._getframe(1)
        while frame is not None:
            module = _module(frame)
            if module is not None and (not stack or stack[-1] != module):
                stack.append(module)
            frame = frame.f_back
        writes.append(stack[::-1])
        return real(self, event)

    monkeypatch.setattr(event_file.EventFile, "add_event", add_event)
    edges: set[tuple[str, str]] = set()

    def profile(frame, what, arg):
        if what != "call":
            return
        callee, caller = _module(frame), frame.f_back and _module(frame.f_back)
        if callee and caller and callee != caller:
            edges.add((caller, callee))

    _train_profiled(tmp_path, BertWatchCallback(num_probe_examples=4), profile)
    return edges, writes


def _train_profiled(tmp_path, callback, profile) -> None:
    """A 3-step toy Trainer run watched by ``callback``, evaluating at step 2, with ``profile`` on every call."""
    trainer = toy_trainer(tmp_path, [callback], eval_size=8, max_steps=3, eval_strategy="steps", eval_steps=2)
    watch(trainer)
    sys.setprofile(profile)
    try:
        trainer.train()
    finally:
        sys.setprofile(None)


def test_a_probe_pass_reaches_the_event_file_through_six_modules_and_calls_go_one_way(tmp_path, monkeypatch):
    edges, writes = _recorded_run(tmp_path, monkeypatch)
    from_events = [w for w in writes if "callbacks.watch" in w]
    assert from_events, "the run wrote records from the callback's events"
    for stack in from_events:
        path = stack[stack.index("callbacks._safe") :]  # from the contained Trainer event down
        assert len(path) <= 6 and len(set(path)) == len(path), path
    callers = defaultdict(set)
    for caller, callee in edges:
        callers[callee].add(caller)
    assert callers["callbacks.watch"] <= {"callbacks._safe", "callbacks.attach"}, "nothing below calls a callback"
    back = sorted((a, b) for a, b in edges if (b, a) in edges)
    assert back == [], f"modules calling each other back: {back}"


#: The callback side of a probe step, each part called by the run (``WatchedRun.handle``) in turn: the run, its
#: judge (the alerts, the verdict's evidence), the members' handles, their pacing, the publisher; and the words of
#: an alert or a failing verdict where one is said (``WORDS``). The probe pass below them is ``probe/``'s.
PROBE_STEP = {
    "callbacks.watched_run",
    "callbacks.judging",
    "callbacks.alerting",
    "callbacks.run_evidence",
    "callbacks.members",
    "callbacks.pacing",
    "callbacks.publisher",
}
WORDS = {"callbacks.alert_lines", "callbacks.announce"}


def test_a_probe_step_visits_the_run_and_its_parts_and_nothing_calls_back_into_the_run(tmp_path, monkeypatch):
    """Every module a probe step enters from ``WatchedRun.handle`` (a Trainer step that measures), recorded: on the
    callback side the run and the parts it calls in turn, at most ``len(PROBE_STEP)`` of them besides the words a
    user reads (no module of their own to build the riders or to tap the loss); and no module calls the run but the
    callback."""
    steps: list[set[str]] = []
    callers: set[str] = set()
    inside: list[set[str]] = []  # the modules the handle running now entered
    real = watched_run.WatchedRun.handle

    def handle(self, event, step, *args, **kwargs):
        inside.append(set())
        try:
            results = real(self, event, step, *args, **kwargs)
        finally:
            visited = inside.pop()
        if any(r.event == "step" and r.due for r in results):
            steps.append(visited)
        return results

    monkeypatch.setattr(watched_run.WatchedRun, "handle", handle)

    def profile(frame, what, arg):
        if what != "call" or (module := _module(frame)) is None:
            return
        if inside:
            inside[-1].add(module)
        caller = frame.f_back and _module(frame.f_back)
        if module == "callbacks.watched_run" and caller is not None:
            callers.add(caller)

    _train_profiled(tmp_path, BertWatchCallback(num_probe_examples=4, every_n_steps=1), profile)
    assert len(steps) == 3, "each of the 3 steps measured"
    for visited in steps:
        side = {m for m in visited if m.startswith("callbacks.")}
        assert side - WORDS <= PROBE_STEP, sorted(side - WORDS - PROBE_STEP)
        assert len(side - WORDS) <= len(PROBE_STEP) == 7
        assert "probe.probe_pass" in visited and "tb.writer.event_file" in visited
    assert callers - {"callbacks.watched_run"} == {"callbacks.watch"}, "only the callback calls the run"
