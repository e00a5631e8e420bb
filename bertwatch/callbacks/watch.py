"""The Trainer callbacks: ``BertWatchCallback`` and the single-purpose callbacks of the design card.

Each callback names the statistics it wants and when; the probe pass itself is shared (``watched_run.WatchedRun``).
Every event is contained (``_safe.contained``): an error becomes one warning and stops that callback, while a
misconfiguration (unsupported model, empty probe set) fails loudly at ``on_train_begin``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from transformers import TrainerCallback

from bertwatch.callbacks import announce
from bertwatch.callbacks._context import TrainerContext, evaluation_steps
from bertwatch.callbacks._safe import OwnCallback, SetupError, contained
from bertwatch.callbacks.alerting import Alerting
from bertwatch.callbacks.members import Judging, Member, MemberHandle, resolve, setup_warnings
from bertwatch.callbacks.pacing import MapsCadence, Pinned, ProbePacing
from bertwatch.callbacks.riders import ClusterTrack, riders_for
from bertwatch.callbacks.run_evidence import RunEvidence
from bertwatch.callbacks.tracking import NotATracker
from bertwatch.callbacks.watched_run import join
from bertwatch.callbacks.word_classes import prepare_word_classes
from bertwatch.core.stat_names import DEFAULT_STATS
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME
from bertwatch.heads.maps.stats import DRIFT_NAMES
from bertwatch.heads.sharding import is_sharded
from bertwatch.options.groups import word_class_option
from bertwatch.options.settings import COMMON_OPTIONS, WatchSettings, callback_settings
from bertwatch.probe.probe_context import ProbeContext

__all__ = [
    "WatchCallback",
    "AttentionDriftCallback",
    "BertWatchCallback",
    "EntropyCallback",
    "GradientImportanceCallback",
    "SpecialTokenMassCallback",
]

SPECIAL_TOKEN_STATS = ("cls_mass", "sep_mass", "punct_mass", "sep_to_sep", "sep_mass_kovaleva")
ENTROPY_STATS = ("entropy", "cls_entropy")


class WatchCallback(OwnCallback, NotATracker, TrainerCallback):
    """Shared machinery: cadence, statistics, membership of the run's probe pass, error containment.

    ``history`` holds ``(step, {stat: [layers, heads] array})`` for every step this callback measured, on every
    process (only world process zero writes event files); ``health`` holds ``(step, {signal: value})``, the
    run-health signals of the steps its gradient statistics were measured (``core.health_names``). The run judges
    the alerts and the verdict once for all its callbacks (``callbacks.judging``): ``alerting.verdict`` is the last
    verdict on the run (``core.verdict``). ``log_to_trackers`` (default on) also sends each statistic's layer means
    to the Trainer's ``report_to`` trackers (``bertwatch.callbacks.tracking``).
    """

    default_stats: tuple[str, ...] = ()

    #: The keyword options this callback takes (``WatchSettings`` fields; ``"group.field"``: one nested field).
    options: tuple[str, ...] = COMMON_OPTIONS

    #: Whether its ``on_alert``, ``alerts`` and ``verdict`` settings judge its run (``Member.judging``): declared by
    #: a callback that takes them as options; the others take no part in the judging but what they measure.
    judges: ClassVar[bool] = False

    def __init__(
        self, stats: Sequence[str] | None = None, *, settings: WatchSettings | None = None, **options: Any
    ) -> None:
        """``stats``, then ``settings`` (a :class:`~bertwatch.options.settings.WatchSettings`; the defaults when
        None) with ``options`` (its fields by name) replacing its values. An unknown option is a ``TypeError`` that
        lists this callback's options."""
        if stats is not None:
            options["stats"] = stats
        self.settings = s = callback_settings(type(self).__name__, self.options, settings, options)
        requested = s.stats
        ig_taken = "expert" in self.options or "expert.integrated_gradients" in self.options
        if requested is None and s.expert.integrated_gradients and ig_taken:
            requested = self.default_stats + (IG_NAME,)
        self.requested = None if requested is None else tuple(requested)
        self.every_n_steps, self.log_to_trackers = s.every_n_steps, s.expert.log_to_trackers
        # overhead budget (callbacks/pacing.py): every_n_steps=None spaces the step probes by the budget
        pinned = Pinned(s.probing.at_start, s.probing.on_evaluate, s.probing.at_end)
        self.pacing = ProbePacing(s.every_n_steps, s.overhead_budget, pinned)
        super().__init__()
        self.probe_settings, self.watched = s.probe(), None
        self.member_handle: MemberHandle | None = None  # this callback's place in its run, from on_train_begin
        self._speaker = announce.Speaker()
        self._stat_names = frozenset(self.requested or self.default_stats)

    @property
    def stat_names(self) -> frozenset[str]:
        """The statistics this callback measures (in a run: those its model, probe set and loss give)."""
        return self.member_handle.member.stat_names if self.member_handle is not None else self._stat_names

    @property
    def history(self) -> list[tuple[int, dict[str, np.ndarray]]]:
        """``(step, {stat: [layers, heads]})`` of every step this callback measured in its run (empty before it)."""
        return self.member_handle.history if self.member_handle is not None else []

    @property
    def health(self) -> list[tuple[int, dict[str, float]]]:
        """``(step, {signal: value})``: the run-health signals of the steps it measured its gradient statistics."""
        return self.member_handle.health if self.member_handle is not None else []

    @property
    def alerting(self) -> Alerting | None:
        """The run's alerts and verdict (``callbacks.alerting.Alerting``; None before the run)."""
        return None if self.watched is None else self.watched.judge.alerting

    @property
    def run_evidence(self) -> RunEvidence | None:
        """What the run's verdict read (``callbacks.run_evidence``; None before the run)."""
        return None if self.watched is None else self.watched.judge.evidence

    @property
    def latest(self) -> dict[str, np.ndarray]:
        """The grids of the last measured step (empty before the first)."""
        return dict(self.history[-1][1]) if self.history else {}

    def disable(self, message: str | None = None) -> None:
        """Stop this callback for the rest of the run (with its one warning), and leave its run."""
        super().disable(message)
        if self.watched is not None:
            self.watched.leave(self.member_handle)

    def _member(self, stat_names: frozenset[str], context: ProbeContext | None) -> Member:
        """This callback's part in the run's passes (BertWatchCallback adds maps and riders, made here for the
        run's passes)."""
        required, s = self.requested is not None, self.settings
        judging = Judging(s.on_alert, s.alerts, s.verdict) if self.judges else None
        return Member(self.shown_name, stat_names, self.pacing, required, log_to_trackers=self.log_to_trackers,
                      judging=judging, strict=self.strict)  # fmt: skip

    @contained("on_train_begin")
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if kwargs.get("model") is None:
            raise SetupError(f"{type(self).__name__} needs the model in the Trainer's callback arguments")
        self.pacing.start(int(state.global_step), int(state.max_steps or 0) or None)
        start, self.member_handle = self.pacing.clock(), None
        context = self._link.context(kwargs)
        self.watched = join(kwargs["model"], self.probe_settings, args, state, kwargs, context)
        if self.watched.failed:
            return self.disable()
        probe = self.watched.context
        self._check_setup(args, state, probe, context)
        side = self.watched.trainer_side
        speaks = side.world_zero and not announce.quiet(self.settings.quiet)
        member = resolve(self._member(self._stat_names, probe), probe, not self.watched.begin_pending)
        self.member_handle = self.watched.add(dataclasses.replace(member, speaks=speaks))
        setup_warnings(member, args, context.bound)
        self.pacing.charge(self.pacing.clock() - start, setup=True)
        evaluations = evaluation_steps(args, state) if self.pacing.pinned.on_evaluate else ()
        first = self.watched.announce_once()
        more = self._more_lines(probe, first)
        self._speaker.start(probe, side, member, self.pacing, evaluations, speaks, first, more)

    def _more_lines(self, context: ProbeContext, first: bool) -> list[str]:
        """Start lines of this callback's own: the size of a large drift reference, from the run's ``first``
        callback (BertWatchCallback: also the maps it cannot keep)."""
        return announce.reference_lines(context) if first and self.stat_names & set(DRIFT_NAMES) else []

    def _report_hint(self, args: Any) -> str:
        """Where the run's report is, or how to make it."""
        return announce.report_command(str(args.output_dir))

    def _check_setup(self, args: Any, state: Any, probe: ProbeContext, context: TrainerContext) -> None:
        """Fail at on_train_begin on a configuration that could only fail later."""

    def _drive(self, event: str, state: Any, control: Any = None, metrics: Any = None, kwargs: Any = None) -> None:
        """Have the run handle ``event`` (the pass runs and is judged once, for every callback due); the run
        delivers this callback's results to its handle (its ``history`` and ``health``) and writes its
        ``probe_steps`` points."""
        watched, step = self.watched, int(state.global_step)
        if watched is None or self.member_handle is None or watched.failed:
            return None if watched is None or self.member_handle is None else self.disable()
        evaluation = None if kwargs is None else (metrics, self._link.context(kwargs))
        watched.handle(event, step, self.member_handle, control, evaluation)

    @contained("on_step_begin")
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._drive("begin", state, control)
        self._speaker.forecast(int(state.global_step), self.pacing)

    @contained("on_step_end")
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._drive("step", state, control)

    @contained("on_evaluate")
    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._drive("evaluate", state, control, kwargs.get("metrics"), kwargs)

    @contained("on_log")
    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.watched is not None and not self.watched.failed:
            self.watched.on_log(int(state.global_step), logs, control)

    @contained("on_train_end")
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watched is None:
            return
        try:
            self._drive("end", state)
            if not self.disabled:
                start = self.pacing.clock()
                self._after_end(args, state, kwargs)
                after = self.pacing.clock() - start  # the ablation: left out of the run's wall time, said apart
                member, hint = self.member_handle.member, self._report_hint(args)
                verdict = self.alerting.verdict_to_tell() if member.gives_health and self._speaker.speaks else None
                self._speaker.end(self.history, self.alerting, member, self.pacing, hint, after, verdict)
        finally:
            self.watched.leave(self.member_handle)

    def _after_end(self, args: Any, state: Any, kwargs: Mapping[str, Any]) -> None:
        """Work after the last measurement (the ablation sweep of BertWatchCallback)."""


class AttentionDriftCallback(WatchCallback):
    """``drift_cosine`` and ``drift_js`` of every head against the pretrained (or a named reference) model.

    ``compat_length=N`` pads maps to N tokens and keeps the pad rows in ``drift_cosine``, as Kovaleva's notebook did.
    """

    default_stats = DRIFT_NAMES
    options = COMMON_OPTIONS + ("probing.compat_length",)


class SpecialTokenMassCallback(WatchCallback):
    """Attention mass on [CLS], [SEP] and punctuation per head (Clark Fig 2, Kovaleva Fig 6)."""

    default_stats = SPECIAL_TOKEN_STATS


class EntropyCallback(WatchCallback):
    """Attention entropy per head and of the [CLS] row (Clark Fig 4), in nats."""

    default_stats = ENTROPY_STATS


class GradientImportanceCallback(WatchCallback):
    """Gradient head importance (Michel) and attention gradients by key type (Clark Fig 3); IG on request.

    Gradients are taken with ``torch.autograd.grad`` on gates and maps, so the optimiser's gradients are untouched.
    """

    default_stats = GRADIENT_NAMES
    options = COMMON_OPTIONS + tuple(
        f"expert.{n}" for n in ("integrated_gradients", "ig_steps", "normalize_importance")
    )

    def __init__(
        self,
        stats: Sequence[str] | None = None,
        *,
        normalize_by_layer: bool | None = None,
        settings: WatchSettings | None = None,
        **options: Any,
    ):
        """``normalize_by_layer`` is this callback's name of ``ExpertOptions.normalize_importance``."""
        if normalize_by_layer is not None:
            expert = options.get("expert", (settings or WatchSettings()).expert)
            options["expert"] = dataclasses.replace(expert, normalize_importance=normalize_by_layer)
        super().__init__(stats, settings=settings, **options)


class BertWatchCallback(WatchCallback):
    """Every statistic of ``docs/statistics.md`` for every head, attention maps of a few probe examples, ablation
    on request.

    Attach it with ``bertwatch.watch(trainer)`` (or run an unchanged script with ``bertwatch run``); in
    ``callbacks=[...]`` alone it sees only what the Trainer's events carry (see ``_context``). Defaults: 32
    probe examples from the eval set, statistics at step 0, every evaluation, the end and between them as often as
    the overhead budget allows (``overhead_budget=0.02``; ``every_n_steps=N`` pins a fixed cadence instead); the
    maps of 4 probe examples at step 0, every ``ExpertOptions.maps_every_n_steps`` (default 4 × ``every_n_steps``,
    or every fourth budgeted step) and the end. ``stats=`` selects statistics. ``ablate_on_end=True`` runs an
    ``AblationCallback`` (the head/layer disabling sweep) on the eval set after the last measurement. In
    ``expert=ExpertOptions(...)``: ``integrated_gradients=True`` adds captum IG; ``word_classes=True`` adds
    attention to pronouns, subjects, objects and negation and the [CLS] row's targets (``wordclass_*``,
    ``cls_target_*`` grids); ``word_classes="dev.conllu"`` (or a list of ``Sentence``, or a ``WordClassProbe``)
    instead measures, on those UD-annotated sentences, each head's share of attention on nouns, verbs, pronouns,
    determiners, subjects, objects, negation and punctuation (``class_share_*`` grids, the ``word_classes``
    series; ``callbacks.word_classes``); ``head_clusters=True`` logs the heads' JS/MDS map at every probe step,
    aligned between steps (``bertwatch/clustering/js_mds_training``, from the first ``cluster_examples`` probe
    examples).

    Args:
        stats: the statistics to measure (default: every one but integrated gradients; ``docs/statistics.md``).
        settings: a :class:`~bertwatch.options.settings.WatchSettings` holding every option (default: the
            defaults); ``options`` replace its fields.
        **options: any field of ``WatchSettings`` by name (``every_n_steps``, ``num_probe_examples``,
            ``probe_texts``, ``ablate_on_end``, ``expert=ExpertOptions(word_classes=True)``, ...).

    Raises:
        TypeError: an unknown option (the message names the closest and lists them all) or a value of the wrong
            type. ``SetupError`` (at ``on_train_begin``, before the first step): a model, probe set or statistic
            bertwatch cannot measure exactly, with what to do.
        ValueError: an option out of its range, an unknown statistic or ablation mode.

    Example:
        >>> from bertwatch.callbacks import BertWatchCallback
        >>> callback = BertWatchCallback(every_n_steps=20, num_maps=2)
        >>> callback.every_n_steps, callback.maps_every_n_steps, callback.pacing.due("step", 40)
        (20, 80, True)
        >>> BertWatchCallback(num_mapz=2)
        Traceback (most recent call last):
        TypeError: BertWatchCallback: unknown option 'num_mapz' (did you mean 'num_maps'?); valid: ...
    """

    default_stats = DEFAULT_STATS
    options = WatchSettings.names()
    judges = True

    def __init__(
        self, stats: Sequence[str] | None = None, *, settings: WatchSettings | None = None, **options: Any
    ) -> None:
        super().__init__(stats, settings=settings, **options)
        s = self.settings
        self.num_maps = s.num_maps
        self.maps_every_n_steps = s.expert.maps_every_n_steps
        if self.maps_every_n_steps is None and self.every_n_steps is not None:
            self.maps_every_n_steps = 4 * self.every_n_steps
        self.ablate_on_end = s.ablate_on_end
        self.ablation_mode = s.ablation.mode
        self.ablation_kwargs = dict(s.ablation.kwargs)
        self.ablation_result: Any = None
        self.ablation: Any = None
        if self.ablate_on_end:
            from bertwatch.callbacks.ablate_on_end import AblationCallback

            self.ablation = AblationCallback(modes=s.ablation.mode, **self.ablation_kwargs)
        self.word_classes = word_class_option(s.expert.word_classes)
        self.word_class_batches: Any = None
        self.cluster_track = ClusterTrack() if s.expert.head_clusters else None
        self.cluster_examples = s.expert.cluster_examples

    def _member(self, stat_names: frozenset[str], context: ProbeContext) -> Member:
        maps = MapsCadence(self.num_maps, self.maps_every_n_steps, fixed=self.every_n_steps is not None)
        riders = riders_for(
            context, self.word_classes is True, self.cluster_track, self.cluster_examples, self.word_class_batches
        )
        return dataclasses.replace(super()._member(stat_names, context), maps=maps, riders=tuple(riders))

    def _check_setup(self, args: Any, state: Any, probe: ProbeContext, context: TrainerContext) -> None:
        self.word_class_batches = prepare_word_classes(self.word_classes, probe)
        if self.ablation is None:
            return
        try:
            self.ablation.check(args, state, context)
        except SetupError as err:
            raise SetupError(f"ablate_on_end=True: {err}") from err

    def _more_lines(self, context: ProbeContext, first: bool) -> list[str]:
        longest = int(context.probe.length_info()["longest"] or 0)
        watched = self.watched
        line = announce.maps_line(self.num_maps, min(self.num_maps, watched.maps_fit), longest, watched.maps_budget)
        return super()._more_lines(context, first) + ([line] if line else [])

    def _report_hint(self, args: Any) -> str:
        if self.ablation_result is None:
            return super()._report_hint(args)
        return announce.report_file(str(self.ablation.report(args)))

    def _after_end(self, args: Any, state: Any, kwargs: Mapping[str, Any]) -> None:
        sharded = is_sharded(kwargs["model"])  # every process must take part in a sharded model's forwards
        if self.ablation is None or not (sharded or state.is_world_process_zero):
            return
        writer = self.watched.trainer_side.writer if self.watched is not None else None
        results = self.ablation.run(args, state, self._link.context(kwargs), writer=writer, distributed=sharded)
        self.ablation_result = results[self.ablation_mode]
