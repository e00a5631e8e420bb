"""What bertwatch says while it watches (callbacks/announce.py): the start lines, the cost line after the first
steps, the alert lines, the end lines, on world process zero only and silenced by ``quiet=True`` or
``BERTWATCH_QUIET=1``; the facts in them checked against the run (its probe set, its event file, its measured steps
and drift, its cost), and the shares they print adding up as printed."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bertwatch.callbacks import BertWatchCallback, announce
from bertwatch.callbacks.announce import (
    Pinned,
    RunPlan,
    RunSummary,
    end_lines,
    forecast_line,
    moved_most,
    percents,
    start_lines,
)
from bertwatch.core.alerts import Alert
from bertwatch.core.budget import CostForecast
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
        "eval set (longest 41 tokens, none cut), measured at step 0, each evaluation and the end, and in between as "
        "the 2% overhead budget allows"
    )
    assert events == "events go to out/runs/x"
    assert view.startswith("see them live: tensorboard --logdir out/runs --samples_per_plugin=bertwatch=0 ")
    cut = start_lines(_plan(cut=3, every_n_steps=20, pinned=("the end",), run_dir=None))
    assert len(cut) == 1  # off world process zero there is no run directory to show
    assert "3 cut to 128 tokens" in cut[0] and cut[0].endswith("measured at every 20 steps and the end")
    fixed = start_lines(_plan(every_n_steps=20))[0]
    assert fixed.endswith("measured at step 0, every 20 steps, each evaluation and the end")
    only = start_lines(_plan(every_n_steps=0, pinned=("step 0", "the end")))[0]
    assert only.endswith("measured at step 0 and the end")
    judged = start_lines(_plan(verdict=True))[0]
    assert judged == first + "; the run verdict reads every step's training loss and each measurement's probe loss"
    for line in (first, cut[0], fixed, only):
        assert "pinned" not in line and "wall time" not in line


def test_a_run_directory_with_spaces_is_quoted_for_the_shell(tmp_path) -> None:
    run = tmp_path / "my runs" / "a b"
    view = start_lines(_plan(run_dir=str(run)))[2]
    command = shlex.split(view.split(": ", 1)[1].split("   ")[0])
    assert command[command.index("--logdir") + 1] == str(tmp_path / "my runs")


def _shares(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)%", text)]


def test_the_events_are_named_as_the_user_set_them_up() -> None:
    assert Pinned(True, (30, 60, 90), True, None, 100).events() == ("step 0", "each evaluation", "the end")
    counted = Pinned(True, (30, 60, 90), True, None, 100).events(counted=True)
    assert counted == ("step 0", "the 3 evaluations", "the end")
    assert Pinned(False, (50,), False, None, 100).events() == ("the evaluation",)
    assert Pinned(True, (50, 100), True, 25, 100).steps() == (50, 100)  # an evaluation at the end is one measurement
    assert Pinned(True, (50, 100), True, 25, 100).events(counted=True) == ("step 0", "the 2 evaluations")
    assert Pinned(True, (), False, None, 100).steps() == ()


def test_printed_percentages_add_up_as_printed() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):
        parts = rng.random(2) * rng.choice([0.001, 0.05, 0.5])
        digits = int(rng.integers(0, 2))
        total, shown = percents(float(parts.sum()), parts, digits)
        printed = [float(x.rstrip("%")) for x in shown]
        assert round(sum(printed), digits) == float(total.rstrip("%")), (parts, total, shown)
        assert all(abs(p - 100 * q) < 10**-digits for p, q in zip(printed, parts)), (parts, shown)
    assert percents(0.126, (0.107, 0.019), 1) == ("12.6%", ["10.7%", "1.9%"])


def test_the_forecast_line_gives_the_run_length_and_the_share_split_between_events_and_the_rest() -> None:
    pinned = Pinned(True, (100, 150), True, None, 200)
    cost = CostForecast(wall_s=220.0, events_s=16.0, between_s=4.0, between=2)
    line = forecast_line(6.0, 1.0, 200, cost, pinned, 0.02)
    assert line.startswith(
        "setting up and measuring step 0 took 6.0 s; at 1 s a step the run's 200 steps take about 4 min"
    )
    total, events, between = _shares(line)
    assert (total, events, between) == (9, 7, 2) and events + between == total
    assert "for step 0, the 2 evaluations and the end" in line and "for about 2 measurements between them" in line
    over = forecast_line(6.0, 1.0, 50, CostForecast(70.0, 14.0, 0.0, 0), pinned, 0.02)
    assert over.endswith(
        "bertwatch about 20% of that, all for step 0, the 2 evaluations and the end: more than the 2% overhead "
        "budget, so nothing is measured in between"
    )
    fixed = forecast_line(1.0, 0.5, 100, CostForecast(60.0, 4.0, 6.0, 9), Pinned(True, (), True, 10, 100), 0.02)
    assert "7% for step 0 and the end, 10% for the 9 measurements every 10 steps" in fixed
    small = forecast_line(1.0, 1.0, 5000, CostForecast(5000.0, 10.0, 40.0, 40), pinned, 0.02)
    assert _shares(small) == [1.0, 0.2, 0.8], "under 2% the shares keep a decimal"


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
    summary = _summary((0, 12), 0, noise)
    assert "no head moved beyond float32 rounding" in end_lines(summary)[0]


def _summary(steps, alerts, grids, shares=(0.031, 0.025, 0.006), between=2, verdict=None, **pinned):
    events = dict(at_start=True, evaluations=(10,), at_end=True, every_n_steps=None, max_steps=steps[-1])
    events.update(pinned)
    return RunSummary(
        steps, alerts, grids, 1.5, shares, between, Pinned(**events), 0.02, "bertwatch report out", verdict
    )


def test_the_end_lines_count_steps_and_alerts_and_split_the_cost() -> None:
    grids = {"drift_js": np.array([[0.0, 0.25]])}
    line, cost, report = end_lines(_summary((0, 10, 20), 2, grids))
    assert line == "measured 3 steps (0 to 20); 2 stability alerts; moved most: L0 H1 (JS 0.25)"
    assert cost == (
        "took 1.5 s, 3.1% of the run: 2.5% for step 0, the evaluation and the end, 0.6% for 2 measurements between them"
    )
    assert report == "report: bertwatch report out"
    over = end_lines(_summary((0, 10, 20), 0, grids, shares=(0.148, 0.148, 0.0), between=0))[1]
    assert over == (
        "took 1.5 s, 14.8% of the run, all for step 0, the evaluation and the end: more than the 2% overhead budget, "
        "so nothing was measured in between"
    )
    fixed = end_lines(_summary((0, 5, 10, 20), 0, grids, shares=(0.1, 0.04, 0.06), between=3, every_n_steps=5))[1]
    assert fixed.endswith("4.0% for step 0, the evaluation and the end, 6.0% for the 3 measurements every 5 steps")
    rounded = end_lines(_summary((0, 20), 0, grids, shares=(0.126, 0.1074, 0.0186), between=1))[1]
    assert _shares(rounded) == [12.6, 10.7, 1.9] and rounded.endswith(" 1.9% for 1 measurement between them")


def test_the_ablation_after_training_is_left_out_of_the_share_and_said_apart() -> None:
    """bertwatch's seconds are a share of the training, not of training plus the ablation sweep that follows it
    (which would make them look several times smaller); the sweep's minutes get their own words."""
    meter = SimpleNamespace(wall=lambda: 160.0, budget=0.02)  # 100 s of training, then 60 s of ablation
    pacing = SimpleNamespace(measured=lambda event: (10,) if event == "evaluation" else (20,), meter=meter)
    pacing.spent = lambda: (3.0, 1.0, 2)
    events = Pinned(at_start=True, evaluations=(10,), at_end=True, every_n_steps=None, max_steps=20)
    summary = RunSummary.of([(0, {}), (20, {})], [], None, pacing, events, "report", after_training=60.0)
    assert summary.shares == pytest.approx((0.04, 0.03, 0.01))
    cost = end_lines(summary)[1]
    assert cost.startswith("took 4.0 s, 4.0% of the run") and cost.endswith(
        "; then the ablation after training took 1.0 min"
    )
    assert "ablation" not in end_lines(RunSummary.of([(0, {}), (20, {})], [], None, pacing, events, "report"))[1]


def test_the_end_lines_give_the_verdict_when_there_is_one() -> None:
    summary = _summary((0, 10), 0, {}, verdict="failing: predictions have collapsed")
    assert end_lines(summary)[2] == "verdict: failing: predictions have collapsed"


def _alert(layer, head, rule="logit_growth", value=30.0, since=10, stat="max_logit"):
    return Alert(layer, head, rule, stat, since, since, value, 5.0, 15.0)


def _run(tmp_path, **options):
    callback = BertWatchCallback(every_n_steps=3, num_probe_examples=6, **options)
    trainer = toy_trainer(tmp_path / "out", [], eval_strategy="steps", eval_steps=3)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    return callback


def test_a_training_run_speaks_at_its_start_after_its_first_steps_and_at_its_end(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    callback = _run(tmp_path)
    lines = _lines(capsys.readouterr().err)
    (first, events, view, forecast), (end, cost, verdict, report) = lines[:4], lines[-4:]
    said = lines[4:-4]  # as they happened: new alerts, and the first failing verdict (this toy run fails)
    assert all(" in alert since step " in line or line.startswith("verdict at step ") for line in said), said
    failing = [line for line in said if line.startswith("verdict at step ")]
    assert len(failing) == (callback.alerting.verdict.level == 2), said
    assert first.startswith("watching BertForSequenceClassification (2 layers x 4 heads): ")
    assert f"{len(callback.stat_names)} statistics on 6 probe examples from the eval set" in first
    assert "measured at step 0, every 3 steps, each evaluation and the end" in first
    assert forecast.startswith("setting up and measuring step 0 took ") and "the run's 6 steps take about " in forecast
    assert "for step 0 and the 2 evaluations" in forecast  # evaluations at 3 and 6, the last step's the end's
    steps = [step for step, _ in callback.history]
    assert end.startswith(f"measured {len(steps)} steps ({steps[0]} to {steps[-1]}); 0 stability alerts; moved most: ")
    # the cost is the callback's own time against the run's, all of it on the events (every 3 steps = evaluations,
    # the last of which is the end's)
    meter = callback.pacing.meter
    events_s, between_s, count = callback.pacing.spent()
    assert events_s + between_s == pytest.approx(meter.own) and count == 0
    assert cost.startswith(f"took {meter.own:.1f} s, ") and cost.endswith(
        " of the run, all for step 0 and the 2 evaluations"
    )
    assert meter.own / meter.wall() <= _shares(cost)[0] / 100 + 5e-4  # the clock has run on since the end line
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


def test_the_cost_lines_count_the_evaluations_the_trainer_makes(tmp_path, capsys) -> None:
    callback = BertWatchCallback(num_probe_examples=4)
    trainer = toy_trainer(tmp_path / "out", [], eval_strategy="steps", eval_steps=4, max_steps=6)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    assert callback.pacing.measured("evaluation") == (4, 6)  # transformers evaluates at the last step too
    lines = _lines(capsys.readouterr().err)
    forecast = next(line for line in lines if line.startswith("setting up and measuring step 0 took"))
    assert "for step 0 and the 2 evaluations" in forecast
    assert "for step 0 and the 2 evaluations" in next(line for line in lines if line.startswith("took "))


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


def test_the_end_line_says_how_many_alerts_are_still_in_force_the_count_the_verdict_reads() -> None:
    meter = SimpleNamespace(wall=lambda: 100.0, budget=0.02)
    pacing = SimpleNamespace(measured=lambda event: (), meter=meter, spent=lambda: (1.0, 0.0, 0))
    events = Pinned(at_start=True, evaluations=(), at_end=True, every_n_steps=None, max_steps=20)
    raised = [_alert(0, 0), _alert(1, 1), _alert(2, 2, rule="entropy_collapse", stat="entropy")]
    some = RunSummary.of([(0, {}), (20, {})], raised, None, pacing, events, "report", in_force=1)
    assert end_lines(some)[0] == "measured 2 steps (0 to 20); 3 stability alerts raised, 1 still in force at the end"
    every = RunSummary.of([(0, {}), (20, {})], raised, None, pacing, events, "report", in_force=3)
    assert end_lines(every)[0] == "measured 2 steps (0 to 20); 3 stability alerts"


def test_the_end_lines_count_the_sink_alerts_and_say_the_verdict_once(capsys) -> None:
    """A sink alert's quantity (``sink_mass``) is made of ``cls_mass`` and ``sep_mass``: it is counted for the
    callback that measures them; the verdict is said by one callback of the run, and not again where its failing
    line has just said it at the last step."""
    from bertwatch.callbacks.alerting import Alerting
    from bertwatch.core.alerts import AlertSettings
    from bertwatch.core.verdict import Verdict

    meter = SimpleNamespace(wall=lambda: 100.0, budget=0.02)
    pacing = SimpleNamespace(measured=lambda event: (), meter=meter, spent=lambda: (1.0, 0.0, 0))
    alerting = Alerting("warn", AlertSettings(), strict=False)
    sinks = [_alert(1, h, rule="sink_collapse", stat="sink_mass") for h in range(3)]
    alerting.raised = alerting.alerts = [*sinks, _alert(0, 0)]
    alerting.verdict = Verdict(20, 1, ("4 stability alerts in force",))
    member = SimpleNamespace(stat_names=frozenset({"cls_mass", "sep_mass", "max_logit"}), gives_health=True)
    speaker = announce.Speaker()
    speaker.speaks = True
    speaker.pinned = Pinned(at_start=True, evaluations=(), at_end=True, every_n_steps=None, max_steps=20)
    for _ in range(2):  # two callbacks of the run: the first that asks tells it
        speaker.end([(0, {}), (20, {})], alerting, member, pacing, "report", verdict=alerting.verdict_to_tell())
    err = capsys.readouterr().err
    assert "4 stability alerts" in err and err.count("verdict: at risk: 4 stability alerts in force") == 1
    assert alerting.verdict_told and alerting.verdict_to_tell() is None
    alerting.verdict_told, alerting.verdict = False, Verdict(20, 2, ("a reason",))
    alerting.act_on_verdict(alerting.verdict, None)  # the failing line, at the last step
    assert alerting.verdict_to_tell() is None  # the failing line said it: not again in the end lines
    speaker.end([(0, {}), (20, {})], alerting, member, pacing, "report", verdict=None)
    err = capsys.readouterr().err
    assert err.count("failing: a reason") == 1


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _short_run(steps: int, probe_s: float, every_n_steps: int | None = None):
    """A pacing after step 0's probe (``probe_s`` seconds) and 5 steps of 1 s, in a run of ``steps`` steps that
    measures the end; and a speaker that planned it."""
    from bertwatch.callbacks.announce import Speaker
    from bertwatch.callbacks.pacing import ProbePacing

    clock = _Clock()
    pacing = ProbePacing(every_n_steps, 0.02, clock=clock)
    pacing.start(0, steps)
    assert pacing.due("begin", 0)
    clock.now += probe_s
    pacing.charge(probe_s, 0)
    for step in range(1, 6):
        clock.now += 1.0
        pacing.due("step", step)
    speaker = Speaker()
    speaker.pinned, speaker.speaks, speaker._forecast_at = Pinned(True, (), True, every_n_steps, steps), True, 5
    return speaker, pacing


def test_a_short_run_measured_at_few_steps_is_told_how_to_get_a_live_line_and_what_it_costs(capsys) -> None:
    speaker, pacing = _short_run(80, probe_s=2.0)  # a probe costs two steps: the 2% budget takes none between
    speaker.forecast(5, pacing)
    cost_line, more = _lines(capsys.readouterr().err)
    assert "all for step 0 and the end: more than the 2% overhead budget" in cost_line
    assert more.startswith(
        "only 2 of the run's 80 steps will be measured, so its live lines are straight between them: every_n_steps=8 "
        "(bertwatch run --every-n-steps 8) measures 9 more, for about "
    )
    with_every = pacing.forecast(5, (80,), 80, 8)[3]
    assert f"for about {with_every.share:.0%} of the run's wall time instead of " in more
    assert more.endswith("or raise overhead_budget= (now 2%) to let the budget take more")
    for quiet_run in (_short_run(80, 2.0, every_n_steps=10), _short_run(2000, 2.0), _short_run(80, 0.01)):
        quiet_run[0].forecast(5, quiet_run[1])
        assert len(_lines(capsys.readouterr().err)) == 1, "a fixed cadence, a long run, a cheap probe: no advice"


def test_a_short_run_gets_a_point_every_ten_steps_where_the_budget_allows() -> None:
    """The default cadence is not changed for short runs: where the probe is cheap against a step, the budget
    already measures every ``MIN_SPACING`` steps (8 points in 80 steps); where a run is measured 2-3 times, the
    budget is what stops it, and the cost line says how to get more."""
    from bertwatch.core.budget import MIN_SPACING, forecast

    cheap = forecast((0, 80), step_s=1.0, pass_s=0.01, start_s=0.02, events=(80,), every_n_steps=None, budget=0.02)
    assert MIN_SPACING == 10 and cheap.between == 7  # steps 10, 20, ..., 70, with step 0 and the end
    dear = forecast((0, 80), step_s=1.0, pass_s=2.0, start_s=3.0, events=(80,), every_n_steps=None, budget=0.02)
    assert dear.between == 0
