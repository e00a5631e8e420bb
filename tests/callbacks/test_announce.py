"""What bertwatch says while it watches (callbacks/announce.py): the start lines, the cost line after step 0, the
end line, on world process zero only and silenced by ``quiet=True`` or ``BERTWATCH_QUIET=1``; the facts in them
checked against the run (its probe set, its event file, its measured steps and drift)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from bertwatch.callbacks import BertWatchCallback, announce
from bertwatch.callbacks.announce import (
    Pinned,
    RunPlan,
    RunSummary,
    cost_line,
    end_lines,
    moved_most,
    start_lines,
)
from tests.support.tb_helpers import make_wsgi_app
from tests.support.tiny_trainer import toy_trainer

pytestmark = pytest.mark.fast


def _lines(text: str) -> list[str]:
    return [line[len("bertwatch: ") :] for line in text.splitlines() if line.startswith("bertwatch: ")]


def _plan(**changes) -> RunPlan:
    values = dict(
        model="BertForSequenceClassification",
        layers=6,
        heads=12,
        examples=32,
        source="the eval set",
        longest=41,
        cut=0,
        cut_to=128,
        stats=24,
        every_n_steps=None,
        budget=0.02,
        pinned=("step 0", "each evaluation", "the end"),
        run_dir="out/runs/x",
    )
    values.update(changes)
    return RunPlan(**values)


def test_the_start_lines_say_what_is_watched_where_and_how_to_see_it() -> None:
    first, events, view = start_lines(_plan())
    assert first == (
        "watching BertForSequenceClassification (6 layers x 12 heads): 24 statistics on 32 probe examples from the "
        "eval set (longest 41 tokens, none cut), measured as often as 2% of the wall time allows, plus step 0, "
        "each evaluation and the end"
    )
    assert events == "events go to out/runs/x"
    assert view.startswith("see them live: tensorboard --logdir out/runs --samples_per_plugin=bertwatch=0 ")
    cut = start_lines(_plan(cut=3, every_n_steps=20, pinned=("the end",), run_dir=None))
    assert len(cut) == 1  # off world process zero there is no run directory to show
    assert "3 cut to 128 tokens" in cut[0] and "measured every 20 steps, plus the end" in cut[0]
    judged = start_lines(_plan(verdict=True))[0]
    assert judged == first + "; the run verdict is judged at each"


def test_a_run_directory_with_spaces_is_quoted_for_the_shell(tmp_path) -> None:
    run = tmp_path / "my runs" / "a b"
    view = start_lines(_plan(run_dir=str(run)))[2]
    command = shlex.split(view.split(": ", 1)[1].split("   ")[0])
    assert command[command.index("--logdir") + 1] == str(tmp_path / "my runs")


def test_pinned_passes_count_every_pinned_event() -> None:
    assert Pinned(True, (30, 60, 90), True, None, 100).passes() == 5
    assert Pinned(True, (), True, 25, 100).passes() == 5  # step 0, 25, 50, 75 and 100 (the end)
    assert Pinned(True, (50, 100), True, 25, 100).passes() == 5  # an evaluation at a measured step adds none
    assert Pinned(False, (50,), False, None, 100).events() == ("the evaluation",)
    line = cost_line(0.5, 5, True, 0.02)
    assert "0.50 s" in line and "5 pinned passes" in line and "about 2.5 s" in line and "under 2%" in line


def test_the_heads_that_moved_most_are_the_largest_drifts() -> None:
    rng = np.random.default_rng(3)
    js = rng.random((4, 5)).astype(np.float32)
    js[1, 2] = np.nan
    want = sorted(((float(js[l, h]), l, h) for l in range(4) for h in range(5) if np.isfinite(js[l, h])), reverse=True)
    got = moved_most({"drift_js": js}, count=3)
    assert got == [f"L{l} H{h} (JS {v:.3g})" for v, l, h in want[:3]]
    cosine = moved_most({"drift_cosine": np.array([[1.0, 0.5], [0.9, 0.99]])}, count=1)
    assert cosine == ["L0 H1 (1-cos 0.5)"]
    assert moved_most({"cls_mass": js}) is None
    # float32 rounding of "unchanged" is no drift (the report's rule): a JS of 1e-8 or a cosine of 0.99999994
    noise = {"drift_js": np.array([[1e-8, 2e-8], [0.0, 3e-8]], dtype=np.float32)}
    assert moved_most(noise) == []
    assert moved_most({"drift_cosine": np.array([[0.99999994, 1.0]], dtype=np.float32)}) == []
    summary = RunSummary((0, 12), 0, noise, 0.1, 0.01, "r")
    assert "no head moved beyond float32 rounding" in end_lines(summary)[0]


def test_the_end_line_counts_steps_and_alerts() -> None:
    from bertwatch.callbacks.announce import RunSummary

    grids = {"drift_js": np.array([[0.0, 0.25]])}
    summary = RunSummary((0, 10, 20), 2, grids, 1.5, 0.031, "bertwatch report out")
    line, report = end_lines(summary)
    assert line == (
        "measured 3 steps (0 to 20); 2 stability alerts; moved most: L0 H1 (JS 0.25); "
        "bertwatch took 1.5 s, 3.1% of the run"
    )
    assert report == "report: bertwatch report out"


def test_the_end_lines_give_the_verdict_when_there_is_one() -> None:
    summary = RunSummary((0, 10), 0, {}, 1.0, 0.01, "r", verdict="failing: predictions have collapsed")
    assert end_lines(summary)[1] == "verdict: failing: predictions have collapsed"


def _run(tmp_path, **options):
    callback = BertWatchCallback(every_n_steps=3, num_probe_examples=6, **options)
    trainer = toy_trainer(tmp_path / "out", [], eval_strategy="steps", eval_steps=3)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    return callback


def test_a_training_run_speaks_at_its_start_after_step_0_and_at_its_end(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    callback = _run(tmp_path)
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 7, lines
    first, events, view, cost, end, verdict, report = lines
    assert first.startswith("watching BertForSequenceClassification (2 layers x 4 heads): ")
    assert f"{len(callback.stat_names)} statistics on 6 probe examples from the eval set" in first
    assert "measured every 3 steps, plus step 0, each evaluation and the end" in first
    assert cost.startswith("step 0 measured in ") and "3 pinned passes" in cost  # steps 0, 3 and 6
    steps = [step for step, _ in callback.history]
    assert end.startswith(f"measured {len(steps)} steps ({steps[0]} to {steps[-1]}); 0 stability alerts; moved most: ")
    assert report == "report: bertwatch report out   (writes out/report.html)"
    assert verdict == f"verdict: {callback.alerting.verdict.describe()}"
    assert [step for step, _ in callback.health] == steps  # the gradient pass ran at every measured step
    moved = re.findall(r"L(\d+) H(\d+) \(JS [0-9.e-]+\)", end)
    last = callback.history[-1][1]["drift_js"].astype(np.float64)
    order = np.argsort(-last.ravel(), kind="stable")[:3]
    assert [(int(l), int(h)) for l, h in moved] == [divmod(int(i), last.shape[1]) for i in order]
    # the command, as a user pastes it, shows the run: its logdir holds the event file the plugin's loader reads
    command = shlex.split(view.removeprefix("see them live: ").split("   ")[0])
    assert command[:2] == ["tensorboard", "--logdir"] and "--samples_per_plugin=bertwatch=0" in command
    run_dir = Path(events.removeprefix("events go to "))
    assert list(run_dir.glob("events.out.tfevents.*.bertwatch"))
    _, mux, _ = make_wsgi_app(command[2])
    tags = mux.Runs()[os.path.relpath(run_dir, command[2])]["tensors"]
    assert "bertwatch/heads/cls_mass" in tags or any(tag.startswith("bertwatch/") for tag in tags)


def test_quiet_and_the_environment_variable_silence_it(tmp_path, capsys, monkeypatch) -> None:
    _run(tmp_path / "a", quiet=True)
    assert _lines(capsys.readouterr().err) == []
    monkeypatch.setenv("BERTWATCH_QUIET", "1")  # the documented variable
    _run(tmp_path / "b")
    assert _lines(capsys.readouterr().err) == []


def test_a_process_other_than_world_zero_keeps_quiet(tmp_path, capsys, monkeypatch) -> None:
    import transformers as T

    monkeypatch.setattr(T.Trainer, "is_world_process_zero", lambda self: False)
    callback = _run(tmp_path)
    assert callback.history  # it measured
    assert _lines(capsys.readouterr().err) == []


def test_a_large_drift_reference_gets_a_line_with_its_size_and_what_shrinks_it() -> None:
    small = 32 * 2 * 12 * 12 * 128**2  # 32 examples of 128 tokens at bert-base: 151 MB
    large = 32 * 2 * 12 * 12 * 512**2  # of 512 tokens: 2.4 GB
    assert announce.reference_line(small, 32, 128) is None
    line = announce.reference_line(large, 32, 512)
    assert line is not None and "2.2 GiB" in line and "32 probe examples (up to 512 tokens)" in line
    assert "num_probe_examples=" in line
