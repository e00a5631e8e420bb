"""One probe pass, planned then executed: ``plan_pass`` decides, ``execute`` runs.

``plan_pass`` reads what the due callbacks want (their statistics, the maps to keep) and what the step already
measured, and returns a ``ProbePlan``: which statistics each measurement gives (``callbacks.measurements``), how many probe
examples' maps to keep, whether the drift reference is taken in this pass or from the reference model, and the
riders on it (``callbacks.riders``). ``execute`` runs the plan over the probe batches, once each: per batch the ``"before"``
measurements (own passes), one shared no-grad forward recording what the plan needs (``CaptureNeeds``), the
``"forward"`` measurements and the riders on it, then the ``"after"`` measurements; it returns values
(``PassResult``) and writes nothing (``callbacks.publisher`` does).

When a callback watches a context-mixing statistic (``core.stat_names.MIXING_NAMES``), the kept examples also get
their maps of the other mixing measures (``LIVE_MEASURES``, ``heads.mixing_model.mixing_maps`` on those rows alone),
so that the plugin's measure selector has them beside the weights at the same steps.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from bertwatch.callbacks.measurements import (
    MEASUREMENTS,
    CaptureNeeds,
    Measured,
    Measurement,
    MeasurementPass,
    ProbeBatch,
    RecordedStates,
)
from bertwatch.callbacks.probe_set import crop_maps
from bertwatch.callbacks.publisher import RiderOutput
from bertwatch.callbacks.riders import Rider
from bertwatch.core.stat_names import MIXING_MEASURES, MIXING_NAMES
from bertwatch.heads.aggregate import aggregate
from bertwatch.heads.capture import capture
from bertwatch.heads.length_groups import crop_rows
from bertwatch.heads.mixing import rollout
from bertwatch.heads.mixing_model import mixing_maps, supports_mixing
from bertwatch.heads.outliers import record_activations
from bertwatch.heads.stats import DRIFT_NAMES
from bertwatch.heads.task_heads import LossSetupError
from bertwatch.options.settings import ALL_STATS

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.callbacks.probe_context import ProbeContext

__all__ = ["LIVE_MEASURES", "LossRefused", "PassResult", "ProbePlan", "execute", "plan_pass", "written_measures"]

#: The measures whose maps the kept examples get beside their weights while a mixing statistic is watched: every
#: mixing measure but value zeroing, which costs L·n forward passes of an n-token example
#: (``bertwatch analyze --mixing --value-zeroing`` writes it after training).
LIVE_MEASURES: tuple[str, ...] = tuple(m for m in MIXING_MEASURES if m not in ("weights", "value_zeroing"))


class LossRefused(Exception):
    """A loss-checking pass (``ProbePlan.check_loss``) stopped at probe batch ``batch``: a ``"before"``
    measurement's pass refused the run's loss (``error``, the ``LossSetupError`` saying why)."""

    def __init__(self, error: LossSetupError, batch: int) -> None:
        super().__init__(str(error))
        self.error, self.batch = error, batch


@dataclass(frozen=True)
class ProbePlan:
    """What one probe pass captures and computes.

    ``work``: each due measurement with the statistics it gives this time; ``names``: all of them, in
    ``ALL_STATS`` order (the order they are logged in); ``num_maps``: probe examples whose maps are kept;
    ``reference_from_model``: the drift reference is first taken from ``reference_model``; ``build_reference``:
    this pass's own maps become the reference; ``riders``: what rides on the pass; ``mixing_maps``: the kept
    examples also get their maps of ``LIVE_MEASURES`` (``written_measures`` says which a model gives);
    ``check_loss``: the pass is the setup check of the gradient statistics' loss, so a ``"before"`` measurement
    that refuses it stops the pass with ``LossRefused`` (its forward is the check's forward).
    """

    step: int
    work: tuple[tuple[Measurement, tuple[str, ...]], ...] = ()
    names: tuple[str, ...] = ()
    num_maps: int = 0
    reference_from_model: bool = False
    build_reference: bool = False
    riders: tuple[Rider, ...] = ()
    mixing_maps: bool = False
    check_loss: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to do: no pass runs."""
        return not (self.names or self.num_maps or self.reference_from_model or self.build_reference or self.riders)

    @property
    def needs(self) -> CaptureNeeds:
        """What the shared forward records: the ``"forward"`` measurements' needs, and always the maps."""
        forward = [m.needs(names) for m, names in self.work if m.stage == "forward"]
        return reduce(CaptureNeeds.__or__, forward, CaptureNeeds(maps=True))

    @property
    def shared_forward(self) -> bool:
        """Whether every batch needs the shared forward (the batches of the kept examples always do)."""
        forward = any(m.stage == "forward" for m, _ in self.work)
        return forward or self.build_reference or bool(self.riders)

    @property
    def uses_reference(self) -> bool:
        return any(n in DRIFT_NAMES for n in self.names)


def plan_pass(
    event: str,
    step: int,
    wanted: Collection[str],
    watched: Collection[str],
    *,
    num_maps: int = 0,
    measured: Collection[str] = (),
    maps_done: bool = False,
    reference_ready: bool = False,
    reference_model: bool = False,
    riders: Sequence[Rider] = (),
    measurements: Sequence[Measurement] = MEASUREMENTS,
) -> ProbePlan:
    """The pass that ``event`` at ``step`` calls for.

    Args:
        event: "begin", "step", "evaluate" or "end".
        step: the global step.
        wanted: the statistics the callbacks due at this event measure.
        watched: the statistics of every callback still running (the reference is taken at "begin" if one of them
            is a drift statistic; a mixing statistic has the kept examples' other maps written).
        num_maps: probe examples whose attention maps the due callbacks keep at this event.
        measured: statistics already measured at this step (by an earlier event), not measured again.
        maps_done: the examples' maps were already kept at this step.
        reference_ready: the drift reference maps are there (cached, or taken earlier).
        reference_model: a reference model was given (its maps are the reference).
        riders: the riders the due callbacks asked for.
        measurements: the measurements, in the order their work runs; a statistic two of them give is measured
            by the first.

    Returns:
        The ``ProbePlan``; ``plan.empty`` when there is nothing to do.

    Raises:
        ValueError: a due statistic that no measurement gives.
    """
    names = tuple(n for n in ALL_STATS if n in wanted and n not in measured)
    owner: dict[str, Measurement] = {}
    for measurement in measurements:
        for name in measurement.names:
            owner.setdefault(name, measurement)
    unmeasured = [n for n in names if n not in owner]
    if unmeasured:
        raise ValueError(f"no measurement gives {unmeasured}; add one to callbacks.measurements.MEASUREMENTS")
    work = tuple((m, tuple(n for n in names if owner[n] is m)) for m in measurements)
    drift_missing = any(n in DRIFT_NAMES for n in names)
    begin_reference = event == "begin" and bool(set(DRIFT_NAMES) & set(watched))
    need_reference = not reference_ready and (begin_reference or (drift_missing and reference_model))
    from_model = need_reference and reference_model
    return ProbePlan(
        step=step,
        work=tuple((m, n) for m, n in work if n),
        names=names,
        num_maps=0 if maps_done else num_maps,
        reference_from_model=from_model,
        build_reference=not reference_ready and not from_model and (need_reference or drift_missing),
        riders=tuple(riders),
        mixing_maps=bool(set(MIXING_NAMES) & set(watched)),
    )


def written_measures(model: torch.nn.Module) -> tuple[str, ...]:
    """The ``LIVE_MEASURES`` whose maps the probe pass writes for ``model``: all of them where the context-mixing
    decomposition fits its attention blocks (``heads.mixing_model.supports_mixing``: x + Attn(x) -> LayerNorm),
    attention rollout alone elsewhere (it needs the weights only)."""
    return LIVE_MEASURES if supports_mixing(model) else ("rollout",)


@dataclass(frozen=True)
class PassResult:
    """What a pass measured: the statistics' ``grids`` ``{name: [layers, heads]}`` (plan order, float32 numpy),
    the riders' ``summaries``, the kept ``examples`` ``(tokens, maps [L, H, n, n], segments)`` and, with
    ``ProbePlan.mixing_maps``, the same examples' maps of the other measures ``{measure: examples}`` (same tokens and
    order; maps ``[L, H, n, n]`` for ``norms``, ``[L, n, n]`` for the per-layer measures) and ``health``, the
    run-health signals of the gradient pass over the whole probe set (``core.health_names``; empty without it)."""

    grids: dict[str, np.ndarray] = field(default_factory=dict)
    summaries: tuple[RiderOutput, ...] = ()
    examples: tuple[tuple, ...] = ()
    measure_examples: dict[str, tuple[tuple, ...]] = field(default_factory=dict)
    health: dict[str, float] = field(default_factory=dict)

    def all_grids(self) -> dict[str, np.ndarray]:
        """The statistics' grids, then the riders' grids."""
        out = dict(self.grids)
        for summary in self.summaries:
            out.update(summary.grids)
        return out


class _Collected:
    """What the batches of one pass add up to: per-example values, kept examples, the reference being taken.

    ``forward``: the ``"forward"`` measurements' values, kept apart (they are aggregated after the others)."""

    def __init__(self) -> None:
        self.per_example: dict[str, list[Tensor]] = defaultdict(list)
        self.forward: dict[str, list[Tensor]] = defaultdict(list)
        self.examples: list[tuple] = []
        self.measure_examples: dict[str, list[tuple]] = defaultdict(list)
        self.reference: list[Tensor] = []

    def add(self, values: Mapping[str, Tensor]) -> None:
        for name, value in values.items():
            self.per_example[name].append(value)


def execute(plan: ProbePlan, context: ProbeContext) -> PassResult:
    """Run ``plan`` over the probe set of ``context`` (module doc); the reference maps it takes are kept in
    ``context.reference``. The model is left as it was (``heads.capture``)."""
    if plan.reference_from_model:
        context.reference.from_model(context.settings.reference_model)
    building = plan.build_reference and not context.reference.ready
    passes = [(m.stage, m.start(names, context, plan.needs)) for m, names in plan.work]
    collected = _Collected()
    for k in range(len(context.probe.batches)):
        _run_batch(plan, context, passes, k, building, collected)
    if building:
        context.reference.keep(collected.reference)
    summaries = tuple(rider.finish() for rider in plan.riders)
    measure_examples = {
        m: tuple(collected.measure_examples[m]) for m in LIVE_MEASURES if m in collected.measure_examples
    }
    health: dict[str, float] = {}
    for _, measurement_pass in passes:
        values = getattr(measurement_pass, "health", None)
        health.update(values() if callable(values) else {})
    grids = _grids(plan, passes, collected)
    return PassResult(grids, summaries, tuple(collected.examples), measure_examples, health)


def _grids(
    plan: ProbePlan, passes: Sequence[tuple[str, MeasurementPass]], collected: _Collected
) -> dict[str, np.ndarray]:
    """The pass's grids ``{name: [layers, heads]}`` in plan order, float32 numpy: the per-example values
    aggregated, then each measurement's ``finish``."""
    values = {**collected.per_example, **collected.forward}
    grids = aggregate({n: torch.cat(v) for n, v in values.items()})
    for (_, names), (_, measurement_pass) in zip(plan.work, passes):
        grids.update(measurement_pass.finish({n: grids[n] for n in names if n in grids}))
    return {n: grids[n].detach().float().cpu().numpy() for n in plan.names if n in grids}


def _measure_forward(passes: Sequence[tuple[str, MeasurementPass]], batch: ProbeBatch, collected: _Collected) -> None:
    """The ``"forward"`` measurements of one batch, their values into ``collected.forward``."""
    for stage, measurement_pass in passes:
        if stage == "forward":
            for name, value in measurement_pass.measure(batch).items():
                collected.forward[name].append(value)


def _run_batch(
    plan: ProbePlan,
    context: ProbeContext,
    passes: Sequence[tuple[str, MeasurementPass]],
    k: int,
    building: bool,
    collected: _Collected,
) -> None:
    """Probe batch ``k`` through every stage of the plan."""
    probe = context.probe
    batch = ProbeBatch(
        index=k,
        start=probe.first_row(k),
        inputs={key: v.to(context.device) for key, v in probe.batches[k].items()},
        roles=probe.roles[k].to(context.device),
    )
    attn = states = None
    for stage, measurement_pass in passes:
        if stage == "before":
            try:
                with _recording(plan.needs, context) as recorded:
                    out = measurement_pass.measure(batch)
            except LossSetupError as err:
                if plan.check_loss:
                    raise LossRefused(err, k) from err
                raise
            if isinstance(out, Measured):
                attn = out.attentions if out.attentions is not None else attn
                states = out.states if out.states is not None else states
                if states is not None and recorded is not None and recorded.rows == len(batch.roles.real):
                    states = replace(states, activations=recorded)  # every row once: no forward of their own
                out = out.values
            collected.add(out)
    if plan.shared_forward or len(collected.examples) < plan.num_maps:
        shared = replace(batch, attentions=attn, capture=states)
        if attn is None and not plan.shared_forward:
            shared = _leading_rows(shared, plan.num_maps - len(collected.examples))
        _on_forward(plan, context, passes, shared, building, collected)
    del attn, states
    for stage, measurement_pass in passes:
        if stage == "after":
            collected.add(measurement_pass.measure(batch))


def _recording(needs: CaptureNeeds, context: ProbeContext) -> contextlib.AbstractContextManager:
    """Hooks recording every forward call's activations (``heads.outliers.record_activations``) when the plan's
    measurements read them, else nothing (yields None)."""
    return record_activations(context.encoder) if needs.activations else contextlib.nullcontext(None)


def _leading_rows(batch: ProbeBatch, rows: int) -> ProbeBatch:
    """The batch's first ``rows`` rows, for a forward that only keeps examples' maps (every input with a batch
    dimension sliced; a multiple-choice batch, whose rows are choices, is left whole)."""
    ids = batch.inputs["input_ids"]
    if rows >= int(ids.shape[0]) or ids.dim() != 2:
        return batch
    inputs = crop_rows(batch.inputs, torch.arange(rows), int(ids.shape[1]), None)
    return replace(batch, inputs=inputs, roles=batch.roles.select(slice(0, rows)))


def _on_forward(
    plan: ProbePlan,
    context: ProbeContext,
    passes: Sequence[tuple[str, MeasurementPass]],
    batch: ProbeBatch,
    building: bool,
    collected: _Collected,
) -> None:
    """The shared no-grad forward (skipped when a ``"before"`` pass gave the maps and recorded everything else
    needed: ``RecordedStates.unmet``), then the ``"forward"`` measurements, the riders, the reference and the kept
    examples."""
    needs, cap, outputs = plan.needs, None, None
    unmet = needs if batch.capture is None else batch.capture.unmet(needs)
    if batch.attentions is None or unmet.beyond_maps:
        model = context.encoder
        with torch.no_grad(), context.autocast(), capture(model, **needs.capture_arguments()) as cap:
            with _recording(needs, context) as recorded:
                outputs = model(**context.model_inputs(batch.inputs), **needs.forward_arguments())
        batch = replace(batch, attentions=cap.attentions, capture=cap, outputs=outputs, activations=recorded)
    elif isinstance(batch.capture, RecordedStates):  # the gradient pass recorded them
        batch = replace(batch, activations=batch.capture.activations)
    attn, roles = batch.attentions, batch.roles
    if building:
        collected.reference.extend(m.to(torch.float16) for m in crop_maps(attn, roles.real))
    if plan.uses_reference:
        batch = replace(
            batch, reference=context.reference.batch(batch.index, collected.reference if building else None)
        )
    _measure_forward(passes, batch, collected)
    for rider in plan.riders:
        rider.consume(batch.start, attn, roles)
    probe, examples = context.probe, collected.examples
    first, kept = len(examples), max(0, plan.num_maps - len(examples))
    for maps in crop_maps(attn[:kept], roles.real):
        index = len(examples)
        examples.append((probe.tokens[index], maps.float().cpu(), probe.segments[index]))
    if plan.mixing_maps and kept:
        for measure, per_example in _measure_maps(context, batch, attn, kept).items():
            for index, maps in enumerate(per_example, start=first):
                collected.measure_examples[measure].append((probe.tokens[index], maps, probe.segments[index]))


def _measure_maps(context: ProbeContext, batch: ProbeBatch, attn: Tensor, rows: int) -> dict[str, list[Tensor]]:
    """The first ``rows`` examples of ``batch``'s maps of each of ``written_measures``, cropped to each example's real
    tokens like the weights, float32 on the CPU: ``norms`` ``[L, H, n, n]``, the others ``[L, n, n]``.

    ``mixing_maps`` runs one float32 forward per example alone (no autocast: the decomposition is exact in float32),
    its trailing padding cut (the decomposition costs T² per layer; a statistic never depends on padding); rollout
    alone is composed from the shared forward's maps ``attn`` ``[rows, L, H, T, T]``.
    """
    model, real = context.encoder, batch.roles.real[:rows].bool()
    measures = written_measures(model)
    if measures == ("rollout",):
        rolled = rollout(attn[:rows].float(), real)
        return {"rollout": [x.float().cpu() for x in crop_maps(rolled, real)]}
    inputs, length = context.model_inputs(batch.inputs), real.shape[1]
    out: dict[str, list[Tensor]] = {m: [] for m in measures}
    for row in range(rows):
        end = int(real[row].nonzero().max()) + 1 if real[row].any() else 1
        alone = {k: v[row : row + 1, :end] if v.dim() >= 2 and v.shape[1] == length else v[row : row + 1]
                 for k, v in inputs.items()}  # fmt: skip
        keep = real[row : row + 1, :end]
        maps = mixing_maps(model, alone, keep)
        for m in measures:
            out[m].append(crop_maps(maps[m], keep)[0].float().cpu())
    return out
