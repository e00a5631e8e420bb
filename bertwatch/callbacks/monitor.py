"""The shared probe pass: one pass over the probe set per due step, whatever bertwatch callbacks asked for it.

Callbacks with equal probe settings (``callbacks.settings.ProbeSettings``, compared by value) on the same model
object share one ``Monitor`` (``monitor_for``). At every event the first callback to arrive runs one pass for
the union of what every due callback (``probe_pass.Subscriber``) needs; the others find the results kept.

Data flows one way: at ``on_train_begin`` the monitor gathers the run into a ``ProbeContext``
(``callbacks.probe_context``); at each event it plans the pass from the due subscribers (``probe_pass.plan_pass``),
starts it (``probe_pass.start_pass``: measurements and riders return values), and once its results are in hands
the grids to the ``Publisher`` (event files, trackers) and to each subscriber's ``record``; then each subscriber
takes its own turn (``settled``: alerts, the probe-steps record) at its next event. The run's first pass, at the
first step's begin, also makes the setup check of the gradient statistics' loss (``check_loss_later``): its own
gradient pass where it can be that check, before the first optimiser step either way.

With a statistics worker (``callbacks.offload``, the ``offload_stats`` setting) the training thread runs only the
pass's forward passes and hands the statistics to the worker; the results are published at the first event that
finds them ready, and waited for at the latest before the next optimiser step (``settle``, called at
``on_pre_optimizer_step``: the jobs may read the weights), before the next pass and at the end. Everything is
published in the same order, with the same values, as inline; only later. The pass never changes the user's
training: eval mode, restored RNG and attention implementation (``bertwatch.heads.capture``), ``torch.no_grad``
for maps, ``torch.autograd.grad`` on gates for gradients, and its own copy of the probe batches.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from bertwatch.callbacks._context import TrainerContext
from bertwatch.callbacks.offload import StatsWorker, offload_threads
from bertwatch.callbacks.probe_context import ProbeContext, build_probe_context
from bertwatch.callbacks.probe_pass import LossRefused, PendingPass, ProbePlan, Subscriber, plan_pass, start_pass
from bertwatch.callbacks.probe_set import ProbeSet
from bertwatch.callbacks.publisher import HeadEmbedding, NamedValues, Publisher
from bertwatch.callbacks.settings import ALL_STATS, MAP_STATS, ProbeSettings, WatchSettings
from bertwatch.core.alerts import Alert
from bertwatch.heads.importance import GRADIENT_NAMES, check_gradients
from bertwatch.heads.sharding import is_sharded
from bertwatch.heads.task_heads import LossSetupError
from bertwatch.tb.metadata import PROBE_MODEL_KEY

__all__ = ["ALL_STATS", "MAP_STATS", "Monitor", "ProbeSettings", "Subscriber", "loss_problem", "monitor_for"]


_MONITORS: weakref.WeakKeyDictionary[torch.nn.Module, dict[ProbeSettings, Monitor]] = weakref.WeakKeyDictionary()


def monitor_for(model: torch.nn.Module, settings: ProbeSettings | WatchSettings) -> Monitor:
    """The monitor shared by every callback with equal probe settings (``ProbeSettings`` equality: plain data by
    value, objects by identity) on this very model object (held weakly: the registry never keeps a model alive)."""
    probe = settings.probe() if isinstance(settings, WatchSettings) else settings
    monitors = _MONITORS.setdefault(model, {})
    monitor = monitors.get(probe)
    if monitor is None:
        monitor = Monitor(model, probe)
        monitors[probe] = monitor
    return monitor


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


class _Run:
    """What one training run's passes have done so far: the events handled, the grids of the current step, the
    steps whose maps were kept, and the publisher of the run."""

    def __init__(self, publisher: Publisher, begin_pending: bool) -> None:
        self.publisher = publisher
        self.begin_pending = begin_pending
        self.handled: set[tuple[str, int]] = set()
        self.step = -1
        self.grids: dict[str, np.ndarray] = {}
        self.maps_written: set[int] = set()
        self.pending: _Pending | None = None
        self.settled: dict[int, list[tuple[int, str]]] = {}  # id(subscriber) -> its (step, event) not yet taken
        self.loss_verdicts: list[Callable[[str], None]] = []  # waiting for the loss check (``check_loss_later``)


class _Pending:
    """A started pass whose results are not yet published: its ``step``, ``event``, ``due`` subscribers."""

    def __init__(self, step: int, event: str, due: list[Subscriber], started: PendingPass | None) -> None:
        self.step, self.event, self.due, self.started = step, event, due, started


class Monitor:
    """One probe set, one reference, one pass per due step, one event writer (world process zero only).

    Built by :func:`monitor_for`; :meth:`attach` joins a subscriber to a training run (the first one of a run
    builds the run's ``ProbeContext``), :meth:`run` handles an event, :meth:`release` leaves.
    """

    def __init__(self, model: torch.nn.Module, settings: ProbeSettings) -> None:
        self._model = weakref.ref(model)
        self.settings = settings
        self.subscribers: list[Subscriber] = []
        self._failed = False
        self._state: Any = None
        self._context: ProbeContext | None = None
        self._run: _Run | None = None
        self._worker: StatsWorker | None = None

    @property
    def worker(self) -> StatsWorker | None:
        """The run's statistics worker (None: the statistics run inline, on the training thread)."""
        return self._worker

    @property
    def model(self) -> torch.nn.Module | None:
        return self._model()

    @property
    def context(self) -> ProbeContext:
        """The run's ``ProbeContext`` (``RuntimeError`` before a subscriber attached)."""
        if self._context is None:
            raise RuntimeError("this bertwatch monitor has no training run yet: attach a subscriber first")
        return self._context

    @property
    def failed(self) -> bool:
        """Whether a setup or a pass of this run failed (the subscribers then stop)."""
        return self._failed

    @property
    def probe(self) -> ProbeSet | None:
        """The run's probe set (None before a run)."""
        return None if self._context is None else self._context.probe

    @property
    def run_dir(self) -> str | None:
        """The TensorBoard run directory written to (None before a run and off world process zero)."""
        return None if self._context is None else self._context.run_dir

    @property
    def reference_source(self) -> str | None:
        """Where the drift reference of the run comes from, in words."""
        return None if self._context is None else self._context.reference.source

    # ---------------------------------------------------------------------------------------------- setup

    def attach(
        self, subscriber: Subscriber, args: Any, state: Any, kwargs: Mapping[str, Any], context: TrainerContext
    ) -> None:
        """Join the training run of ``state``; the first subscriber of a run builds its ``ProbeContext`` from
        ``args``, the ``on_train_begin`` keyword arguments ``kwargs`` and the Trainer ``context``."""
        if self._state is not state:
            self._start(args, state, kwargs, context)
        if subscriber not in self.subscribers:
            self.subscribers.append(subscriber)

    def _start(self, args: Any, state: Any, kwargs: Mapping[str, Any], context: TrainerContext) -> None:
        self.close()
        self._state, self._failed, self.subscribers = state, False, []
        self._context, self._run = None, None
        try:
            run = build_probe_context(self.model, self.settings, args, state, kwargs, context)
        except BaseException:
            self._failed = True
            raise
        self._context = run
        threads = 0 if is_sharded(self.model) else offload_threads(self.settings.offload, run.device)
        self._worker = StatsWorker(run.device, threads) if threads else None
        probe = {**run.probe.length_info(), PROBE_MODEL_KEY: run.model_name}  # recorded with the run's grids
        publisher = Publisher(run.writer, run.trackers, args, state, run.event, run.probe.roles, probe)
        self._run = _Run(publisher, begin_pending=not run.resumed)

    def publish_alerts(self, alerts: Sequence[Alert], step: int, reference_step: int, to_trackers: bool) -> None:
        """Write the stability alerts in force at ``step`` through the run's one publisher
        (``Publisher.publish_alerts``); nothing before a run."""
        if self._run is not None and self._context is not None:
            self._run.publisher.publish_alerts(
                alerts, self._context.layers, self._context.heads, step, reference_step, to_trackers
            )

    def publish_records(self, records: Sequence[NamedValues | HeadEmbedding], step: int) -> None:
        """Write records made outside a probe pass through the run's one publisher; nothing before a run."""
        if records and self._run is not None:
            self._run.publisher.publish_records(records, step)

    def active(self) -> list[Subscriber]:
        return [s for s in self.subscribers if not s.disabled]

    # ---------------------------------------------------------------------------------------------- events

    def run(self, event: str, state: Any) -> None:
        """Handle ``event`` at ``state.global_step`` once for all subscribers; the begin pass runs first if pending
        (and a "begin" that is not pending does nothing)."""
        if self._failed or self._run is None:
            raise RuntimeError("this bertwatch monitor already failed")
        run = self._run
        if run.begin_pending and event != "begin":
            self.run("begin", state)
        if event == "begin":
            self.settle(wait=run.begin_pending)
            if not run.begin_pending:
                return
            run.begin_pending = False
        step = int(state.global_step)
        if (event, step) in run.handled:
            return
        run.handled.add((event, step))
        self.settle()
        try:
            self._handle(run, self.context, event, step)
        except BaseException:
            self._failed = True
            raise
        if event == "end" or self._worker is None:
            self.settle()

    def settle(self, wait: bool = True) -> None:
        """Publish the pending pass's results and give them to its subscribers, waiting for the statistics worker
        (or, with ``wait=False``, only when they are ready). A failed job is raised here, and fails the monitor."""
        run = self._run
        if self._failed or run is None or run.pending is None:
            return
        pending = run.pending
        if not wait and pending.started is not None and not pending.started.ready:
            return
        run.pending = None
        try:
            self._publish(run, pending)
        except BaseException:
            self._failed = True
            raise

    def awaits(self, subscriber: Subscriber, step: int) -> bool:
        """Whether ``subscriber`` is due a pass at ``step`` whose results are not published yet."""
        pending = None if self._run is None else self._run.pending
        return pending is not None and pending.step == step and any(s is subscriber for s in pending.due)

    def settled(self, subscriber: Subscriber) -> list[tuple[int, str]]:
        """The ``(step, event)`` of the passes published for ``subscriber`` since it last asked, oldest first."""
        return [] if self._run is None else self._run.settled.pop(id(subscriber), [])

    def _handle(self, run: _Run, context: ProbeContext, event: str, step: int) -> None:
        """Plan the pass of ``event`` at ``step`` and start it (``probe_pass.start_pass``, on the run's worker if it
        has one); ``settle`` publishes it. The first one also makes the loss check (``check_loss_later``)."""
        active = self.active()
        due = [s for s in active if s.wants(event, step)]
        if step != run.step:
            run.step, run.grids = step, {}
        riders = tuple(a for s in due for a in s.riders(context, step))

        def plan() -> ProbePlan:
            return plan_pass(
                event,
                step,
                due,
                self.active(),
                measured=run.grids.keys(),
                maps_done=step in run.maps_written,
                reference_ready=context.reference.ready,
                reference_model=self.settings.reference_model is not None,
                riders=riders,
            )

        first = plan()
        if first.build_reference and context.resumed:
            context.reference.warn_resumed(int(context.state.global_step))
        if run.loss_verdicts:
            started = self._checked_start(run, context, first, plan)
        else:
            started = None if first.empty else start_pass(first, context, self._worker)
        run.pending = _Pending(step, event, due, started)

    def check_loss_later(self, refuse: Callable[[str], None]) -> bool:
        """Have the run's loss checked for the gradient statistics at the start pass (the first step's begin,
        before the first optimiser step) and hand a refusal, the problem in words, to ``refuse`` (which raises
        ``SetupError`` or drops those statistics). False, keeping nothing, where the run has no start pass ahead
        (resumed from a checkpoint): the caller checks now (:func:`loss_problem`)."""
        if self._run is None or not self._run.begin_pending:
            return False
        self._run.loss_verdicts.append(refuse)
        return True

    def _checked_start(
        self, run: _Run, context: ProbeContext, plan: ProbePlan, replan: Callable[[], ProbePlan]
    ) -> PendingPass | None:
        """Start ``plan``'s pass after the loss check, or as it: where the pass takes the gradient statistics with
        the model's own or the Trainer's loss, its gradient pass is the check (the same forwards of the same
        length groups or examples alone, ``ProbePlan.check_loss``); a ``loss_fn`` (whose check also compares
        each example's loss across batches) or a pass without them gets :func:`loss_problem`'s forward first, and
        so does a pass with riders over several batches (a refusal after its first batch would find them fed).
        On a refusal every waiting verdict is given it, and the pass runs anew as ``replan()`` plans it."""
        verdicts, run.loss_verdicts = run.loss_verdicts, []
        gradients = bool(set(plan.names) & set(GRADIENT_NAMES))
        single = not plan.riders or len(context.probe.batches) == 1
        if gradients and single and context.loss.loss_fn is None:
            try:
                return start_pass(replace(plan, check_loss=True), context, self._worker)
            except LossRefused as refused:
                if self._worker is not None:
                    self._worker.collect()  # the stopped pass's jobs; their results are dropped
                problem: str | None = _refusal(context, refused.error)
        else:
            problem = loss_problem(context)
        if problem is None:
            return None if plan.empty else start_pass(plan, context, self._worker)
        for refuse in verdicts:
            refuse(problem)
        plan = replan()
        return None if plan.empty else start_pass(plan, context, self._worker)

    def _publish(self, run: _Run, pending: _Pending) -> None:
        """Write a pass's results, give each due subscriber its grids, and queue its turn (``settled``)."""
        step, event, due = pending.step, pending.event, pending.due
        if pending.started is not None:
            result = pending.started.result()
            run.grids.update(result.all_grids())
            run.publisher.publish(
                step, result.grids, run.grids, result.summaries, result.examples, result.measure_examples
            )
            if result.examples:
                run.maps_written.add(step)
        for s in due:
            s.record(step, {n: run.grids[n] for n in ALL_STATS if n in s.stat_names and n in run.grids})
            run.settled.setdefault(id(s), []).append((step, event))
        senders = [s for s in due if s.log_to_trackers]
        if senders and event != "end":  # by on_train_end the trackers have closed their runs
            run.publisher.send_layer_means(step, run.grids, set().union(*(s.stat_names for s in senders)))

    def flush(self) -> None:
        if self._run is not None:
            self._run.publisher.flush()

    def release(self, subscriber: Subscriber) -> None:
        """A subscriber is done with this run; the last one closes the writer and frees the reference maps."""
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)
        if not self.active():
            self.close()
            if self._context is not None:
                self._context.reference.forget()
            if not self._failed:  # a failed monitor stays registered, so callbacks still to attach see it failed
                monitors = _MONITORS.get(self.model, {})
                for key in [k for k, m in monitors.items() if m is self]:
                    del monitors[key]

    def close(self) -> None:
        """Close the run's event writer (nothing is written after) and stop its statistics worker."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        if self._run is not None:
            self._run.publisher.close()
