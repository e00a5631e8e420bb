"""The cost forecast of ``core.budget``: a run replayed on a simulated clock gives the wall time, the events' cost and
the measurements the budget takes between them, checked against plain arithmetic and against the pacing itself
driven step by step."""

from __future__ import annotations

import math

import pytest

from bertwatch.callbacks.pacing import Pinned, ProbePacing
from bertwatch.core.budget import MIN_SPACING, CostForecast, forecast

pytestmark = pytest.mark.fast


def _paced(steps, step_s, pass_s, setup_s, evaluations, every_n_steps, budget):
    """The same run driven through ``ProbePacing`` as a callback drives it (setup, step 0, then each step: the
    budget's or every_n_steps' measurement at step end, an evaluation's, the end's), on a clock only the run moves;
    returns the pacing and the wall time."""
    now = [0.0]
    pacing = ProbePacing(every_n_steps, budget, Pinned(True, True, True), clock=lambda: now[0])
    pacing.start(0, steps)

    def spend(seconds, step=None, setup=False):
        now[0] += seconds
        pacing.charge(seconds, step, setup=setup)

    spend(setup_s, setup=True)
    assert pacing.due("begin", 0)
    spend(pass_s, 0)
    for step in range(1, steps + 1):
        now[0] += step_s
        measured = pacing.due("step", step) if step not in evaluations and step != steps else False
        measured = pacing.due("evaluate", step) if step in evaluations else measured
        measured = pacing.due("end", step) if step == steps and step not in evaluations else measured
        if measured:
            spend(pass_s, step)
    return pacing, now[0]


@pytest.mark.parametrize(
    ("steps", "step_s", "pass_s", "setup_s", "evaluations", "every", "budget"),
    [
        (200, 1.0, 2.0, 3.0, (100, 200), None, 0.02),  # the events alone exceed the budget: nothing between
        (3000, 0.5, 0.4, 1.0, (1000, 2000, 3000), None, 0.02),  # a long run: the budget takes many
        (500, 0.2, 0.05, 0.5, (), None, 0.05),  # cheap passes: spaced by the minimum
        (120, 1.0, 5.0, 2.0, (60,), 25, 0.02),  # a fixed cadence, whatever it costs
        (120, 1.0, 5.0, 2.0, (60,), 0, 0.02),  # events only
    ],
)
def test_the_forecast_is_what_the_pacing_does_on_the_same_run(
    steps, step_s, pass_s, setup_s, evaluations, every, budget
) -> None:
    events = tuple(sorted(set(evaluations) | {steps}))
    cost = forecast((0, steps), step_s, pass_s, setup_s + pass_s, events, every, budget)
    pacing, wall = _paced(steps, step_s, pass_s, setup_s, evaluations, every, budget)
    events_s, between_s, between = pacing.spent()
    assert cost.between == between, (cost, pacing.log)
    assert cost.wall_s == pytest.approx(wall) and cost.events_s == pytest.approx(events_s)
    assert cost.between_s == pytest.approx(between_s)
    # plain arithmetic: the run is its steps and its measurements, each pass_s; the events are the setup and theirs
    passes = 1 + len(events) + cost.between
    assert cost.wall_s == pytest.approx(steps * step_s + setup_s + passes * pass_s)
    assert cost.events_s == pytest.approx(setup_s + (1 + len(events)) * pass_s)
    total, events_share, between_share = cost.shares()
    assert total == pytest.approx(events_share + between_share) == pytest.approx(cost.share)
    if every:
        assert cost.between == len([s for s in range(every, steps + 1, every) if s not in events])


def test_under_the_budget_the_measurements_between_fill_it_and_never_overrun_it() -> None:
    steps, step_s, pass_s, budget = 5000, 0.5, 0.4, 0.02
    cost = forecast((0, steps), step_s, pass_s, 2 * pass_s, (steps,), None, budget)
    assert cost.share <= budget * (1 + 1e-9)
    # own = b * wall at the limit: between = b T / (1 - b) - events, to within a pass or two (the steps are whole)
    train = steps * step_s
    expected = (budget * train / (1 - budget) - cost.events_s) / pass_s
    assert abs(cost.between - expected) <= 2, (cost.between, expected)
    spacing = pass_s * (1 - budget) / (budget * step_s)
    assert cost.between <= steps / max(MIN_SPACING, spacing) + 1


def test_events_that_exceed_the_budget_leave_nothing_between_and_say_their_share() -> None:
    cost = forecast((0, 50), 1.0, 2.0, 4.0, (25, 50), None, 0.02)
    assert cost.between == 0 and cost.between_s == 0.0
    assert cost.share == pytest.approx((4.0 + 2 * 2.0) / (50 * 1.0 + 4.0 + 2 * 2.0))
    assert cost.share > 0.02


def test_a_resumed_run_counts_its_own_steps_only_and_an_empty_run_costs_nothing() -> None:
    resumed = forecast((400, 500), 1.0, 1.0, 1.0, (500,), 0, 0.02)
    assert resumed.wall_s == pytest.approx(100 + 1.0 + 1.0)
    empty = CostForecast(0.0, 0.0, 0.0, 0)
    assert empty.shares() == (0.0, 0.0, 0.0) and not math.isnan(empty.share)
