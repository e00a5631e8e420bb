"""The probe pass of one training run: one pass over the probe set per due event, whatever callbacks asked for it.

Every bertwatch callback of a run joins its run's ``WatchedRun`` at ``on_train_begin`` (:func:`join`): callbacks with
equal probe settings (``options.settings.ProbeSettings``, compared by value) on the same run share one, so they
share one probe set, one reference, one pass per event and one event file. Each brings a ``Member``: what it
measures and when, fixed at setup. Data flows one way, down:

- at each event the first callback to arrive calls :meth:`WatchedRun.handle`; it asks each member's pacing
  whether it is due (``callbacks.pacing``), plans the pass (``probe_pass.plan_pass``), runs it
  (``probe_pass.execute``), writes it (``callbacks.publisher``) and keeps the ``StepResult``, which every callback
  of that event reads;
- nothing here calls a callback: what a callback does with a result (its history, its alerts) it does itself.

The run's first pass, at the first step's begin, also checks the gradient statistics' loss on the probe batches
(its own gradient pass where it can be that check), before the first optimiser step; a refusal takes the gradient
statistics out of the members (:func:`without_gradients`) and the pass runs again without them. The pass never
changes the user's training: eval mode, restored RNG and attention implementation (``bertwatch.heads.capture``),
``torch.no_grad`` for maps, ``torch.autograd.grad`` on gates for gradients, and its own copy of the probe batches.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from bertwatch.callbacks._context import TrainerContext
from bertwatch.callbacks._safe import SetupError
from bertwatch.callbacks.pacing import MapsCadence, ProbePacing
from bertwatch.callbacks.probe_context import ProbeContext, build_probe_context
from bertwatch.callbacks.probe_pass import LossRefused, PassResult, ProbePlan, execute, plan_pass
from bertwatch.callbacks.publisher import HeadEmbedding, NamedValues, Publisher, StepText
from bertwatch.callbacks.riders import ClusterTrack, Rider, riders_for
from bertwatch.core.alerts import ALERT_STATS, Alert
from bertwatch.core.health_names import HEALTH_SERIES
from bertwatch.core.verdict import LEVELS, VERDICT_SERIES, Verdict, VerdictSettings
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.heads.importance import GRADIENT_NAMES, IG_NAME, check_gradients
from bertwatch.heads.task_heads import LossSetupError
from bertwatch.options.settings import ALL_STATS, ProbeSettings
from bertwatch.tb.metadata import PROBE_MODEL_KEY

__all__ = ["MAPS_BYTES", "Member", "WatchedRun", "StepResult", "join", "loss_problem", "without_gradients"]

#: The most attention-map bytes a step writes (float16, the kept examples' weights): the maps of 4 probe examples
#: of 128 tokens at bert-base's 144 heads take 19 MB; of one 512-token example 75 MB, whose writing took seconds
#: on the GPU benchmark. Only the first examples whose maps fit together are kept.
MAPS_BYTES = 32 * 2**20

_GRADIENT_STATS = frozenset(GRADIENT_NAMES) | {IG_NAME}


@dataclass(frozen=True)
class Riding:
    """What rides on a member's passes (``callbacks.riders``): word classes by token rules, head clusters
    (``track``, from the first ``cluster_examples`` examples), word classes on UD sentences (``annotated``)."""

    word_classes: bool = False
    track: ClusterTrack | None = None
    cluster_examples: int = 8
    annotated: Any = None

    def riders(self, context: ProbeContext) -> list[Rider]:
        return riders_for(context, self.word_classes, self.track, self.cluster_examples, self.annotated)


@dataclass
class Member:
    """One callback's part in its run's passes, fixed at setup: ``name`` (for messages), the statistics it
    measures (``stat_names``; ``required``: asked for by name, so a refused loss is an error), when (``pacing``),
    the maps it keeps (``maps``), what rides on its passes (``riding``), whether its layer means go to the
    trackers (``log_to_trackers``). ``active``: False once it stopped."""

    name: str
    stat_names: frozenset[str]
    pacing: ProbePacing
    required: bool = False
    maps: MapsCadence | None = None
    riding: Riding = field(default_factory=Riding)
    log_to_trackers: bool = True
    active: bool = True


#: What the ``run_health`` series says of itself (``core.health_names`` defines each value).
HEALTH_DESCRIPTION = (
    "Run health on the probe set: each encoder layer's gradient norm of the probe loss, the share of probe "
    "examples predicted as the most frequent class (or the predictions' std for regression), the probe loss's "
    "mean and std"
)
#: What the ``verdict`` series and text say of themselves.
VERDICT_DESCRIPTION = "The run's verdict: level 0 healthy, 1 at risk, 2 failing (bertwatch.core.verdict)"
VERDICT_TEXT = "The verdict's reasons at each judged step, one a line (none: healthy); thresholds in the metadata"


@dataclass(frozen=True)
class StepResult:
    """What one event's pass gave: ``step``, ``event``, the ``due`` members (by position in the watched run),
    ``grids``, every statistic measured at this step so far ``{name: [layers, heads]}``, and ``health``, the
    run-health signals measured at this step (``core.health_names``; empty when no gradient pass ran)."""

    step: int
    event: str
    due: frozenset[int]
    grids: Mapping[str, np.ndarray]
    health: Mapping[str, float] = field(default_factory=dict)

    def of(self, member: Member, index: int) -> dict[str, np.ndarray] | None:
        """``member``'s grids, or None when it was not due at this event."""
        if index not in self.due:
            return None
        return {n: self.grids[n] for n in ALL_STATS if n in member.stat_names and n in self.grids}

    def health_of(self, member: Member, index: int) -> dict[str, float] | None:
        """The run-health signals for ``member`` (one that measures the gradient statistics, due at this event), or
        None."""
        if index not in self.due or not self.health or not member.stat_names & set(GRADIENT_NAMES):
            return None
        return dict(self.health)


def loss_problem(context: ProbeContext) -> str | None:
    """Why the gradient statistics cannot take the run's loss on its probe set (``heads.importance.check_gradients``:
    one forward of each probe batch as the gradient pass runs it), or None."""
    try:
        check_gradients(context.encoder, context.probe.batches, **context.loss.arguments())
    except LossSetupError as err:
        return _refusal(context, err)
    return None


def _refusal(context: ProbeContext, err: LossSetupError) -> str:
    """What a refusal of the run's loss says, naming the Trainer's loss when the statistics take that."""
    example_loss = context.loss.example_loss
    if example_loss is not None:
        return f"{err} (the Trainer's loss: {example_loss.reason}); pass loss_fn= to use another loss"
    return str(err)


def without_gradients(member: Member, problem: str) -> Member:
    """``member`` without its gradient statistics, which cannot be measured (``problem`` says why): a
    ``SetupError`` when they were asked for by name or are all it measures, else one warning."""
    gradient = member.stat_names & _GRADIENT_STATS
    if not member.active or not gradient:
        return member
    if member.required or not member.stat_names - gradient:
        raise SetupError(f"{member.name}: {sorted(gradient)} cannot be measured: {problem}")
    who = "bertwatch" if member.name == "bertwatch" else f"bertwatch: {member.name}"
    message = f"{who} skips the gradient statistics ({', '.join(sorted(gradient))}): {problem}"
    warnings.warn(message, BertWatchWarning, stacklevel=4)
    return replace(member, stat_names=member.stat_names - gradient)


#: The watched runs, held as long as a callback holds its own (a run that never ended goes with its callbacks).
_RUNS: weakref.WeakValueDictionary[tuple[int, ProbeSettings], WatchedRun] = weakref.WeakValueDictionary()
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
            _FAILED[key] = watched  # held (it holds no model), so the run's other callbacks find it failed
            raise
    return watched


class WatchedRun:
    """One run's probe set, reference, passes and event writer (world process zero only), shared by its
    ``members``. Built by :func:`join`; :meth:`add` takes a member, :meth:`run` handles an event, :meth:`leave`
    lets a member go (the last one closes the writer)."""

    def __init__(self, state: Any, settings: ProbeSettings) -> None:
        self._state = weakref.ref(state)
        self.settings = settings
        self.members: list[Member] = []
        self.failed = False
        self.context: ProbeContext | None = None
        self.publisher: Publisher | None = None
        self.begin_pending = False
        self.maps_fit, self.maps_budget = 0, MAPS_BYTES
        self._results: dict[tuple[str, int], StepResult] = {}
        self._step, self._grids, self._maps_written = -1, {}, set()
        self._health: dict[str, float] = {}
        self._riders_taken: set[int] = set()  # the members whose riders rode this step's pass
        self._delivered: set[tuple[int, tuple[str, int]]] = set()

    @property
    def state(self) -> Any:
        return self._state()

    def open(self, model: torch.nn.Module, args: Any, event: Mapping[str, Any], trainer: TrainerContext) -> None:
        try:
            run = build_probe_context(model, self.settings, args, self.state, event, trainer)
        except BaseException:
            self.failed = True
            raise
        self.context = run
        probe = {**run.probe.length_info(), PROBE_MODEL_KEY: run.model_name}  # recorded with the run's grids
        self.publisher = Publisher(run.writer, run.trackers, args, self.state, run.event, run.probe.roles, probe)
        self.begin_pending = not run.resumed
        self.maps_budget = MAPS_BYTES
        self.maps_fit = run.probe.maps_that_fit(run.layers, run.heads, self.maps_budget)

    def add(self, member: Member) -> int:
        """Take ``member`` into the run's passes; returns its index (``StepResult.of``)."""
        self.members.append(member)
        return len(self.members) - 1

    def verdict_writer(self) -> int | None:
        """The index of the member that writes the run's verdict: the first active one with a gradient statistic
        (the run-health signals come from the gradient pass)."""
        return next((i for i, m in enumerate(self.members) if m.active and set(GRADIENT_NAMES) & m.stat_names), None)

    def alert_writer(self) -> int | None:
        """The index of the member that writes the run's alert table: the first active one with an alert
        statistic."""
        return next((i for i, m in enumerate(self.members) if m.active and ALERT_STATS & m.stat_names), None)

    # ---------------------------------------------------------------------------------------------- events

    def handle(self, event: str, step: int, index: int) -> list[StepResult]:
        """Handle ``event`` at ``step`` once for all members (a pending begin pass first; a "begin" that is not
        pending does nothing); returns the results member ``index`` has not had yet, oldest first."""
        if self.failed or self.context is None:
            raise RuntimeError("bertwatch already failed in this run")
        events = ["begin", event] if self.begin_pending and event != "begin" else [event]
        for ev in events:
            key = (ev, step)
            if key in self._results:
                continue
            if ev == "begin":
                if not self.begin_pending:
                    continue
                self.begin_pending = False
            try:
                self._results[key] = self._handle(ev, step)
            except BaseException:
                self.failed = True
                raise
        out = [r for key, r in self._results.items() if (index, key) not in self._delivered]
        self._delivered.update((index, (r.event, r.step)) for r in out)
        return out

    def _handle(self, event: str, step: int) -> StepResult:
        context = self.context
        due = frozenset(i for i, m in enumerate(self.members) if m.active and m.pacing.due(event, step))
        if step != self._step:
            self._step, self._grids, self._results, self._delivered = step, {}, {}, set()
            self._riders_taken = set()
            self._health = {}
        plan = self._plan(event, step, due)
        if plan.build_reference and context.resumed:
            context.reference.warn_resumed(int(context.state.global_step))
        result = self._checked(plan, event, step, due) if event == "begin" and step == 0 else self._execute(plan)
        if result is not None:
            self._keep_references(result)
            self._grids.update(result.all_grids())
            self.publisher.publish(
                step, result.grids, self._grids, result.summaries, result.examples, result.measure_examples
            )
            if result.examples:
                self._maps_written.add(step)
            if result.health:
                self._health = dict(result.health)
                self.publisher.publish_records([NamedValues(HEALTH_SERIES, self._health, HEALTH_DESCRIPTION)], step)
        senders = [self.members[i] for i in due if self.members[i].log_to_trackers]
        if senders and event != "end":  # by on_train_end the trackers have closed their runs
            self.publisher.send_layer_means(step, self._grids, set().union(*(m.stat_names for m in senders)))
        return StepResult(step, event, due, dict(self._grids), dict(self._health))

    def _keep_references(self, result: PassResult) -> None:
        """Keep what the pass took for the later passes to compare with: the drift reference (cached on disk by
        ``DriftReference.keep``) and the outlier statistics' top dimensions."""
        context = self.context
        if result.references.get("drift") is not None:
            context.reference.keep(result.references["drift"])
        if result.references.get("outlier_dims") is not None:
            context.outlier_reference.setdefault("top_dims", result.references["outlier_dims"])

    def _plan(self, event: str, step: int, due: frozenset[int], riders: Sequence[Rider] | None = None) -> ProbePlan:
        members, context = self.members, self.context
        if riders is None:
            riders = []
            for i in sorted(due):
                if i not in self._riders_taken:
                    self._riders_taken.add(i)
                    riders.extend(members[i].riding.riders(context))
        maps = (
            []
            if step in self._maps_written
            else [
                m.maps.count(event, step, m.pacing.budgeted_count())
                for i, m in enumerate(members)
                if i in due and m.maps
            ]
        )
        return plan_pass(
            event,
            step,
            set().union(*(members[i].stat_names for i in due)),
            set().union(*(m.stat_names for m in members if m.active)),
            num_maps=min(max(maps, default=0), self.maps_fit),
            measured=self._grids.keys(),
            maps_done=step in self._maps_written,
            reference_ready=context.reference.ready,
            reference_model=self.settings.reference_model is not None,
            riders=riders,
        )

    def _execute(self, plan: ProbePlan) -> PassResult | None:
        return None if plan.empty else execute(plan, self.context)

    def _checked(self, plan: ProbePlan, event: str, step: int, due: frozenset[int]) -> PassResult | None:
        """The start pass after the loss check, or as it: where the pass takes the gradient statistics with the
        model's own or the Trainer's loss, its gradient pass is the check (the same forwards of the same length
        groups or examples alone, ``ProbePlan.check_loss``); a ``loss_fn`` (whose check also compares each
        example's loss across batches) or a pass without them gets :func:`loss_problem`'s forward first, and so
        does a pass with riders over several batches (a refusal after its first batch would find them fed). On a
        refusal the members lose their gradient statistics (:func:`without_gradients`) and the pass is planned
        anew."""
        context = self.context
        if not any(_GRADIENT_STATS & m.stat_names for m in self.members if m.active):
            return self._execute(plan)
        gradients = bool(set(plan.names) & set(GRADIENT_NAMES))
        single = not plan.riders or len(context.probe.batches) == 1
        if gradients and single and context.loss.loss_fn is None:
            try:
                return execute(replace(plan, check_loss=True), context)
            except LossRefused as refused:
                problem: str | None = _refusal(context, refused.error)
        else:
            problem = loss_problem(context)
        if problem is None:
            return self._execute(plan)
        self.members = [without_gradients(m, problem) for m in self.members]
        return self._execute(self._plan(event, step, due, riders=plan.riders))

    # ---------------------------------------------------------------------------------------------- writing

    def publish_alerts(self, alerts: Sequence[Alert], step: int, reference_step: int, to_trackers: bool) -> None:
        """Write the stability alerts in force at ``step`` (``Publisher.publish_alerts``)."""
        context = self.context
        self.publisher.publish_alerts(alerts, context.layers, context.heads, step, reference_step, to_trackers)

    def publish_verdict(self, verdict: Verdict, settings: VerdictSettings) -> None:
        """Write the verdict at its step: the ``verdict`` series (its level: 0 healthy, 1 at risk, 2 failing) and
        its reasons as the ``verdict`` text (one a line, kept at every step; the levels' names and ``settings``,
        the thresholds, in its metadata)."""
        text = StepText(
            VERDICT_SERIES, verdict.reasons, VERDICT_TEXT, {"levels": list(LEVELS), "settings": asdict(settings)}
        )
        level = NamedValues(VERDICT_SERIES, {"level": float(verdict.level)}, VERDICT_DESCRIPTION)
        self.publish_records([level, text], verdict.step)

    def send_verdict(self, verdict: Verdict, health: Mapping[str, float]) -> None:
        """The verdict's level and ``health``, its step's run-health signals, to the trackers
        (``Publisher.send_verdict``)."""
        if self.publisher is not None:
            self.publisher.send_verdict(verdict.level, health)

    def publish_records(self, records: Sequence[NamedValues | StepText | HeadEmbedding], step: int) -> None:
        """Write records made outside a probe pass (the ``probe_steps`` points)."""
        if records and self.publisher is not None:
            self.publisher.publish_records(records, step)

    def flush(self) -> None:
        if self.publisher is not None:
            self.publisher.flush()

    def leave(self, index: int) -> None:
        """Member ``index`` is done with this run; the last one closes the writer and frees the reference maps."""
        if 0 <= index < len(self.members):
            self.members[index].active = False
        if any(m.active for m in self.members):
            return
        if self.publisher is not None:
            self.publisher.close()
        if self.context is not None:
            self.context.reference.forget()
        if not self.failed:  # a failed watched run stays while held, so callbacks still to join see it failed
            for key in [k for k, s in _RUNS.items() if s is self]:
                del _RUNS[key]
