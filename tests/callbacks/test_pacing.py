"""The overhead budget (``core.budget``, ``callbacks.pacing``) on simulated clocks: the spacing the rule gives, the
share it keeps, pinned steps always measured, and the callback's measured steps and reasons in a real Trainer run."""

from __future__ import annotations

import math

import pytest
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import bertwatch.callbacks.pacing as pacing_module
from bertwatch.callbacks import BertWatchCallback, EntropyCallback, ExpertOptions, watch
from bertwatch.callbacks.pacing import PROBE_SERIES, ProbePacing, ProbeReason
from bertwatch.core.budget import MIN_SPACING, OverheadMeter, check_budget, probe_due
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args


class _Clock:
    """Simulated seconds: ``now`` moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _simulate(steps, step_s, probe_s, budget, every_n_steps=None, setup_s=0.0, end=False):
    """A training loop of ``steps`` optimiser steps of ``step_s`` seconds, with a setup of ``setup_s`` seconds, a
    probe costing ``probe_s`` at step 0 and wherever the pacing says (and, with ``end``, a pinned one at the last
    step when it is not measured yet, the pacing told of it at the start); returns the pacing and the share after
    each probe."""
    clock = _Clock()
    pacing = ProbePacing(every_n_steps, budget, clock=clock)
    pacing.start(0, steps if end else None)
    clock.now += setup_s
    pacing.charge(setup_s)
    shares = []

    def probe(step, event):
        assert event == "step" or pacing.due(event, step)
        clock.now += probe_s
        pacing.charge(probe_s, step)
        shares.append((step, pacing.meter.own / pacing.meter.wall()))

    probe(0, "begin")
    for step in range(1, steps + 1):
        clock.now += step_s
        if pacing.due("step", step):
            probe(step, "step")
    if end and shares[-1][0] != steps:
        probe(steps, "end")
    return pacing, shares


@pytest.mark.fast
def test_the_rule_is_the_share_after_one_more_probe() -> None:
    assert probe_due(wall_s=100.0, own_s=1.0, cost_s=1.0, budget=0.02)  # 2 <= 0.02 * 101
    assert not probe_due(wall_s=90.0, own_s=1.0, cost_s=1.0, budget=0.02)  # 2 > 0.02 * 91
    assert probe_due(wall_s=0.0, own_s=0.0, cost_s=0.0, budget=0.02)
    assert not OverheadMeter(0.02, _Clock()).due(50), "nothing is due before training starts"
    assert check_budget(1) == 1.0
    for bad in (0.0, -0.1, 1.01, math.nan):
        with pytest.raises(ValueError, match="overhead_budget must be in"):
            check_budget(bad)
    with pytest.raises(TypeError, match="overhead_budget must be a number"):
        check_budget(True)


@pytest.mark.fast
@pytest.mark.parametrize(("step_s", "probe_s", "budget"), [(1.0, 2.0, 0.02), (0.3, 0.9, 0.05), (0.05, 0.02, 0.01)])
def test_budgeted_probes_keep_the_share_within_the_budget_at_the_spacing_it_implies(step_s, probe_s, budget) -> None:
    pacing, shares = _simulate(2000, step_s, probe_s, budget)
    budgeted = [step for step, _ in shares[1:]]
    assert len(budgeted) >= 3
    assert all(share <= budget * (1 + 1e-9) for step, share in shares[1:]), shares
    spacing = probe_s * (1 - budget) / (budget * step_s)  # c / (c + k t) <= b  <=>  k >= c (1 - b) / (b t)
    gaps = [b - a for a, b in zip(budgeted, budgeted[1:])]
    assert all(max(MIN_SPACING, math.ceil(spacing) - 1) <= g <= max(MIN_SPACING, math.ceil(spacing) + 1) for g in gaps)
    assert [r.reason for r in pacing.log] == ["start"] + ["budget"] * len(budgeted)


@pytest.mark.fast
def test_an_expensive_pinned_start_delays_the_first_budgeted_probe_until_training_earns_it_back() -> None:
    step_s, probe_s, budget, setup_s = 1.0, 2.0, 0.02, 30.0
    _, shares = _simulate(3000, step_s, probe_s, budget, setup_s=setup_s)
    own = probe_s + setup_s  # at step s the wall time is s * step_s + own; due when own + c <= b (wall + c)
    first = math.ceil(((own + probe_s) / budget - probe_s - own) / step_s)
    assert shares[1][0] == first


@pytest.mark.fast
def test_the_end_probe_is_kept_room_for() -> None:
    # a 100-step run as bench_overhead.py measures it: 0.75 s steps, 0.57 s probes, a 0.28 s setup, a 2% budget
    assert not probe_due(wall_s=70.0, own_s=0.8, cost_s=0.55, budget=0.02, remaining_s=3.0, end_s=0.55)
    assert probe_due(wall_s=70.0, own_s=0.8, cost_s=0.55, budget=0.02, remaining_s=30.0, end_s=0.55)
    unaware, unaware_shares = _simulate(100, 0.75, 0.57, 0.02, setup_s=0.28)
    assert [r.step for r in unaware.log] == [0, 93], "without the end in view the budget takes step 93"
    _, late = _simulate(100, 0.75, 0.57, 0.02, setup_s=0.28, end=True)
    assert [step for step, _ in late] == [0, 100], "with it, the step-0 and end probes are the run's"
    assert late[-1][1] <= 0.02, late
    unaware_end = (unaware.meter.own + 0.57) / (unaware.meter.wall() + 0.57)  # what its end probe would make it
    assert unaware_end > 0.02, "the case must be one where the old rule overran the budget"


@pytest.mark.fast
@pytest.mark.parametrize(("step_s", "probe_s", "budget"), [(1.0, 2.0, 0.02), (0.3, 0.9, 0.05), (0.05, 0.02, 0.01)])
def test_keeping_room_for_the_end_changes_nothing_until_near_it(step_s, probe_s, budget) -> None:
    _, plain = _simulate(2000, step_s, probe_s, budget)
    _, ended = _simulate(2000, step_s, probe_s, budget, end=True)
    ended_steps, plain_steps = [s for s, _ in ended], [s for s, _ in plain]
    spacing = max(MIN_SPACING, math.ceil(probe_s * (1 - budget) / (budget * step_s)) + 1)
    early = [s for s in plain_steps if s < 2000 - 2 * spacing]
    assert ended_steps[: len(early)] == early
    assert ended_steps[-1] == 2000 and all(share <= budget * (1 + 1e-9) for _, share in ended[1:]), ended[-3:]


@pytest.mark.fast
def test_cheap_probes_are_spaced_by_the_minimum_and_runs_are_deterministic() -> None:
    pacing, shares = _simulate(100, 1.0, 0.001, 0.02)
    assert [step for step, _ in shares] == list(range(0, 101, MIN_SPACING))
    again, _ = _simulate(100, 1.0, 0.001, 0.02)
    assert again.log == pacing.log


@pytest.mark.fast
def test_an_explicit_every_n_steps_is_pinned_whatever_the_probes_cost() -> None:
    pacing, shares = _simulate(60, 0.01, 50.0, 0.02, every_n_steps=7)
    assert [step for step, _ in shares] == list(range(0, 61, 7))
    assert {r.reason for r in pacing.log[1:]} == {"every_n_steps"} and all(r.pinned for r in pacing.log)
    pacing, shares = _simulate(60, 0.01, 50.0, 0.02, every_n_steps=0)
    assert [step for step, _ in shares] == [0]


# ------------------------------------------------------------------------------------------------ in a Trainer


class _TickingClock:
    """Every reading moves one simulated second on: deterministic whatever the machine, and bertwatch's own
    share of the wall time stays near 1/3 (two readings around its work, one for each decision)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _train(out, callback, **overrides):
    tok = tiny_tokenizer()
    values = dict(logging_steps=5, report_to="tensorboard")
    values.update(overrides)
    trainer = T.Trainer(
        model=tiny_bert(tok),
        args=training_args(str(out), **values),
        train_dataset=toy_dataset(tok, 100, 0),
        eval_dataset=toy_dataset(tok, 20, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[callback],
    )
    watch(trainer)
    trainer.train()
    return trainer


def test_an_exhausted_budget_still_measures_every_pinned_step(tmp_path) -> None:
    cb = strict(EntropyCallback, num_probe_examples=4)
    cb.pacing.meter.clock = _TickingClock()
    _train(tmp_path, cb, max_steps=12, eval_strategy="steps", eval_steps=5)
    assert [s for s, _ in cb.history] == [0, 5, 10, 12]
    assert [(r.step, r.reason) for r in cb.pacing.log] == [(0, "start"), (5, "evaluation"), (10, "evaluation"),
                                                           (12, "evaluation")]  # fmt: skip


def test_budgeted_steps_and_their_reasons_reach_the_event_file(tmp_path) -> None:
    cb = BertWatchCallback(stats=["entropy", "cls_mass"], num_probe_examples=4, num_maps=1, overhead_budget=1.0)
    cb.pacing.meter.clock = _TickingClock()  # a share of 1/3 is within a budget of 1: every step the spacing allows
    _train(tmp_path, cb, max_steps=2 * MIN_SPACING + 5)
    expected = [0, MIN_SPACING, 2 * MIN_SPACING, 2 * MIN_SPACING + 5]
    assert [s for s, _ in cb.history] == expected
    assert [r.reason for r in cb.pacing.log] == ["start", "budget", "budget", "end"]
    assert (cb.pacing.meter.first_step, cb.pacing.meter.end_step) == (0, 2 * MIN_SPACING + 5), "the end in view"
    (run,) = (tmp_path / "runs").iterdir()
    acc = EventAccumulator(str(run), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("bertwatch/heads/entropy")] == expected  # the Heads view's slider steps
    assert [e.step for e in acc.Tensors(f"bertwatch/series/{PROBE_SERIES}")] == expected
    budgeted = [e.value for e in acc.Scalars(f"bertwatch_series/{PROBE_SERIES}/budgeted")]
    assert budgeted == [0.0, 1.0, 1.0, 0.0]
    shares = [e.value for e in acc.Scalars(f"bertwatch_series/{PROBE_SERIES}/overhead_share")]
    assert all(0.0 < s < 1.0 for s in shares)


def _agree_worker(rank: int, init_file: str, rounds: list[list[bool]], results) -> None:
    import torch.distributed as dist

    from bertwatch.callbacks.pacing import agreed_across_processes

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=len(rounds[0]))
    try:
        results[rank] = [agreed_across_processes(answers[rank]) for answers in rounds]
    finally:
        dist.destroy_process_group()


def test_processes_agree_on_a_budgeted_step(tmp_path) -> None:
    import torch.multiprocessing as mp

    rounds = [[True, False], [True, True], [False, False], [False, True]]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_agree_worker, (str(tmp_path / "init"), rounds, results), nprocs=2, start_method="fork")
        got = dict(results)
    want = [all(answers) for answers in rounds]  # a sharded probe pass needs every rank: all measure or none
    assert got == {0: want, 1: want}


@pytest.mark.fast
def test_a_budgeted_step_is_asked_of_the_other_processes_only_where_the_spacing_allows(monkeypatch) -> None:
    asked = []
    clock = _Clock()
    monkeypatch.setattr(pacing_module, "agreed_across_processes", lambda due: asked.append(due) or False)
    pacing = ProbePacing(None, 1.0, clock=clock)
    pacing.start()
    assert not any(pacing.due("step", step) for step in range(1, 30))
    assert asked == [True] * 29, "before a measured step every step may be budgeted"
    assert pacing.due("begin", 0)
    clock.now += 1.0
    pacing.charge(1.0, 0)
    asked.clear()
    assert not any(pacing.due("step", step) for step in range(1, 30))
    assert len(asked) == 30 - MIN_SPACING


@pytest.mark.fast
def test_maps_follow_the_measured_steps_when_budgeted() -> None:
    def maps(callback):
        return callback._member(callback.stat_names, None).maps

    fixed = maps(BertWatchCallback(every_n_steps=5, num_maps=2))
    assert [s for s in range(1, 41) if fixed.count("step", s, 0)] == [20, 40]
    spaced = maps(BertWatchCallback(expert=ExpertOptions(maps_every_n_steps=100), num_maps=2))
    assert spaced.count("begin", 0, 0) == 2
    assert [s for s in (60, 130, 200, 231, 300) if spaced.count("step", s, 0)] == [130, 231]
    default = BertWatchCallback(num_maps=2)
    cadence = maps(default)
    chosen = []
    for step in range(10, 90, 10):  # eight budgeted steps: maps at the fourth and the eighth
        if cadence.count("step", step, default.pacing.budgeted_count()):
            chosen.append(step)
        default.pacing.log.append(ProbeReason(step, "budget", 0.01))
    assert chosen == [40, 80]


@pytest.mark.fast
def test_a_delivery_is_charged_and_hands_back_each_measured_step_once() -> None:
    """``ProbePacing.delivered``: the time of a delivery charged to its last step, and the ``probe_steps`` point of
    each step the callback measured, once (a step delivered twice, by its begin and its step, has one)."""
    clock = _Clock()
    pacing = ProbePacing(1, 0.02, clock=clock)
    pacing.start(0)
    assert pacing.due("begin", 0) and pacing.due("step", 0)
    clock.now += 2.0
    points = pacing.delivered(2.0, [0, 0])
    assert [step for step, _ in points] == [0, 0] and points[1][1] == []
    ((point,),) = [records for _, records in points if records]
    assert point.tag == PROBE_SERIES and point.values == {"overhead_share": 1.0, "budgeted": 0.0}
    assert [(r.step, r.reason) for r in pacing.log] == [(0, "start")]
    assert pacing.delivered(0.5, []) == [] and pacing.meter.own == 2.5  # a delivery of nothing: charged all the same
