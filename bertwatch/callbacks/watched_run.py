"""The probe pass of one training run: one pass over the probe set per due event, whatever callbacks asked for it.

Every bertwatch callback of a run joins its run's ``WatchedRun`` at ``on_train_begin`` (:func:`join`): callbacks with
equal probe settings (``options.settings.ProbeSettings``, compared by value) on the same run share one, so they
share one probe set, one reference, one pass per event and one event file. Each brings a ``Member``: what it
measures and when, and its part in the judging, fixed at setup; it gets back a ``MemberHandle``, which it holds.
The run also holds the Trainer's side (``probe_setup.TrainerSide``: arguments, state, writer, trackers), which the
probe pass never sees. Data flows one way, down:

- at each event the first callback to arrive calls :meth:`WatchedRun.handle`; it asks each member's pacing
  whether it is due (``callbacks.pacing``), plans the pass (``probe_pass.plan_pass``), runs it
  (``probe_pass.execute``), writes it (``callbacks.publisher``), judges it once (the alerts and the verdict,
  ``callbacks.judging``) and keeps the ``StepResult``; every callback's call then has the run deliver that
  callback's part into its handle (``MemberHandle.keep``), charge its pacing and write the ``probe_steps`` points
  that gives (``ProbePacing.delivered``);
- the run calls each of these parts in turn, and none of them calls back into the run (nor does anything here call
  a callback): ``tests/callbacks/test_flow.py`` records a probe step and checks it.

The run's first pass, at the first step's begin, also checks the gradient statistics' loss on the probe batches
(its own gradient pass where it can be that check), before the first optimiser step; on a refusal each member gives
up its gradient statistics (``Member.drop_gradients``: the members stay the objects their handles hold) and the
pass, planned once, runs without them (``ProbePlan.without``). The pass never
changes the user's training: eval mode, restored RNG and attention implementation (``bertwatch.heads.capture``),
``torch.no_grad`` for maps, ``torch.autograd.grad`` on gates for gradients, and its own copy of the probe batches.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from bertwatch.callbacks._context import TrainerContext
from bertwatch.callbacks.judging import RunJudge
from bertwatch.callbacks.members import GRADIENT_STATS, Member, MemberHandle, StepResult, loss_problem, refusal
from bertwatch.callbacks.probe_setup import TrainerSide, build_probe_context, open_trainer_side
from bertwatch.callbacks.publisher import Publisher
from bertwatch.core.health_names import HEALTH_SERIES
from bertwatch.heads.gradients.importance import GRADIENT_NAMES
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.probe_context import ProbeContext
from bertwatch.probe.probe_pass import LossRefused, PassResult, ProbePlan, execute, plan_pass
from bertwatch.probe.records import NamedValues, Rider
from bertwatch.tb.writer.metadata import PROBE_MODEL_KEY

__all__ = ["MAPS_BYTES", "StepResult", "WatchedRun", "join"]

#: The most attention-map bytes a step writes (float16, the kept examples' weights): the maps of 4 probe examples
#: of 128 tokens at bert-base's 144 heads take 19 MB; of one 512-token example 75 MB, whose writing took seconds
#: on the GPU benchmark. Only the first examples whose maps fit together are kept.
MAPS_BYTES = 32 * 2**20

#: What the ``run_health`` series says of itself (``core.health_names`` defines each value).
HEALTH_DESCRIPTION = (
    "Run health on the probe set: each encoder layer's gradient norm of the probe loss, the share of probe "
    "examples predicted as the most frequent class (or the predictions' std for regression), the probe loss's "
    "mean and std"
)


@dataclass
class _StepRecord:
    """What the run has done at one step, replaced (not emptied) when a new step begins: the ``results`` of its
    events, every grid measured at it (``grids``), its run-health signals (``health``), the handles whose riders rode
    one of its passes (``rode``) and the results each handle has had (``delivered``)."""

    step: int = -1
    results: dict[tuple[str, int], StepResult] = field(default_factory=dict)
    grids: dict[str, np.ndarray] = field(default_factory=dict)
    health: dict[str, float] = field(default_factory=dict)
    rode: set[MemberHandle] = field(default_factory=set)
    delivered: set[tuple[MemberHandle, tuple[str, int]]] = field(default_factory=set)


#: The watched runs, held as long as a callback holds its own (a run that never ended goes with its callbacks).
_RUNS: weakref.WeakValueDictionary[tuple[int, ProbeSettings], WatchedRun] = weakref.WeakValueDictionary()
#: The runs whose build failed, held (they hold no model) so that the run's other callbacks find them failed, until
#: the Trainer's state that keys them goes.
_FAILED: dict[tuple[int, ProbeSettings], WatchedRun] = {}


def join(
    model: torch.nn.Module, settings: ProbeSettings, args: Any, state: Any, event: Mapping[str, Any], trainer: Any
) -> WatchedRun:
    """The watched run that ``state`` belongs to with these probe ``settings``, built by the first callback that
    asks (the others of the run get the same one; ``trainer`` is the ``TrainerContext``, ``event`` the
    ``on_train_begin`` keyword arguments). Raises the first callback's ``SetupError`` of a failed build; the others
    find the watched run ``failed``."""
    key = (id(state), settings)
    watched = _RUNS.get(key) or _FAILED.get(key)
    if watched is None or watched.state is not state:
        watched = WatchedRun(state, settings)
        _RUNS[key] = watched
        try:
            watched.open(model, args, event, trainer)
        except BaseException:
            _FAILED[key] = watched
            weakref.finalize(state, _FAILED.pop, key, None)
            raise
    return watched


class WatchedRun:
    """One run's probe set, reference, passes and event writer (world process zero only), shared by its members
    (``handles``, in the order they joined). Built by :func:`join`; :meth:`add` takes a member and hands back its
    ``MemberHandle``, :meth:`handle` handles an event, :meth:`leave` lets a member go (the last one closes the
    writer)."""

    def __init__(self, state: Any, settings: ProbeSettings) -> None:
        self._state = weakref.ref(state)
        self.settings = settings
        self.handles: list[MemberHandle] = []
        self.failed = False
        self.context: ProbeContext | None = None  # what the passes read; replaced (never changed) for new references
        self.trainer_side: TrainerSide | None = None  # the Trainer's arguments and state, the writer, the trackers
        self.publisher: Publisher | None = None
        self.begin_pending = False
        self.maps_fit, self.maps_budget = 0, MAPS_BYTES
        self._now = _StepRecord()
        self._maps_written: set[int] = set()
        self.judge = RunJudge()
        self._announced = False

    @property
    def state(self) -> Any:
        return self._state()

    @property
    def members(self) -> list[Member]:
        """Every member's part, in the order they joined."""
        return [h.member for h in self.handles]

    def open(self, model: torch.nn.Module, args: Any, event: Mapping[str, Any], trainer: TrainerContext) -> None:
        try:
            run = build_probe_context(model, self.settings, args, self.state, event, trainer)
            side = open_trainer_side(self.settings, args, self.state, event, trainer)
        except BaseException:
            self.failed = True
            raise
        self.context, self.trainer_side = run, side
        probe = {**run.probe.length_info(), PROBE_MODEL_KEY: run.model_name}  # recorded with the run's grids
        self.publisher = Publisher(side.writer, side.trackers, args, self.state, side.event, run.probe.roles, probe)
        self.judge.open(self.publisher, side, (run.layers, run.heads), trainer, model)
        self.begin_pending = not side.resumed
        self.maps_budget = MAPS_BYTES
        self.maps_fit = run.probe.maps_that_fit(run.layers, run.heads, self.maps_budget)

    def add(self, member: Member) -> MemberHandle:
        """Take ``member`` into the run's passes, and into the judging as it declares (``RunJudge.take``); returns
        its handle, which the run delivers its results to (:meth:`handle`)."""
        self.judge.take(member)
        handle = MemberHandle(member)
        self.handles.append(handle)
        return handle

    @property
    def active(self) -> list[Member]:
        """The members that have not stopped."""
        return [m for m in self.members if m.active]

    def announce_once(self) -> bool:
        """True the first time it is asked (where the events go is said once a run)."""
        first, self._announced = not self._announced, True
        return first

    # ---------------------------------------------------------------------------------------------- events

    def handle(
        self,
        event: str,
        step: int,
        member: MemberHandle,
        control: Any = None,
        evaluation: tuple[Any, Any] | None = None,
    ) -> list[StepResult]:
        """Handle ``event`` at ``step`` once for all members (the run's start pass first where it is still
        pending; a "begin" that is not pending does nothing), each new result judged (``callbacks.judging``;
        ``control`` the Trainer's, for a stop), then deliver to ``member`` the results it has not had yet, oldest
        first (``MemberHandle.keep``; they are returned too), and write the ``probe_steps`` points its pacing
        gives for them once charged with the time this took (``ProbePacing.delivered``). A step's begin writes the
        verdict of the steps before; the end writes the last. ``evaluation``: ``on_evaluate``'s metrics and
        ``TrainerContext``, noted as evidence before the pass, the verdict judged again after it on new metrics.

        One flat sequence, each part called from here and none calling back: the judge, the passes
        (:meth:`_result_of`), the judge, the member's handle, its pacing, the publisher."""
        if self.failed or self.context is None:
            raise RuntimeError("bertwatch already failed in this run")
        pacing = member.member.pacing
        start = pacing.clock()
        if event == "begin":
            self.judge.write(before=step)
        if event == "step":
            self.judge.note_step(self.members, step, control)
        new = evaluation is not None and self.judge.note_evaluation(step, *evaluation)
        if self.begin_pending:  # the start pass, before any other (its event may not have reached the callbacks)
            self.begin_pending = False
            self._result_of("begin", step, control)
        if event != "begin":
            self._result_of(event, step, control)
        if event == "end":
            self.judge.write()
        if new:
            self.judge.judge_metrics(self.members, step, control)
        now = self._now
        out = [r for key, r in now.results.items() if (member, key) not in now.delivered]
        now.delivered.update((member, (r.event, r.step)) for r in out)
        steps = member.keep(out)
        for measured, records in pacing.delivered(pacing.clock() - start, steps):
            self.publisher.publish_records(records, measured)
        return out

    def _result_of(self, event: str, step: int, control: Any) -> None:
        """The pass of ``event`` at ``step``, run and judged once (a new step starts a new record)."""
        if step != self._now.step:
            self._now = _StepRecord(step)
        if (event, step) in self._now.results:
            return
        try:
            result = self._handle(event, step)
        except BaseException:
            self.failed = True
            raise
        self._now.results[(event, step)] = result
        self.judge.after_pass(self.members, result, control)

    def _handle(self, event: str, step: int) -> StepResult:
        """The pass of ``event`` at ``step`` for the members due (:meth:`_pass`), what it took kept for the later
        passes to compare with (the drift reference, cached on disk by ``DriftReference.keep``; the outlier
        statistics' first top dimensions, held by the context the later passes get) and its results written."""
        now = self._now
        due = frozenset(h for h in self.handles if h.active and h.member.pacing.due(event, step))
        check = self._checks_loss(event, step)
        result = self._pass(event, step, due, check)
        if result is not None:
            context = self.context
            if result.references.get("drift") is not None:
                context.reference.keep(result.references["drift"])
            dims = result.references.get("outlier_dims")
            if dims is not None and context.outlier_dims is None:
                self.context = replace(context, outlier_dims=dims)
            now.grids.update(result.all_grids())
            self.publisher.publish(
                step, result.grids, now.grids, result.summaries, result.examples, result.measure_examples
            )
            if result.examples:
                self._maps_written.add(step)
            if result.health:
                now.health = dict(result.health)
                self.publisher.publish_records([NamedValues(HEALTH_SERIES, now.health, HEALTH_DESCRIPTION)], step)
        senders = [h.member for h in self.handles if h in due and h.member.log_to_trackers]
        if senders and event != "end":  # by on_train_end the trackers have closed their runs
            self.publisher.send_layer_means(step, now.grids, set().union(*(m.stat_names for m in senders)))
        return StepResult(step, event, due, dict(now.grids), dict(now.health))

    def _checks_loss(self, event: str, step: int) -> bool:
        """Whether the pass of ``event`` at ``step`` is the run's start pass that checks the gradient statistics'
        loss (step 0's begin, where a member measures them), before the first optimiser step."""
        return event == "begin" and step == 0 and any(m.gradients for m in self.active)

    def _plan(self, event: str, step: int, due: frozenset[MemberHandle]) -> ProbePlan:
        """The pass ``event`` at ``step`` calls for (``probe_pass.plan_pass``): the ``due`` members' statistics,
        maps and riders (each member's riders once a step)."""
        context, now = self.context, self._now
        members = [h.member for h in self.handles if h in due]  # in the order they joined
        riders: list[Rider] = []
        for handle in (h for h in self.handles if h in due and h not in now.rode):
            now.rode.add(handle)
            riders.extend(handle.member.riders)
        maps = [] if step in self._maps_written else [
            m.maps.count(event, step, m.pacing.budgeted_count()) for m in members if m.maps
        ]  # fmt: skip
        return plan_pass(
            event,
            step,
            set().union(*(m.stat_names for m in members)),
            set().union(*(m.stat_names for m in self.active)),
            num_maps=min(max(maps, default=0), self.maps_fit),
            measured=now.grids.keys(),
            maps_done=step in self._maps_written,
            reference_ready=context.reference.ready,
            reference_model=self.settings.reference_model is not None,
            riders=riders,
        )

    def _pass(self, event: str, step: int, due: frozenset[MemberHandle], check: bool) -> PassResult | None:
        """The pass of ``event`` at ``step`` for the ``due`` members, planned (:meth:`_plan`) and run (None: nothing
        to do); a resumed run that builds its drift reference says so.

        With ``check`` (:meth:`_checks_loss`) it is the start pass, after the gradient statistics' loss check or as
        it: where the pass takes them with the model's own or the Trainer's loss, its gradient pass is the check
        (the same forwards of the same length groups or examples alone, ``ProbePlan.check_loss``); a ``loss_fn``
        (whose check also compares each example's loss across batches) or a pass without them gets
        :func:`loss_problem`'s forward first, and so does a pass with riders over several batches (a refusal after
        its first batch would find them fed). On a refusal each member gives up its gradient statistics
        (``Member.drop_gradients``) and the plan runs without them (``ProbePlan.without``), not planned again."""
        context = self.context
        plan = self._plan(event, step, due)
        if plan.build_reference and self.trainer_side.resumed:
            context.reference.warn_resumed(int(self.trainer_side.state.global_step))
        problem: str | None = None
        if check:
            gradients = bool(set(plan.names) & set(GRADIENT_NAMES))
            single = not plan.riders or len(context.probe.batches) == 1
            if gradients and single and context.loss.loss_fn is None:
                try:
                    return execute(replace(plan, check_loss=True), context)
                except LossRefused as refused:
                    problem = refusal(context, refused.error)
            else:
                problem = loss_problem(context)
        if problem is not None:
            for member in self.members:
                member.drop_gradients(problem)
            plan = plan.without(GRADIENT_STATS)
        return None if plan.empty else execute(plan, context)

    # ---------------------------------------------------------------------------------------------- writing

    def on_log(self, step: int, logs: Mapping[str, Any] | None, control: Any) -> None:
        """An ``on_log``: the event file flushed, the logged values noted as evidence (once, whichever callback of
        the run hands them on)."""
        if self.publisher is not None:
            self.publisher.flush()
        if self.context is not None:
            self.judge.note_log(self.members, step, logs, control)

    def leave(self, member: MemberHandle | None) -> None:
        """``member`` is done with this run (None: a callback that failed before it joined); the last one closes the
        writer and frees the reference maps."""
        if member is not None:
            member.member.active = False
        if any(h.active for h in self.handles):
            return
        self.judge.close()
        if self.publisher is not None:
            self.publisher.close()
        if self.context is not None:
            self.context.reference.forget()
        if not self.failed:  # a failed watched run stays while held, so callbacks still to join see it failed
            for key in [k for k, s in _RUNS.items() if s is self]:
                del _RUNS[key]
