"""When a callback measures: its pinned events and, with ``every_n_steps=None``, the overhead budget.

``ProbePacing`` is the callback side of ``bertwatch.core.budget`` (the rule's home): it times bertwatch's own work
on the training thread with one clock, answers whether a step event is due, and keeps why each measured step was
measured (``ProbeReason``), written to the event file as the ``probe_steps`` series (``overhead_share`` and
``budgeted`` per measured step; their scalars appear under ``bertwatch_series/probe_steps/``).

Pinned, never skipped: step 0 (``at_start``), each evaluation (``on_evaluate``), the end (``at_end``) and, when
``every_n_steps`` is a number, every multiple of it. With ``every_n_steps=None`` (the default) the other steps are
measured as the budget allows (``OverheadMeter.due``). In a run of several processes they must agree (a sharded
model's probe pass is a collective, and every rank's grids are the same): at each step the spacing allows, one
all-reduce takes the minimum of the processes' answers (:func:`agreed_across_processes`), so all measure or none.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch

from bertwatch.callbacks.publisher import NamedValues
from bertwatch.core.budget import OverheadMeter, ProbeReason

__all__ = ["PROBE_SERIES", "ProbePacing", "ProbeReason", "agreed_across_processes"]

#: The ``named_values`` series of the measured steps.
PROBE_SERIES = "probe_steps"
_EVENT_REASONS = {"begin": "start", "evaluate": "evaluation", "end": "end"}


class ProbePacing:
    """One callback's cadence: ``every_n_steps`` (None: budgeted) and the ``OverheadMeter`` on ``clock``.

    ``log``: every measured step with its reason, in order.
    """

    def __init__(
        self,
        every_n_steps: int | None,
        budget: float,
        clock: Callable[[], float] = time.perf_counter,
        agree: Callable[[bool], bool] | None = None,
    ) -> None:
        self.every_n_steps = every_n_steps
        self.meter = OverheadMeter(budget, clock)
        self.agree = agreed_across_processes if agree is None else agree
        self.log: list[ProbeReason] = []
        self._noted: dict[int, str] = {}
        self._unwritten: set[int] = set()

    @property
    def budgeted(self) -> bool:
        return self.every_n_steps is None

    def start(self, first_step: int = 0, end_step: int | None = None) -> None:
        """Training begins at ``first_step``: the wall clock starts and the log empties. ``end_step``: the run's
        last step when the end is measured (the budget then keeps room for that probe, ``OverheadMeter.due``)."""
        self.meter.start(first_step, end_step)
        self.log, self._noted, self._unwritten = [], {}, set()

    def step_due(self, step: int) -> bool:
        """Whether the step event at ``step`` is due: a multiple of ``every_n_steps``, or the budget's answer."""
        if self.every_n_steps is None:
            return self.meter.eligible(step) and self.agree(self.meter.due(step))
        return self.every_n_steps > 0 and step % self.every_n_steps == 0

    def note(self, event: str, step: int) -> None:
        """The callback answered that it measures at ``event`` and ``step`` (a pinned reason wins over "budget")."""
        reason = _EVENT_REASONS.get(event) or ("budget" if self.budgeted else "every_n_steps")
        if self._noted.get(step) in (None, "budget"):
            self._noted[step] = reason

    def budgeted_count(self) -> int:
        """How many steps the budget chose so far."""
        return sum(r.reason == "budget" for r in self.log)

    @contextlib.contextmanager
    def own_time(self, step: int | None = None, measured: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Count the block's seconds as bertwatch's own; when ``step`` is given and ``measured()`` says the block
        measured it (for the first time), its seconds are the next probe's cost and the step goes into the log."""
        start = self.meter.clock()
        try:
            yield
        finally:
            seconds = self.meter.clock() - start
            new = step is not None and step in self._noted and measured() and all(r.step != step for r in self.log)
            self.meter.add_own(seconds, probe_step=step if new else None)
            if new:
                self.log.append(ProbeReason(step, self._noted[step], self.meter.share()))
                self._unwritten.add(step)

    def records(self, step: int) -> list[NamedValues]:
        """The measured ``step`` with its reason, as a point of the ``probe_steps`` series (once; empty when
        ``step`` was not measured or is already written), for the run's publisher."""
        if step not in self._unwritten:
            return []
        self._unwritten.discard(step)
        last = next(r for r in reversed(self.log) if r.step == step)
        values = {"overhead_share": last.share, "budgeted": float(not last.pinned)}
        return [NamedValues(PROBE_SERIES, values, f"bertwatch measured step {last.step}: {last.reason}")]


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
