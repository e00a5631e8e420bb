"""The flow of one training run through the callback side, recorded from the running code: from a Trainer event
to the event file a probe pass crosses at most six modules, and the calls between bertwatch's modules go one way
(no module calls back into one that called it)."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

import bertwatch
from bertwatch.callbacks import BertWatchCallback, watch
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

    callback = BertWatchCallback(num_probe_examples=4)
    trainer = toy_trainer(tmp_path, [callback], eval_size=8, max_steps=3, eval_strategy="steps", eval_steps=2)
    watch(trainer)
    sys.setprofile(profile)
    try:
        trainer.train()
    finally:
        sys.setprofile(None)
    return edges, writes


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
