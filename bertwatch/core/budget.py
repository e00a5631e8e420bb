"""The overhead budget: when an unpinned probe step is due, so that bertwatch's share of wall time stays within it.

The rule's one home (torch-free, pure). bertwatch times, with one clock, the wall time since training began and the
part of it spent inside bertwatch (setup, probe passes, writing). An unpinned probe at a step is due when, counting
the next probe at the cost of the last one,

    own + cost <= budget * (wall + cost)          (bertwatch's share after that probe stays within the budget)

and at least ``MIN_SPACING`` optimiser steps have passed since the last measured step. Pinned probes (step 0, each
evaluation, the end, an explicit ``every_n_steps``) are never skipped; their time counts against the budget, so
after an expensive pinned probe the budgeted ones wait until training has earned the time back. At a steady state
with probe cost ``c`` and step time ``t`` the spacing is about ``c * (1 - budget) / (budget * t)`` steps.

When the run's last step is known (the Trainer's ``max_steps``) and a pinned probe is to measure it, the share at
the end must stay within the budget too, that probe (at the cost of the last) and the training still to come (the
steps left at the mean step time so far) included:

    own + cost + end <= budget * (wall + cost + remaining + end)

so no budgeted probe is taken so near the end that the end's own probe would push the run over (without this rule a
100-step run would measure step 96, then the end, at 2.9% of its wall time under a 2% budget). Earlier in a run the training still to
come pays for the end, and the first rule alone sets the spacing.

Example:
    >>> now = [0.0]
    >>> meter = OverheadMeter(0.02, clock=lambda: now[0])
    >>> meter.start()
    >>> now[0] = 2.0
    >>> meter.add_own(2.0, probe_step=0)  # the pinned step-0 probe took 2 s
    >>> now[0] = 100.0
    >>> meter.due(50)  # 2 + 2 <= 0.02 * (100 + 2)? no
    False
    >>> now[0] = 200.0
    >>> meter.due(100)  # 2 + 2 <= 0.02 * (200 + 2) = 4.04
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_OVERHEAD_BUDGET",
    "MIN_SPACING",
    "CostForecast",
    "OverheadMeter",
    "ProbeReason",
    "check_budget",
    "forecast",
    "probe_due",
]

#: bertwatch's default share of the training run's wall time.
DEFAULT_OVERHEAD_BUDGET = 0.02
#: The fewest optimiser steps between two budgeted probes (a cheap probe on a slow step is not taken every step).
MIN_SPACING = 10


@dataclass(frozen=True)
class ProbeReason:
    """Why a step was measured: ``"start"``, ``"evaluation"``, ``"end"``, ``"every_n_steps"`` (pinned) or
    ``"budget"``; with bertwatch's share of wall time when it was decided."""

    step: int
    reason: str
    share: float

    @property
    def pinned(self) -> bool:
        return self.reason != "budget"


def check_budget(value: object) -> float:
    """``value`` as a budget: a number in (0, 1]. Raises TypeError / ValueError with what to pass."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"overhead_budget must be a number in (0, 1], e.g. 0.02 for 2%, not {value!r}")
    value = float(value)
    if not (0.0 < value <= 1.0) or math.isnan(value):
        raise ValueError(f"overhead_budget must be in (0, 1] (a share of wall time, 0.02 = 2%), got {value}")
    return value


def probe_due(
    wall_s: float, own_s: float, cost_s: float, budget: float, remaining_s: float = 0.0, end_s: float = 0.0
) -> bool:
    """Whether one more probe costing ``cost_s`` keeps bertwatch's share of wall time within ``budget``:
    ``own_s + cost_s <= budget * (wall_s + cost_s)``, ``wall_s`` the run's wall time so far and ``own_s`` bertwatch's
    part of it (seconds); and, where a pinned probe costing ``end_s`` is to come after ``remaining_s`` more seconds
    of training, ``own_s + cost_s + end_s <= budget * (wall_s + cost_s + remaining_s + end_s)`` (the share at the
    end of the run).

    Example:
        >>> probe_due(wall_s=70.0, own_s=0.8, cost_s=0.55, budget=0.02)  # 1.35 <= 1.411
        True
        >>> probe_due(wall_s=70.0, own_s=0.8, cost_s=0.55, budget=0.02, remaining_s=3.0, end_s=0.55)  # 1.9 > 1.482
        False
    """
    if own_s + cost_s > budget * (wall_s + cost_s):
        return False
    return end_s <= 0.0 or own_s + cost_s + end_s <= budget * (wall_s + cost_s + remaining_s + end_s)


class OverheadMeter:
    """bertwatch's own time against the run's wall time, read from ``clock`` (seconds; injected for tests), and
    the budget rule on them.

    Call :meth:`start` when training begins (with the step it begins at and, when known, the step a pinned probe
    will measure at the end), :meth:`add_own` with the seconds of each piece of bertwatch's work (``probe_step`` when
    that work measured a step, so its cost is the next probe's estimate), :meth:`due` to ask whether an unpinned
    probe is due at a step.
    """

    def __init__(self, budget: float = DEFAULT_OVERHEAD_BUDGET, clock: Callable[[], float] = time.perf_counter):
        self.budget = check_budget(budget)
        self.clock = clock
        self.started: float | None = None
        self.own = 0.0
        self.last_cost: float | None = None
        self.last_step: int | None = None
        self.first_step = 0
        self.end_step: int | None = None

    def start(self, first_step: int = 0, end_step: int | None = None) -> None:
        """Training begins now, at optimiser step ``first_step`` (a resumed run's); ``end_step``: the last step,
        when a pinned probe will measure it (None: unknown, or no probe at the end). Forgets any earlier run."""
        self.started = self.clock()
        self.own, self.last_cost, self.last_step = 0.0, None, None
        self.first_step, self.end_step = first_step, end_step

    def wall(self) -> float:
        """Seconds since :meth:`start` (0 before it)."""
        return 0.0 if self.started is None else self.clock() - self.started

    def share(self) -> float:
        """bertwatch's share of the wall time so far (0 before any wall time)."""
        wall = self.wall()
        return self.own / wall if wall > 0 else 0.0

    def add_own(self, seconds: float, probe_step: int | None = None) -> None:
        """Count ``seconds`` of bertwatch's work; ``probe_step``: the step that work measured."""
        self.own += max(0.0, seconds)
        if probe_step is not None:
            self.last_cost, self.last_step = max(0.0, seconds), probe_step

    def eligible(self, step: int) -> bool:
        """Whether ``step`` may be a budgeted probe at all: training started, ``MIN_SPACING`` steps after the last
        measured one (depends on the measured steps only, so processes that measured the same steps agree)."""
        if self.started is None:
            return False
        return self.last_step is None or step - self.last_step >= MIN_SPACING

    def due(self, step: int) -> bool:
        """Whether an unpinned probe is due at ``step``: :meth:`eligible` and within the budget (:func:`probe_due`,
        the next probe and the end's costing as much as the last, the steps left to the end at the mean training
        step time so far)."""
        if not self.eligible(step):
            return False
        cost, wall = self.last_cost or 0.0, self.wall()
        remaining = end = 0.0
        if self.end_step is not None and self.first_step < step < self.end_step:
            remaining, end = (self.end_step - step) * self.step_time(step), cost
        return probe_due(wall, self.own, cost, self.budget, remaining, end)

    def step_time(self, step: int) -> float:
        """The mean seconds of one optimiser step so far, bertwatch's own time left out, ``step`` steps being done
        (0 before the first)."""
        done = step - self.first_step
        return max(0.0, self.wall() - self.own) / done if done > 0 else 0.0


@dataclass(frozen=True)
class CostForecast:
    """bertwatch's expected cost over a whole run, in seconds: ``wall_s`` the run's wall time (training and
    bertwatch), ``events_s`` the setup and the measurements at step 0, the evaluations and the end, ``between_s`` the
    ``between`` measurements in between (budgeted, or every ``every_n_steps``)."""

    wall_s: float
    events_s: float
    between_s: float
    between: int

    @property
    def share(self) -> float:
        """bertwatch's share of the run's wall time."""
        return self.shares()[0]

    def shares(self) -> tuple[float, float, float]:
        """``(all, events, between)`` as shares of the wall time (``all`` = ``events`` + ``between``)."""
        wall = self.wall_s if self.wall_s > 0 else math.inf
        return (self.events_s + self.between_s) / wall, self.events_s / wall, self.between_s / wall


def forecast(
    steps: tuple[int, int],
    step_s: float,
    pass_s: float,
    start_s: float,
    events: tuple[int, ...],
    every_n_steps: int | None,
    budget: float,
) -> CostForecast:
    """bertwatch's cost over a run of optimiser steps ``steps`` = ``(first, last)`` taking ``step_s`` seconds each,
    bertwatch having spent ``start_s`` before the first (setup and step 0's measurement): one measurement at each
    step of ``events`` (the evaluations and the end; pinned) and, between them, every ``every_n_steps`` steps or,
    with ``every_n_steps`` None, where :meth:`OverheadMeter.due` takes one under ``budget``; each measurement costs
    ``pass_s``. The run is replayed on a simulated clock through the meter itself, so the measurements between are
    those the rule would take at a steady step time (one check a step: about 0.1 s for 100,000 steps); the Trainer's
    own evaluation time is not known and left out (the shares come out a little high when evaluations are long).

    Example:
        >>> f = forecast((0, 200), step_s=1.0, pass_s=2.0, start_s=3.0, events=(100, 200), every_n_steps=None,
        ...              budget=0.02)
        >>> round(f.wall_s), f.events_s, f.between  # 200 s of training, 3 + 2 x 2 s of events, nothing fits between
        (207, 7.0, 0)
        >>> forecast((0, 2000), 1.0, 2.0, 3.0, (2000,), None, 0.02).between  # 2000 s earn room for 17 more
        17
    """
    first, last = steps
    now = [0.0]
    meter = OverheadMeter(budget, clock=lambda: now[0])
    meter.start(first, last if last in events else None)
    now[0] = start_s
    meter.add_own(start_s - min(pass_s, start_s))
    meter.add_own(min(pass_s, start_s), probe_step=first)
    events_s, between_s, between = start_s, 0.0, 0
    pinned = set(events)
    for step in range(first + 1, last + 1):
        now[0] += step_s
        if step in pinned:
            events_s += pass_s
        elif (every_n_steps is not None and every_n_steps > 0 and step % every_n_steps == 0) or (
            every_n_steps is None and meter.due(step)
        ):
            between_s, between = between_s + pass_s, between + 1
        else:
            continue
        now[0] += pass_s
        meter.add_own(pass_s, probe_step=step)
    return CostForecast(now[0], events_s, between_s, between)
