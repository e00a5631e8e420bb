"""When a callback measures: its pinned events, the overhead budget, and when the attention maps are kept.

``ProbePacing`` is the callback side of ``bertwatch.core.budget`` (the rule's home): it answers whether an event is
due (:meth:`ProbePacing.due`), times bertwatch's own work on the training thread with one clock
(:meth:`ProbePacing.charge`; at each delivery of the run's results, :meth:`ProbePacing.delivered`), and keeps why
each measured step was measured (``ProbeReason``), written to the event file as the ``probe_steps`` series
(``overhead_share`` and ``budgeted`` per measured step; their scalars appear under ``bertwatch_series/probe_steps/``).

Pinned, never skipped: step 0 (``at_start``), each evaluation (``on_evaluate``), the end (``at_end``) and, when
``every_n_steps`` is a number, every multiple of it. With ``every_n_steps=None`` (the default) the other steps are
measured as the budget allows (``OverheadMeter.due``). In a run of several processes they must agree (a sharded
model's probe pass is a collective, and every rank's grids are the same): at each step the spacing allows, one
all-reduce takes the minimum of the processes' answers (:func:`agreed_across_processes`), so all measure or none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from bertwatch.core.budget import CostForecast, OverheadMeter, ProbeReason, forecast
from bertwatch.probe.records import NamedValues

__all__ = ["MapsCadence", "ProbePacing", "ProbeReason"]

#: The ``named_values`` series of the measured steps.
PROBE_SERIES = "probe_steps"
_EVENT_REASONS = {"begin": "start", "evaluate": "evaluation", "end": "end"}
_SETUP = "setup"


@dataclass(frozen=True)
class Pinned:
    """The events measured whatever the budget: ``at_start`` (step 0), ``on_evaluate``, ``at_end``."""

    at_start: bool = True
    on_evaluate: bool = True
    at_end: bool = True


class ProbePacing:
    """One callback's cadence: its ``pinned`` events, ``every_n_steps`` (None: budgeted) and the
    ``OverheadMeter`` on ``clock``.

    ``log``: every measured step with its reason, in order.
    """

    def __init__(
        self,
        every_n_steps: int | None,
        budget: float,
        pinned: Pinned = Pinned(),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.every_n_steps = every_n_steps
        self.pinned = pinned
        self.meter = OverheadMeter(budget, clock)
        self.log: list[ProbeReason] = []
        self._noted: dict[int, str] = {}
        self._unwritten: set[int] = set()
        self._spent: dict[int | str | None, float] = {}  # bertwatch's seconds by the step they were spent on
        self._events: dict[int, str] = {}  # the steps an event (start, evaluation, end) was due at, for the cost

    @property
    def budgeted(self) -> bool:
        return self.every_n_steps is None

    def start(self, first_step: int = 0, end_step: int | None = None) -> None:
        """Training begins at ``first_step``: the wall clock starts and the log empties. ``end_step``: the run's
        last step when the end is measured (the budget then keeps room for that probe, ``OverheadMeter.due``)."""
        self.meter.start(first_step, end_step if self.pinned.at_end else None)
        self.log, self._noted, self._unwritten, self._spent, self._events = [], {}, set(), {}, {}

    def due(self, event: str, step: int) -> bool:
        """Whether the callback measures at ``event`` ("begin", "step", "evaluate", "end") and ``step``; a due
        event is noted with its reason (a pinned reason wins over "budget")."""
        if event == "begin":
            due = self.pinned.at_start
        elif event == "step":
            due = self._step_due(step)
        elif event == "evaluate":
            due = self.pinned.on_evaluate
        else:
            due = event == "end" and self.pinned.at_end
        if due:
            reason = _EVENT_REASONS.get(event) or ("budget" if self.budgeted else "every_n_steps")
            if self._noted.get(step) in (None, "budget"):
                self._noted[step] = reason
            if event in _EVENT_REASONS:
                self._events.setdefault(step, reason)
        return due

    def _step_due(self, step: int) -> bool:
        if self.every_n_steps is None:
            return self.meter.eligible(step) and agreed_across_processes(self.meter.due(step))
        return self.every_n_steps > 0 and step % self.every_n_steps == 0

    def budgeted_count(self) -> int:
        """How many steps the budget chose so far."""
        return sum(r.reason == "budget" for r in self.log)

    def clock(self) -> float:
        return self.meter.clock()

    def charge(self, seconds: float, measured: int | None = None, setup: bool = False) -> None:
        """Count ``seconds`` as bertwatch's own time, spent on the step ``measured`` (None: on no measurement), or
        on the ``setup`` before the first step. The first seconds of a step this callback measured are the next
        probe's cost, and the step goes into the log."""
        new = measured is not None and measured in self._noted and all(r.step != measured for r in self.log)
        key = _SETUP if setup else measured
        self._spent[key] = self._spent.get(key, 0.0) + max(0.0, seconds)
        self.meter.add_own(seconds, probe_step=measured if new else None)
        if new:
            self.log.append(ProbeReason(measured, self._noted[measured], self.meter.share()))
            self._unwritten.add(measured)

    def spent(self) -> tuple[float, float, int]:
        """``(events, between, count)``: bertwatch's seconds so far on the setup and the events (step 0, the
        evaluations, the end), and on everything else (the ``count`` measurements between them, budgeted or every
        ``every_n_steps``, and the checks at other steps). A step measured for an event counts as the event's,
        whatever else measured it first."""
        events = sum(s for key, s in self._spent.items() if key == _SETUP or key in self._events)
        between = [r.step for r in self.log if r.step not in self._events]
        return events, self.meter.own - events, len(between)

    def forecast(
        self, step: int, events: tuple[int, ...], last: int, every_n_steps: int | None = -1
    ) -> tuple[float, float, int, CostForecast]:
        """``(start_s, step_s, steps, cost)`` with ``step`` steps done: bertwatch's seconds on the setup and the first
        step's measurement, the mean training step so far, the run's steps to ``last`` and what they will cost
        (``core.budget.forecast``: each measurement costing what the last did, its judging and writing included;
        one at each of the ``events``' steps, the evaluations and the end); ``every_n_steps``: the cadence to
        forecast, the pacing's own when not given)."""
        meter = self.meter
        start_s, step_s = self._spent.get(_SETUP, 0.0) + self._spent.get(meter.first_step, 0.0), meter.step_time(step)
        pass_s = self._spent.get(meter.last_step, 0.0)
        after = tuple(s for s in events if s > meter.first_step)
        every = self.every_n_steps if every_n_steps == -1 else every_n_steps
        cost = forecast((meter.first_step, last), step_s, pass_s, start_s, after, every, meter.budget)
        return start_s, step_s, last - meter.first_step, cost

    def measured(self, event: str) -> tuple[int, ...]:
        """The measured steps an ``event`` (``"start"``, ``"evaluation"``, ``"end"``) was due at (the first event
        of a step)."""
        return tuple(r.step for r in self.log if self._events.get(r.step) == event)

    def delivered(self, seconds: float, steps: Sequence[int]) -> list[tuple[int, list[NamedValues]]]:
        """The run delivered the results of the measured ``steps`` (oldest first; none: it measured nothing for
        this callback) in ``seconds``: charged (:meth:`charge`, to the last of them), and the ``probe_steps`` points
        now to write, ``(step, records)`` (:meth:`records`)."""
        self.charge(seconds, steps[-1] if steps else None)
        return [(step, self.records(step)) for step in steps]

    def records(self, step: int) -> list[NamedValues]:
        """The measured ``step`` with its reason, as a point of the ``probe_steps`` series (once; empty when
        ``step`` was not measured or is already written), for the run's publisher."""
        if step not in self._unwritten:
            return []
        self._unwritten.discard(step)
        last = next(r for r in reversed(self.log) if r.step == step)
        values = {"overhead_share": last.share, "budgeted": float(not last.pinned)}
        return [NamedValues(PROBE_SERIES, values, f"bertwatch measured step {last.step}: {last.reason}")]


@dataclass
class MapsCadence:
    """When the attention maps of ``num_maps`` probe examples are kept: at step 0, at the end and, at measured
    steps, every ``every`` steps with a fixed cadence (``fixed``); when budgeted, every fourth budgeted step
    (``every`` None), or the first measured step ``every`` or more after the last maps."""

    num_maps: int
    every: int | None
    fixed: bool
    last: int = 0

    def count(self, event: str, step: int, budgeted_so_far: int) -> int:
        """How many examples' maps to keep at ``event`` and ``step`` (``budgeted_so_far``: the steps the budget
        chose before this one)."""
        if event in ("begin", "end") or (event == "step" and self._due(step, budgeted_so_far)):
            self.last = step
            return self.num_maps
        return 0

    def _due(self, step: int, budgeted_so_far: int) -> bool:
        every = self.every
        if self.fixed:
            return every is not None and every > 0 and step % every == 0
        if every is None:
            return (budgeted_so_far + 1) % 4 == 0
        return every > 0 and step - self.last >= every


def agreed_across_processes(due: bool) -> bool:
    """``due`` on every process: one all-reduce (minimum) when ``torch.distributed`` runs several processes, else
    ``due`` itself. Every process must call it at the same step (they do: each asks at every step its spacing allows,
    and the spacing depends on the agreed measured steps only)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return due
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    flag = torch.tensor([1 if due else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())
