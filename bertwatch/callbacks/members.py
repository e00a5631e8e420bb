"""What one callback brings to its run's passes (a ``Member``), fixed at ``on_train_begin``: the statistics it
measures once the model, the probe set and the loss have had their say (:func:`resolve`), when, and the riders on
its passes. The home of the rule "does this member measure gradients?" (:attr:`Member.gradients`: the statistics
that need a loss; :attr:`Member.gives_health`: it runs the gradient pass that gives the run-health signals), and of
what a refused loss does to a member (:meth:`Member.drop_gradients`: at setup, or where the run's start pass finds
it, before the first optimiser step; the member stays the same object).

A callback holds its place in the run as a :class:`MemberHandle` (never a position): the run's results name the
handles that were due (:class:`StepResult`), and the run delivers each result into the handle's ``history`` and
``health`` once.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bertwatch.callbacks._safe import SetupError
from bertwatch.callbacks.pacing import MapsCadence, ProbePacing
from bertwatch.callbacks.tracking import reported_trackers
from bertwatch.core.alerts import AlertSettings
from bertwatch.core.verdict import VerdictSettings
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME, check_gradients
from bertwatch.heads.task_heads import LossSetupError
from bertwatch.options.settings import ALL_STATS
from bertwatch.probe.measurements import supported_stats
from bertwatch.probe.probe_context import ProbeContext
from bertwatch.probe.records import Rider

__all__ = [
    "GRADIENT_STATS",
    "Judging",
    "Member",
    "MemberHandle",
    "StepResult",
    "loss_problem",
    "resolve",
]

#: The statistics that need a loss on the probe set (the gradient pass's and integrated gradients).
GRADIENT_STATS = frozenset(GRADIENT_NAMES) | {IG_NAME}


@dataclass(frozen=True)
class Judging:
    """What a stability alert or a failing verdict does (``on_alert``) and the thresholds (``alerts``,
    ``verdict``): the settings a member judges its run with (``Member.judging``; ``callbacks.judging``)."""

    on_alert: Any = "warn"
    alerts: AlertSettings = field(default_factory=AlertSettings)
    verdict: VerdictSettings = field(default_factory=VerdictSettings)


@dataclass
class Member:
    """One callback's part in its run's passes, fixed at setup: ``name`` (for messages), the statistics it
    measures (``stat_names``; ``required``: asked for by name, so a refused loss is an error), when (``pacing``),
    the maps it keeps (``maps``), the riders on its passes (``riders``: ``callbacks.riders``, made once, each riding
    once a step it is due at), whether its layer means go to the trackers (``log_to_trackers``). Its statistics
    change once at most: where the run's start pass finds their loss refused, before the first optimiser step, it
    gives up its gradient statistics (:meth:`drop_gradients`), the same object in its handle. ``active``: False
    once it stopped.

    Its part in the run's judging (``callbacks.judging``), as it declares it: ``judging``, the settings it judges
    with (None: it takes no part but what it measures), ``strict`` (its errors re-raise) and ``speaks`` (it prints:
    the run's alert lines are printed)."""

    name: str
    stat_names: frozenset[str]
    pacing: ProbePacing
    required: bool = False
    maps: MapsCadence | None = None
    riders: tuple[Rider, ...] = ()
    log_to_trackers: bool = True
    judging: Judging | None = None
    strict: bool = False
    speaks: bool = False
    active: bool = True

    @property
    def gradients(self) -> frozenset[str]:
        """The statistics it measures that need a loss on the probe set."""
        return self.stat_names & GRADIENT_STATS

    @property
    def gives_health(self) -> bool:
        """Whether its passes run the gradient pass, which gives the run-health signals the verdict reads."""
        return bool(self.stat_names & frozenset(GRADIENT_NAMES))

    def drop_gradients(self, problem: str) -> None:
        """Give up its gradient statistics, which cannot be measured (``problem`` says why), with one warning; a
        ``SetupError`` instead when they were asked for by name or are all it measures. A member that stopped, or
        measures none, keeps what it has."""
        gradient = self.gradients
        if not self.active or not gradient:
            return
        if self.required or not self.stat_names - gradient:
            raise SetupError(f"{self.name}: {sorted(gradient)} cannot be measured: {problem}")
        who = "bertwatch" if self.name == "bertwatch" else f"bertwatch: {self.name}"
        message = f"{who} skips the gradient statistics ({', '.join(sorted(gradient))}): {problem}"
        warnings.warn(message, BertWatchWarning, stacklevel=4)
        self.stat_names = self.stat_names - gradient


class MemberHandle:
    """One callback's place in its run (``WatchedRun.add`` makes it): its ``member``, and what the run delivered to
    it: ``history`` ``(step, {stat: [layers, heads]})`` of every step it measured, ``health`` ``(step, {signal:
    value})`` of the steps it had the run-health signals. Compared by identity: two callbacks with equal members are
    two members."""

    def __init__(self, member: Member) -> None:
        self.member = member
        self.history: list[tuple[int, dict[str, np.ndarray]]] = []
        self.health: list[tuple[int, dict[str, float]]] = []

    @property
    def active(self) -> bool:
        return self.member.active

    def keep(self, results: Sequence[StepResult]) -> list[int]:
        """Keep this member's part of ``results``: its grids in ``history`` (one entry a step, merged), the
        run-health signals in ``health`` (once a step); returns the steps it was due at."""
        steps = []
        for result in results:
            grids = result.of(self)
            if grids is None:
                continue
            steps.append(result.step)
            if self.history and self.history[-1][0] == result.step:
                self.history[-1][1].update(grids)
            else:
                self.history.append((result.step, dict(grids)))
            signals = result.health_of(self)
            if signals and not (self.health and self.health[-1][0] == result.step):
                self.health.append((result.step, dict(signals)))
        return steps


@dataclass(frozen=True)
class StepResult:
    """What one event's pass gave: ``step``, ``event``, the ``due`` members' handles, ``grids``, every statistic
    measured at this step so far ``{name: [layers, heads]}``, and ``health``, the run-health signals measured at this
    step (``core.health_names``; empty when no gradient pass ran)."""

    step: int
    event: str
    due: frozenset[MemberHandle]
    grids: Mapping[str, np.ndarray]
    health: Mapping[str, float] = field(default_factory=dict)

    def of(self, handle: MemberHandle) -> dict[str, np.ndarray] | None:
        """The grids of ``handle``'s member, or None when it was not due at this event."""
        if handle not in self.due:
            return None
        names = handle.member.stat_names
        return {n: self.grids[n] for n in ALL_STATS if n in names and n in self.grids}

    def health_of(self, handle: MemberHandle) -> dict[str, float] | None:
        """The run-health signals for ``handle``'s member (one that measures the gradient statistics, due at this
        event), or None."""
        if handle not in self.due or not self.health or not handle.member.gives_health:
            return None
        return dict(self.health)

    def due_members(self) -> list[Member]:
        """The members due at this event."""
        return [h.member for h in self.due]


def loss_problem(context: ProbeContext) -> str | None:
    """Why the gradient statistics cannot take the run's loss on its probe set
    (``heads.gradients.importance.check_gradients``: one forward of each probe batch as the gradient pass runs it), or
    None."""
    try:
        check_gradients(context.encoder, context.probe.batches, **context.loss.arguments())
    except LossSetupError as err:
        return refusal(context, err)
    return None


def refusal(context: ProbeContext, err: LossSetupError) -> str:
    """What a refusal of the run's loss says, naming the Trainer's loss when the statistics take that."""
    example_loss = context.loss.example_loss
    if example_loss is not None:
        return f"{err} (the Trainer's loss: {example_loss.reason}); pass loss_fn= to use another loss"
    return str(err)


def resolve(member: Member, context: ProbeContext, check_loss_now: bool) -> Member:
    """``member`` with the statistics it can measure in this run: those the model gives (``supported_stats``),
    without the gradient statistics where the probe set or the loss cannot give them (:meth:`Member.drop_gradients`).
    The loss on the probe batches themselves is checked by the run's start pass before the first optimiser step,
    or now (``check_loss_now``) where the run has none (resumed)."""
    names = supported_stats(member.stat_names, member.required, context.encoder, member.name)
    member = replace(member, stat_names=names)
    if not member.gradients:
        return member
    loss = context.loss
    problem = loss.problem
    if problem is None and loss.loss_fn is None and not context.probe.has_labels:
        problem = (
            "the probe examples have no labels (gradient statistics need labels or loss_fn=): probe with "
            "labelled examples (the eval set, probe_dataset=, or probe_texts= as dicts with a 'label'), or pass "
            "loss_fn=(outputs, batch) -> per-example loss"
        )
    if problem is None and check_loss_now:
        problem = loss_problem(context)
    if problem is None:
        loss.announce()
    else:
        member.drop_gradients(problem)
    return member


def setup_warnings(member: Member, args: Any, bound: bool) -> None:
    """The warnings of a member's setup: layer means that cannot reach the ``report_to`` trackers (the callback
    not ``bound`` to its Trainer), gradient statistics under fp16 autocast."""
    if member.log_to_trackers and not bound and reported_trackers(args):
        warnings.warn(
            f"bertwatch: the layer means reach {', '.join(reported_trackers(args))} only when bertwatch is "
            "attached with bertwatch.watch(trainer) (or bertwatch run); from callbacks=[...] they go to "
            "TensorBoard only",
            BertWatchWarning,
            stacklevel=5,
        )
    if args.fp16 and member.gives_health:
        warnings.warn(
            "bertwatch: with fp16 the gradient statistics are measured under float16 autocast without the "
            "Trainer's loss scaling: gradients far below their usual size underflow (a loss 1e-5 times smaller "
            "gives layer gradient norms of 0 on MiniLM), so the verdict can read an underflow as a vanished "
            "gradient (docs/statistics.md, run health); bf16 has no such floor",
            BertWatchWarning,
            stacklevel=5,
        )
