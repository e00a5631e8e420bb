"""One probe pass, planned then executed: ``plan_pass`` decides, ``execute`` runs.

``plan_pass`` reads what the due callbacks want (their statistics, the maps to keep) and what the step already
measured, and returns a ``ProbePlan``: which statistics each measurement gives (``probe.measurements``), how
many probe examples' maps to keep, whether the drift reference is taken in this pass or from the reference model,
and the riders on it (``callbacks.riders``). ``execute`` runs the plan over the probe set's units (rows of one probe
batch run together, ``probe.probe_units``), once each: per unit the ``"before"`` measurements (own passes), one
shared no-grad forward recording what the plan needs (``CaptureNeeds``; skipped when the gradient pass recorded it
all), the drift reference's maps of the same rows (``probe.reference``), the ``"forward"`` measurements and the
riders on it, then the ``"after"`` measurements. Everything stays on the model's device until the pass's end, where
its grids, run-health signals and kept maps go to the host in one copy: the only read back of the pass (the start's
loss check and the opt-in riders, integrated gradients and mixing maps read more). It returns values
(``PassResult``, with the references it took) and writes nothing (``callbacks.publisher`` and the watched run do).

When a callback watches a context-mixing statistic (``core.stat_names.MIXING_NAMES``), the kept examples also get
their maps of the other mixing measures (``LIVE_MEASURES``, ``heads.mixing.mixing_model.mixing_maps`` on those rows
alone), so that the plugin's measure selector has them beside the weights at the same steps.
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from bertwatch.core.stat_names import MIXING_MEASURES, MIXING_NAMES
from bertwatch.heads.aggregate import aggregate
from bertwatch.heads.capture import capture
from bertwatch.heads.host import reads_free
from bertwatch.heads.maps.stats import DRIFT_NAMES
from bertwatch.heads.mixing.mixing_model import mixing_maps, supports_mixing
from bertwatch.heads.mixing.mixing_scores import rollout
from bertwatch.heads.outliers.activations import record_activations
from bertwatch.heads.task_heads import LossSetupError
from bertwatch.options.settings import ALL_STATS
from bertwatch.probe.measurements import (
    MEASUREMENTS,
    CaptureNeeds,
    Measured,
    Measurement,
    MeasurementPass,
    ProbeBatch,
    RecordedStates,
)
from bertwatch.probe.probe_units import ProbeUnit
from bertwatch.probe.records import Rider, RiderOutput
from bertwatch.probe.reference import MapsReference, ModelReference, ReferenceTaking

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.probe.probe_context import ProbeContext

__all__ = [
    "LIVE_MEASURES",
    "LossRefused",
    "PassResult",
    "ProbePlan",
    "execute",
    "plan_pass",
    "written_measures",
]

#: The measures whose maps the kept examples get beside their weights while a mixing statistic is watched: every
#: mixing measure but value zeroing, which costs L·n forward passes of an n-token example
#: (``bertwatch analyze --mixing --value-zeroing`` writes it after training).
LIVE_MEASURES: tuple[str, ...] = tuple(m for m in MIXING_MEASURES if m not in ("weights", "value_zeroing"))


class LossRefused(Exception):
    """A loss-checking pass (``ProbePlan.check_loss``) stopped in probe batch ``batch``: a ``"before"``
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

    def without(self, names: Collection[str]) -> ProbePlan:
        """This plan without the statistics ``names`` (the gradient statistics, where the start pass found their
        loss refused): what :func:`plan_pass` plans without them, the maps, the reference and the riders as they
        were. Raises ValueError for a drift statistic (it decides whether the pass takes the reference)."""
        dropped = set(names) & set(self.names)
        if dropped & set(DRIFT_NAMES):
            raise ValueError(f"a plan keeps its drift statistics: {sorted(dropped & set(DRIFT_NAMES))}")
        work = tuple((m, tuple(n for n in given if n not in dropped)) for m, given in self.work)
        kept = tuple(n for n in self.names if n not in dropped)
        return replace(self, work=tuple((m, given) for m, given in work if given), names=kept)


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
        raise ValueError(f"no measurement gives {unmeasured}; add one to probe.measurements.MEASUREMENTS")
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
    decomposition fits its attention blocks (``heads.mixing.mixing_model.supports_mixing``: x + Attn(x) -> LayerNorm),
    attention rollout alone elsewhere (it needs the weights only)."""
    return LIVE_MEASURES if supports_mixing(model) else ("rollout",)


@dataclass(frozen=True)
class PassResult:
    """What a pass measured: the statistics' ``grids`` ``{name: [layers, heads]}`` (plan order, float32 numpy),
    the riders' ``summaries``, the kept ``examples`` ``(tokens, maps [L, H, n, n], segments)`` and, with
    ``ProbePlan.mixing_maps``, the same examples' maps of the other measures ``{measure: examples}`` (same tokens and
    order; maps ``[L, H, n, n]`` for ``norms``, ``[L, n, n]`` for the per-layer measures), ``health``, the
    run-health signals of the gradient pass over the whole probe set (``core.health_names``; empty without it), and
    ``references``: what this pass took for the next ones to compare with (``"drift"``: the drift reference's
    ``ReferenceTaking``; ``"outlier_dims"``: each layer's top activation dimensions), for the watched run to keep."""

    grids: dict[str, np.ndarray] = field(default_factory=dict)
    summaries: tuple[RiderOutput, ...] = ()
    examples: tuple[tuple, ...] = ()
    measure_examples: dict[str, tuple[tuple, ...]] = field(default_factory=dict)
    health: dict[str, float] = field(default_factory=dict)
    references: dict[str, Any] = field(default_factory=dict)

    def all_grids(self) -> dict[str, np.ndarray]:
        """The statistics' grids, then the riders' grids."""
        out = dict(self.grids)
        for summary in self.summaries:
            out.update(summary.grids)
        return out


class _Collected:
    """What the units of one pass add up to, on the device: per-example values, kept examples' maps by probe row.

    ``forward``: the ``"forward"`` measurements' values, kept apart (they are aggregated after the others)."""

    def __init__(self) -> None:
        self.per_example: dict[str, list[Tensor]] = defaultdict(list)
        self.forward: dict[str, list[Tensor]] = defaultdict(list)
        self.examples: dict[int, Tensor] = {}
        self.measure_examples: dict[str, dict[int, Tensor]] = defaultdict(dict)

    def add(self, values: Mapping[str, Tensor]) -> None:
        for name, value in values.items():
            self.per_example[name].append(value)


Drift = ReferenceTaking | MapsReference | ModelReference


def execute(plan: ProbePlan, context: ProbeContext) -> PassResult:
    """Run ``plan`` over the probe set of ``context`` (module doc). The model is left as it was
    (``heads.capture``); a reference the pass takes is returned (``PassResult.references``), not kept."""
    taking = None
    if plan.reference_from_model or (plan.build_reference and not context.reference.ready):
        source = context.settings.reference_model if plan.reference_from_model else None
        taking = ReferenceTaking(context.encoder, context.probe, (context.layers, context.heads), context.device,
                                 context.autocast_dtype, context.label_names, source)  # fmt: skip
    drift: Drift | None = taking if taking is not None else context.reference.current
    passes = [(m.stage, m.start(names, context, plan.needs)) for m, names in plan.work]
    collected = _Collected()
    for unit in context.units:
        _run_unit(plan, context, passes, unit, drift if (taking or plan.uses_reference) else None, collected)
    summaries = tuple(rider.finish() for rider in plan.riders)
    grids = _grids(plan, passes, collected)
    health: dict[str, Tensor] = {}
    references: dict[str, Any] = {"drift": taking} if taking is not None else {}
    for _, measurement_pass in passes:
        health.update(_called(measurement_pass, "health"))
        references.update(_called(measurement_pass, "references"))
    examples = sorted(collected.examples.items())
    measured = {m: sorted(collected.measure_examples[m].items()) for m in LIVE_MEASURES
                if m in collected.measure_examples}  # fmt: skip
    tensors = [*grids.values(), *health.values(), *(t for _, t in examples),
               *(t for rows in measured.values() for _, t in rows)]  # fmt: skip
    host = iter(_to_host(tensors))
    grids = {name: next(host).float().numpy() for name in grids}
    health_values = {name: _number(next(host)) for name in health}
    probe = context.probe
    kept = tuple((probe.tokens[row], next(host).float(), probe.segments[row]) for row, _ in examples)
    measure_examples = {m: tuple((probe.tokens[row], next(host).float(), probe.segments[row]) for row, _ in rows)
                        for m, rows in measured.items()}  # fmt: skip
    return PassResult(grids, summaries, kept, measure_examples, health_values, references)


def _number(value: Tensor) -> float:
    """A scalar read back as a Python float, NaN as ``math.nan`` itself (records of undefined signals compare equal)."""
    number = float(value)
    return number if number == number else math.nan


def _called(measurement_pass: MeasurementPass, method: str) -> dict[str, Any]:
    """What a measurement pass's optional ``method`` (``health``, ``references``) gives, empty without it."""
    values = getattr(measurement_pass, method, None)  # the protocol's optional methods: most passes have neither
    return dict(values()) if callable(values) else {}


def _to_host(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` on the host, read back from their device in one copy: their bytes laid end to end in one buffer
    (each part's start aligned to 8 bytes), copied once, then viewed back as each tensor's dtype and shape.
    Tensors the host reads for free (``heads.host.reads_free``) are returned as they are.

    Example:
        >>> a, b = torch.arange(3.0), torch.tensor([[True, False]])
        >>> [t.tolist() for t in _to_host([a, b])]
        [[0.0, 1.0, 2.0], [[True, False]]]
    """
    away = [k for k, t in enumerate(tensors) if not reads_free(t.device)]
    out = list(tensors)
    if not away:
        return out
    device = tensors[away[0]].device
    parts, spans, offset = [], [], 0
    for k in away:
        raw = tensors[k].detach().contiguous().reshape(-1).view(torch.uint8)
        pad = -raw.numel() % 8
        parts.append(raw if not pad else torch.cat([raw, torch.zeros(pad, dtype=torch.uint8, device=device)]))
        spans.append((offset, raw.numel()))
        offset += raw.numel() + pad
    flat = torch.cat(parts).cpu()
    for k, (start, size) in zip(away, spans):
        tensor = tensors[k]
        out[k] = flat[start : start + size].view(tensor.dtype).reshape(tensor.shape)
    return out


def _grids(plan: ProbePlan, passes: Sequence[tuple[str, MeasurementPass]], collected: _Collected) -> dict[str, Tensor]:
    """The pass's grids ``{name: [layers, heads]}`` in plan order, on the device: the per-example values
    aggregated, then each measurement's ``finish``."""
    values = {**collected.per_example, **collected.forward}
    grids = aggregate({n: torch.cat(v) for n, v in values.items()})
    for (_, names), (_, measurement_pass) in zip(plan.work, passes):
        grids.update(measurement_pass.finish({n: grids[n] for n in names if n in grids}))
    return {n: grids[n].detach() for n in plan.names if n in grids}


def _measure_forward(passes: Sequence[tuple[str, MeasurementPass]], batch: ProbeBatch, collected: _Collected) -> None:
    """The ``"forward"`` measurements of one unit, their values into ``collected.forward``."""
    for stage, measurement_pass in passes:
        if stage == "forward":
            for name, value in measurement_pass.measure(batch).items():
                collected.forward[name].append(value)


def _run_unit(
    plan: ProbePlan,
    context: ProbeContext,
    passes: Sequence[tuple[str, MeasurementPass]],
    unit: ProbeUnit,
    drift: Drift | None,
    collected: _Collected,
) -> None:
    """Unit ``unit`` through every stage of the plan."""
    batch = ProbeBatch(unit.batch, unit.rows, unit.inputs, unit.roles, checking=plan.check_loss)
    attn = states = None
    for stage, measurement_pass in passes:
        if stage == "before":
            try:
                with _recording(plan.needs, context) as recorded:
                    out = measurement_pass.measure(batch)
            except LossSetupError as err:
                if plan.check_loss:
                    raise LossRefused(err, unit.batch) from err
                raise
            if isinstance(out, Measured):
                attn = out.attentions if out.attentions is not None else attn
                states = out.states if out.states is not None else states
                if states is not None and recorded is not None and recorded.rows == len(batch.roles.real):
                    states = replace(states, activations=recorded)  # every row once: no forward of their own
                out = out.values
            collected.add(out)
    wanted = [k for k, row in enumerate(unit.rows) if row < plan.num_maps and row not in collected.examples]
    if plan.shared_forward or wanted:
        shared, part = replace(batch, attentions=attn, capture=states), unit
        if attn is None and not plan.shared_forward:  # only the kept rows' maps: run those rows alone
            part = unit.select(wanted)
            shared = replace(shared, rows=part.rows, inputs=part.inputs, roles=part.roles)
        _on_forward(plan, context, passes, shared, part, drift, collected)
    del attn, states
    for stage, measurement_pass in passes:
        if stage == "after":
            collected.add(measurement_pass.measure(batch))


def _recording(needs: CaptureNeeds, context: ProbeContext) -> contextlib.AbstractContextManager:
    """Hooks recording every forward call's activations (``heads.outliers.activations.record_activations``) when the
    plan's measurements read them, else nothing (yields None)."""
    return record_activations(context.encoder) if needs.activations else contextlib.nullcontext(None)


def _on_forward(
    plan: ProbePlan,
    context: ProbeContext,
    passes: Sequence[tuple[str, MeasurementPass]],
    batch: ProbeBatch,
    unit: ProbeUnit,
    drift: Drift | None,
    collected: _Collected,
) -> None:
    """The shared no-grad forward (skipped when a ``"before"`` pass gave the maps and recorded everything else
    needed: ``RecordedStates.unmet``), then the reference's maps of the same rows, the ``"forward"`` measurements,
    the riders and the kept examples."""
    needs = plan.needs
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
    if isinstance(drift, ReferenceTaking):
        batch = replace(batch, reference=drift.for_unit(unit, attn))
    elif drift is not None:
        batch = replace(batch, reference=drift.for_unit(unit))
    _measure_forward(passes, batch, collected)
    for rider in plan.riders:
        rider.consume(unit.rows, attn, roles)
    kept = [k for k, row in enumerate(unit.rows) if row < plan.num_maps and row not in collected.examples]
    if not kept:
        return
    cropped = unit.crop(attn)
    for k in kept:
        collected.examples[unit.rows[k]] = cropped[k]
    if plan.mixing_maps:
        for measure, per_row in _measure_maps(context, batch, unit, attn, kept).items():
            collected.measure_examples[measure].update(per_row)


def _measure_maps(
    context: ProbeContext, batch: ProbeBatch, unit: ProbeUnit, attn: Tensor, kept: Sequence[int]
) -> dict[str, dict[int, Tensor]]:
    """The unit's rows at places ``kept``: their maps of each of ``written_measures``, cut to each row's real tokens
    like the weights, by probe row: ``norms`` ``[L, H, n, n]``, the others ``[L, n, n]``.

    ``mixing_maps`` runs one float32 forward per example alone (no autocast: the decomposition is exact in float32),
    cut to its real tokens (the decomposition costs T² per layer; a statistic never depends on padding); rollout
    alone is composed from the shared forward's maps ``attn`` ``[rows, L, H, T, T]``.
    """
    model, real = context.encoder, batch.roles.real.bool()
    measures = written_measures(model)
    if measures == ("rollout",):
        rolled = unit.crop(rollout(attn.float(), real))
        return {"rollout": {unit.rows[k]: rolled[k] for k in kept}}
    inputs, length = context.model_inputs(batch.inputs), real.shape[1]
    out: dict[str, dict[int, Tensor]] = {m: {} for m in measures}
    for k in kept:
        end = unit.lengths[k] if unit.positions[k] is None else length
        alone = {key: v[k : k + 1, :end] if v.dim() >= 2 and v.shape[1] == length else v[k : k + 1]
                 for key, v in inputs.items()}  # fmt: skip
        keep = real[k : k + 1, :end]
        maps = mixing_maps(model, alone, keep)
        for m in measures:
            whole = maps[m][0]
            where = unit.positions[k]
            n = unit.lengths[k]
            out[m][unit.rows[k]] = (
                whole[..., :n, :n] if where is None else whole.index_select(-2, where).index_select(-1, where)
            )
    return out
