"""``bertwatch sweep LOGDIR`` on a log folder of many runs: each run's verdict now, its strip, its learning rate
and seed as the Trainer logged them, ranked worst first, and the failing runs still training with the steps
stopping them saves; ``--json`` the same; a real tiny training run read back as the callback judged it."""

from __future__ import annotations

import json
import math
import time

import pytest

from bertwatch.cli import main
from bertwatch.core.sweep_verdicts import strip
from bertwatch.core.verdict import NOTHING_YET, Verdict
from bertwatch.report.sweep_table import read_sweep
from tests.support.sweep_logs import MAX_STEPS, write_run

pytestmark = pytest.mark.fast


@pytest.fixture
def sweep_dir(tmp_path):
    """Fourteen runs: three failing still training (at steps 20, 30 and 40), one failing that ended, two at risk,
    three healthy, two that cannot tell yet, one without the Trainer's logs, two trials sharing a folder (one pruned,
    one healthy); and a folder with no verdict."""
    root = tmp_path / "logs"
    dull = "the probe loss not learning since step 0"
    for i, step in enumerate((20, 30, 40)):
        hist = [(0, 0, 0, math.nan, NOTHING_YET), (10, 1, 1, -1.0, dull), (step, 2, 1, -3.0 - i, f"failing {i}")]
        write_run(root / f"lr-high-{i}", hist, learning_rate=1e-3 * (i + 1), seed=i)
    write_run(root / "ended-failing", [(0, 0, 0, math.nan, NOTHING_YET), (100, 2, 1, -2.0, "ends")], 5e-3, 9, True)
    for i, evidence in enumerate((-0.5, 0.5)):
        write_run(root / f"risky-{i}", [(0, 0, 0, math.nan, NOTHING_YET), (30, 1, 1, evidence, dull)], 1e-4, 10 + i)
    for i in range(3):
        hist = [(0, 0, 0, math.nan, NOTHING_YET), (10, 1, 1, 0.2, dull)] + [
            (s, 0, 1, 5.0 + i, "learns") for s in (20, 30)
        ]
        write_run(root / "nested" / f"good-{i}", hist, learning_rate=2e-5, seed=20 + i, ended=i == 0)
    for i in range(2):
        write_run(root / f"young-{i}", [(0, 0, 0, math.nan, NOTHING_YET)], learning_rate=3e-5, seed=30 + i)
    write_run(root / "no-trainer-logs", [(0, 0, 0, math.nan, NOTHING_YET), (50, 2, 1, -1.0, "collapsed")])
    (root / "empty").mkdir()
    # two trials of hyperparameter_search without hp_name: one folder, a bertwatch and a Trainer file each
    write_run(root / "trials", [(0, 0, 0, math.nan, NOTHING_YET), (8, 2, 1, -6.0, "diverged")], 0.5, 40, True)
    time.sleep(1.1)  # event files are named by the second they start in
    write_run(root / "trials", [(0, 0, 0, math.nan, NOTHING_YET), (20, 0, 1, 4.0, "learns")], 1e-5, 41)
    return root


def test_every_run_is_ranked_worst_first_with_its_setting_and_strip(sweep_dir) -> None:
    runs = read_sweep(sweep_dir)
    assert len(runs) == 14
    ranks = [run.verdict.rank for run in runs]
    assert ranks == sorted(ranks, reverse=True)
    assert [run.verdict.label for run in runs[:6]] == ["failing"] * 6
    assert runs[0].name == "trials#1"  # the lowest margin of the failing runs: the likeliest to fail
    trials = {run.name: run for run in runs if run.name.startswith("trials")}
    assert [(r.learning_rate, r.seed, r.verdict.step, r.ended) for r in trials.values()] == [
        (0.5, 40, 8, True),
        (1e-5, 41, 20, False),
    ]  # each trial of the shared folder with its own Trainer file
    high = {run.name: run for run in runs}["lr-high-1"]
    assert (high.learning_rate, high.seed, high.max_steps, high.ended) == (2e-3, 1, MAX_STEPS, False)
    assert high.verdict == Verdict(30, 2, ("failing 1",), True, -4.0, pytest.approx(-0.4))
    assert strip(high.history) == "?!X" and high.steps_left == 70
    good = {run.name: run for run in runs}["nested/good-0"]
    assert good.verdict.label == "healthy" and strip(good.history) == "?!++" and good.ended
    young = {run.name: run for run in runs}["young-0"]
    assert young.verdict.label == "cannot tell" and strip(young.history) == "?"
    # below failing, by the margin alone, the strongest last: an "at risk" run a little past the constant's loss
    # ranks below the runs that cannot tell yet (no margin: a half)
    assert [run.name for run in runs[-8:]] == [
        "risky-0", "young-0", "young-1", "risky-1", "trials#2", "nested/good-0", "nested/good-1", "nested/good-2"
    ]  # fmt: skip
    bare = {run.name: run for run in runs}["no-trainer-logs"]
    assert (bare.learning_rate, bare.seed, bare.max_steps, bare.steps_left) == (None, None, None, None)


def test_the_command_prints_the_table_and_the_runs_to_stop(sweep_dir, capsys) -> None:
    assert main(["sweep", str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    print(out)  # shown with -s: what a user reads
    lines = out.splitlines()
    assert lines[0].startswith(f"bertwatch sweep: 14 runs under {sweep_dir}, worst first")
    rows = [line.split() for line in lines[3:17]]
    assert [row[0] for row in rows] == [str(n) for n in range(1, 15)]
    assert rows[0][1:5] == ["trials#1", "failing", "8/100", "?X"]  # ended: no mark
    assert rows[1][1:6] == ["lr-high-2", "failing", "*", "40/100", "?!X"]
    assert "stop these now: lr-high-2 (60 steps left), lr-high-1 (70 steps left), lr-high-0 (80 steps left), " in out
    assert "no-trainer-logs (? steps left)" in out and "ended-failing (" not in out  # it ended: nothing to save
    assert "saves 210 training steps and the unknown rest of 1 (no max_steps logged)" in out


def test_json_gives_the_same_table(sweep_dir, capsys) -> None:
    assert main(["sweep", str(sweep_dir), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in table["runs"]] == [r.name for r in read_sweep(sweep_dir)]
    first = table["runs"][1]
    assert (first["label"], first["step"], first["strip"], first["learning_rate"], first["seed"]) == (
        "failing", 40, "?!X", 3e-3, 2,
    )  # fmt: skip
    assert [h["label"] for h in first["history"]] == ["cannot tell", "at risk", "failing"]
    assert table["steps_saved"] == 210 and len(table["stop_now"]) == 4
    assert all(r["evidence"] is None for r in table["runs"] if r["run"].startswith("young"))  # NaN: null in JSON


def test_a_missing_folder_or_one_without_runs_says_what_to_pass(tmp_path, capsys) -> None:
    assert main(["sweep", str(tmp_path / "nowhere")]) == 2
    assert "does not exist; pass the log folder" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path)]) == 2
    assert "has a verdict (train with bertwatch.watch(trainer)" in capsys.readouterr().out


def test_a_long_history_keeps_the_worst_of_each_stretch() -> None:
    history = [(s, "healthy") for s in range(48)]
    history[5] = (5, "failing")
    assert strip(history, width=24) == "++X" + "+" * 21


def test_a_real_run_reads_back_as_the_callback_judged_it(tmp_path) -> None:
    from bertwatch.callbacks import BertWatchCallback
    from tests.support.tiny_trainer import toy_trainer

    callback = BertWatchCallback(every_n_steps=2, num_probe_examples=6, quiet=True, on_alert="none")
    trainer = toy_trainer(tmp_path / "out", [], save_strategy="no", report_to=["tensorboard"], learning_rate=2e-3)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    (run,) = read_sweep(tmp_path / "out")
    final = callback.alerting.verdict
    assert (run.verdict.step, run.verdict.label, run.verdict.reasons) == (final.step, final.label, final.reasons)
    assert (run.learning_rate, run.seed, run.max_steps, run.ended) == (2e-3, 7, 6, True)
    assert [label for _, label in run.history] == ["cannot tell", "at risk", "failing", "failing"]
