"""The statistic families of the probe pass, each one pluggable ``Measurement``.

A measurement names the statistics it gives, says what the shared no-grad forward must record for them
(``CaptureNeeds``) and when its own work runs in a unit of probe rows (``stage``; ``probe.probe_units``), and
measures one unit at a time, reading nothing back to the host (the pass copies its results once, at its end):
per example ``{name: [batch, layers, heads]}`` (``heads.aggregate`` then averages examples into ``[layers, heads]``
grids, and the measurement may finish them). Adding a family of statistics is one class and one entry in
``MEASUREMENTS``; the watched run plans and runs every pass from that tuple (``probe.probe_pass``).

"Measurement" and not "group": a group is a menu heading of the plugin (``core.stat_names.STAT_GROUPS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

from bertwatch.core.stat_names import OUTLIER_FFN_NAMES
from bertwatch.core.warnings import SetupError
from bertwatch.heads.gradients.health import HealthAccumulator
from bertwatch.heads.gradients.importance import (
    GRADIENT_NAMES,
    IG_NAME,
    gradient_stats,
    integrated_gradients,
    normalize_by_layer,
)
from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES, compute_stats
from bertwatch.heads.mixing.mixing_model import (
    MIXING_NAMES,
    BlockRecorder,
    block_weights,
    mixing_stats,
    supports_mixing,
)
from bertwatch.heads.norms.norm_based import NORM_NAMES, head_factors, norm_stats, supports_norms
from bertwatch.heads.outliers.activations import OUTLIER_NAMES, OutlierAccumulator, RecordedActivations, ffn_outputs
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.sharding import is_sharded
from bertwatch.heads.stability.spectral_norms import (
    LOGIT_NAMES,
    QK_NAME,
    STABILITY_NAMES,
    head_qk_spectral_norms,
    supports_qk_spectral_norm,
)

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.heads.capture import Capture
    from bertwatch.probe.probe_context import ProbeContext

__all__ = [
    "CaptureNeeds",
    "MEASUREMENTS",
    "Measured",
    "Measurement",
    "MeasurementPass",
    "ProbeBatch",
    "RecordedStates",
    "Stage",
    "measurement_of",
]

#: When a measurement's work runs in a unit of probe rows: ``"before"`` the shared forward (its own passes, whose maps
#: may spare the shared forward: ``Measured.attentions``), ``"forward"`` on the shared forward's recording, or
#: ``"after"`` it, once its tensors are freed (its own passes).
Stage = Literal["before", "forward", "after"]


@dataclass(frozen=True)
class CaptureNeeds:
    """What the shared no-grad forward of a unit must record; the union of the due measurements' needs.

    ``maps``: the attention probabilities (``ProbeBatch.attentions``); ``values``: each layer's value states and
    each head's context (``ProbeBatch.capture.values`` / ``.contexts``); ``hidden_states``: the encoder's hidden
    states (``ProbeBatch.outputs.hidden_states``, layer inputs and the last output); ``logits``: each head's largest
    pre-softmax score and their spread over real pairs (``ProbeBatch.capture.logit_summary``); ``activations``: each
    forward call's token ids and each layer's feed-forward output and output (``ProbeBatch.activations``,
    ``heads.outliers.activations.record_activations``; the gradient pass records them too); ``blocks``: each
    attention block's input and attention output (a gradient pass's ``RecordedStates.blocks``; the shared forward
    meets it with the hidden states, the layer inputs). A new need is one boolean field here and its line in
    :meth:`capture_arguments` or :meth:`forward_arguments`.

    Example:
        >>> (CaptureNeeds(maps=True) | CaptureNeeds(values=True)).capture_arguments()
        {'record_values': True, 'record_logits': False}
        >>> CaptureNeeds().any
        False
    """

    maps: bool = False
    values: bool = False
    hidden_states: bool = False
    logits: bool = False
    blocks: bool = False
    activations: bool = False

    def __or__(self, other: CaptureNeeds) -> CaptureNeeds:
        return CaptureNeeds(
            **{f.name: getattr(self, f.name) or getattr(other, f.name) for f in dataclasses.fields(self)}
        )

    @property
    def any(self) -> bool:
        """Whether anything is to be recorded at all."""
        return any(getattr(self, f.name) for f in dataclasses.fields(self))

    @property
    def beyond_maps(self) -> bool:
        """Whether the maps alone (which a ``"before"`` measurement's own pass may hand over) are not enough."""
        return dataclasses.replace(self, maps=False).any

    def capture_arguments(self) -> dict[str, bool]:
        """The keyword arguments of ``heads.capture.capture`` that record these needs."""
        return {"record_values": self.values, "record_logits": self.logits}

    def forward_arguments(self) -> dict[str, bool]:
        """The extra keyword arguments of the encoder's forward call."""
        wanted = self.hidden_states or self.blocks or self.activations  # activations: for a family without hooks
        return {"output_hidden_states": True} if wanted else {}


@dataclass(frozen=True)
class ProbeBatch:
    """One unit of probe rows as the measurements see it (``probe.probe_units``), on the model's device.

    ``index``: the probe batch its rows are from; ``rows``: their probe rows (over the whole probe set); ``inputs``:
    the collated rows (label fields included); ``roles``: their token roles ``[rows, T]``; ``checking``: the pass is
    the run's loss check (its measurements may read values back to refuse the loss). On the ``"forward"`` stage
    also ``attentions`` ``[rows, layers, heads, T, T]``, the ``capture`` that recorded them (when they came from a
    ``"before"`` measurement's pass, its ``RecordedStates``), the encoder's ``outputs`` (None then too) and ``reference``: the
    drift reference's maps of the same rows, padded like ``attentions`` (zero at pad positions), when drift is
    measured;
    ``activations``: the forward calls' activations (``heads.outliers.activations.RecordedActivations``) when the shared
    forward or the gradient pass recorded them (``CaptureNeeds.activations``).
    """

    index: int
    rows: tuple[int, ...]
    inputs: Mapping[str, Tensor]
    roles: TokenRoles
    attentions: Tensor | None = None
    capture: Capture | RecordedStates | None = None
    outputs: Any = None
    reference: Tensor | None = None
    activations: RecordedActivations | None = None
    checking: bool = False


@dataclass(frozen=True)
class RecordedStates:
    """Each layer's value states ``[rows, layers, heads, T, d_head]``, the heads' contexts and the logit summary
    ``{"max_logit", "logit_std": [rows, layers, heads]}``, as a capture records them (``Capture.values``,
    ``.contexts``, ``.logit_summary``), and the attention blocks' inputs and outputs (``blocks``:
    ``heads.mixing.mixing_model.BlockRecorder``) and every layer's activations of the pass's forward calls
    (``activations``, ``heads.outliers.activations.RecordedActivations``); None (empty) where the pass could not record
    them exactly."""

    values: Tensor | None
    contexts: Tensor | None
    logit_summary: Mapping[str, Tensor] = dataclasses.field(default_factory=dict)
    blocks: BlockRecorder | None = None
    activations: RecordedActivations | None = None

    def unmet(self, needs: CaptureNeeds) -> CaptureNeeds:
        """What of ``needs`` these states do not hold (the maps come with them from the same pass)."""
        return dataclasses.replace(
            needs,
            values=needs.values and self.contexts is None,
            logits=needs.logits and not self.logit_summary,
            blocks=needs.blocks and (self.blocks is None or not self.blocks.complete),
            activations=needs.activations and (self.activations is None or not self.activations.complete),
        )


@dataclass(frozen=True)
class Measured:
    """What a ``"before"`` measurement may return instead of a plain mapping: its per-example ``values``, the
    maps of its own forward ``[rows, layers, heads, T, T]``, which then stand for the shared forward's, and that
    forward's recorded ``states``, which then spare the shared forward for the value-based statistics too."""

    values: Mapping[str, Tensor]
    attentions: Tensor | None = None
    states: RecordedStates | None = None


@runtime_checkable
class MeasurementPass(Protocol):
    """One measurement's work over one probe pass (made by :meth:`Measurement.start`)."""

    def measure(self, batch: ProbeBatch) -> Mapping[str, Tensor] | Measured:
        """Per example ``{name: [rows, layers, heads]}`` of one unit (NaN where a statistic is undefined), on the
        device."""
        ...

    def finish(self, grids: dict[str, Tensor]) -> dict[str, Tensor]:
        """The pass's ``{name: [layers, heads]}`` grids as they are to be logged (a grid from weights alone may be
        added here)."""
        ...

    # A pass may also have ``health() -> {name: scalar tensor}``: the run-health signals it measured over the whole
    # probe set (``core.health_names``; the gradient statistics' pass has it), and ``references() -> {name: value}``:
    # what it took for later passes to compare with (the outlier statistics' top dimensions). ``probe_pass.execute``
    # reads them when there.


@runtime_checkable
class Measurement(Protocol):
    """A family of per-head statistics measured together on the probe pass (module doc)."""

    names: tuple[str, ...]
    stage: Stage

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        """What the shared forward must record to measure ``names`` (a subset of ``self.names``)."""
        ...

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        """Begin one pass measuring ``names`` (once per pass: what every batch shares, such as weights).

        ``shared``: what the pass's shared forward is to record (``ProbePlan.needs``); a ``"before"`` measurement
        whose own forward can record it too spares that forward (``Measured.states``)."""
        ...


@dataclass(frozen=True)
class _Pass:
    """A ``MeasurementPass`` from a per-batch function and an optional finishing step."""

    measure_batch: Callable[[ProbeBatch], Mapping[str, Tensor] | Measured]
    finish_grids: Callable[[dict[str, Tensor]], dict[str, Tensor]] | None = None
    health_values: Callable[[], dict[str, Tensor]] | None = None
    kept: Callable[[], dict[str, Any]] | None = None

    def measure(self, batch: ProbeBatch) -> Mapping[str, Tensor] | Measured:
        return self.measure_batch(batch)

    def finish(self, grids: dict[str, Tensor]) -> dict[str, Tensor]:
        return grids if self.finish_grids is None else self.finish_grids(grids)

    def health(self) -> dict[str, Tensor]:
        """The run-health signals of the pass (``core.health_names``) as scalars on the device, empty when it
        measures none."""
        return {} if self.health_values is None else self.health_values()

    def references(self) -> dict[str, Any]:
        """What the pass took for the next passes to compare with (``PassResult.references``), empty for none."""
        return {} if self.kept is None else self.kept()


class MapStatistics:
    """The statistics of the maps alone and the drift from the reference maps (``heads.maps.stats.compute_stats``)."""

    names = STAT_NAMES + DRIFT_NAMES
    stage: Stage = "forward"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds(maps=True)

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        compat_length = context.settings.compat_length

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            return compute_stats(batch.attentions, batch.roles, names, batch.reference, compat_length=compat_length)

        return _Pass(measure)


class NormStatistics:
    """Kobayashi et al.'s norm-based statistics (``heads.norms.norm_based``): maps, value states and contexts."""

    names = NORM_NAMES
    stage: Stage = "forward"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds(maps=True, values=True)

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        factors = head_factors(context.encoder)  # once a pass: the weights do not change within it

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            cap = batch.capture
            return norm_stats(batch.attentions, cap.values, None, batch.roles, names, cap.contexts, factors=factors)

        return _Pass(measure)


class GradientStatistics:
    """Michel's head importance and Clark's attention gradients (``heads.gradients.importance.gradient_stats``), from
    one gated forward and backward per unit whose maps spare the shared forward; the same pass gives the run-health
    signals (``heads.gradients.health``: the encoder layers' gradient norms unless ``layer_gradients`` is off, the
    predictions, the probe loss), read by the pass's ``health()``."""

    names = GRADIENT_NAMES
    stage: Stage = "before"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds()

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        _require_labels(context)
        model, loss = context.encoder, context.loss.arguments()
        blocks = shared.blocks and supports_mixing(model)  # 2·rows·layers·T·d numbers per unit
        # a sharded model's parameters are flat shards of other layers' weights: no per-layer norms there
        layer_gradients = context.settings.layer_gradients and not is_sharded(model)
        health = HealthAccumulator.for_model(model, context.layers, layer_gradients)

        def measure(batch: ProbeBatch) -> Measured:
            with context.autocast():
                grads, attn, *states = gradient_stats(
                    model, batch.inputs, batch.roles, return_states=True, record_blocks=blocks,
                    record_logits=shared.logits, health=health, split=False, check_loss=batch.checking, **loss,
                )  # fmt: skip
            return Measured({name: grads[name] for name in names}, attn, RecordedStates(*states))

        def finish(grids: dict[str, Tensor]) -> dict[str, Tensor]:
            if context.settings.normalize_importance and "head_importance" in grids:
                grids = {**grids, "head_importance": normalize_by_layer(grids["head_importance"])}
            return grids

        return _Pass(measure, finish, health.device_values)


class IntegratedGradientsStatistic:
    """Integrated-gradients head attribution (captum), after the shared forward's tensors are freed."""

    names = (IG_NAME,)
    stage: Stage = "after"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds()

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        _require_labels(context)
        model, loss, steps = context.encoder, context.loss.arguments(), context.settings.ig_steps

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            with context.autocast():
                return {IG_NAME: integrated_gradients(model, batch.inputs, steps=steps, **loss)}

        return _Pass(measure)


class MixingStatistics:
    """Context mixing beyond raw attention (``heads.mixing.mixing_model``): the mixing ratio and ALTI's [CLS]/[SEP]
    shares from each layer's residual- and LayerNorm-aware decomposition (value states and each block's input and
    attention output, which the gradient pass records: no forward of their own), and attention rollout's from the
    maps alone."""

    names = MIXING_NAMES
    stage: Stage = "forward"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        blocks = _needs_blocks(names)
        return CaptureNeeds(maps=True, values=blocks, blocks=blocks)

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        weights = block_weights(context.encoder) if _needs_blocks(names) else None

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            values = residuals = mixed = contexts = None
            if weights is not None:
                values = batch.capture.values
                recorder = batch.capture.blocks if isinstance(batch.capture, RecordedStates) else None
                if recorder is not None and recorder.complete:
                    residuals, mixed = recorder.residuals, recorder.mixed
                else:  # the shared forward: each layer's input [rows, L, T, d] and the heads' contexts
                    residuals, contexts = torch.stack(batch.outputs.hidden_states[:-1], 1), batch.capture.contexts
            return mixing_stats(batch.attentions, values, residuals, weights, batch.roles, names, mixed, contexts)

        return _Pass(measure)


def _needs_blocks(names: Collection[str]) -> bool:
    """Whether any of ``names`` decomposes the attention blocks (all but attention rollout's)."""
    return any("rollout" not in n for n in names)


class StabilityStatistics:
    """Attention logit growth and Zhai et al.'s spectral norm (``heads.stability.spectral_norms``): each head's largest
    pre-softmax score and its spread, reduced inside the shared forward's capture, and the spectral norm of
    W_Q W_Kᵀ from the weights alone, once per pass."""

    names = STABILITY_NAMES
    stage: Stage = "forward"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds(logits=any(n in LOGIT_NAMES for n in names))

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        logit_names = tuple(n for n in names if n in LOGIT_NAMES)

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            summary = batch.capture.logit_summary if logit_names else {}
            return {n: summary[n] for n in logit_names}

        def finish(grids: dict[str, Tensor]) -> dict[str, Tensor]:
            if QK_NAME in names:
                grids = {**grids, QK_NAME: head_qk_spectral_norms(context.encoder)}
            return grids

        return _Pass(measure, finish)


class OutlierStatistics:
    """Activation outliers per layer (``heads.outliers.activations``): each layer's feed-forward output and output (the residual
    stream) on the probe set's real tokens, summed over the pass in float64 and written as ``[layers, 1]`` grids in
    ``finish``. The activations come from hooks on the forward calls of the gradient pass when it runs (no forward of
    their own), else of the shared forward (``CaptureNeeds.activations``), each call's token roles from its own token
    ids; a family whose layers bertwatch does not know gets the residual stream from the shared forward's hidden
    states (and no feed-forward statistics: ``supported_stats``). The first pass's top dimensions come back in its
    ``references()`` (``"outlier_dims"``, on the device), which the watched run hands the later passes as
    ``ProbeContext.outlier_dims`` for their ``outlier_dim_overlap``."""

    names = OUTLIER_NAMES
    stage: Stage = "forward"

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds(activations=True)

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        found = OutlierAccumulator(context.layers, names, context.tokenizer)
        taken: dict[str, Any] = {}

        def measure(batch: ProbeBatch) -> Mapping[str, Tensor]:
            if batch.activations is not None and batch.activations.complete:
                found.add_calls(batch.activations, batch.roles)
            else:  # a family whose layers bertwatch does not hook: the shared forward's hidden states
                found.add_hidden(batch.outputs.hidden_states, batch.roles)
            return {}

        def finish(grids: dict[str, Tensor]) -> dict[str, Tensor]:
            reference = context.outlier_dims
            measured, dims = found.grids(reference)
            if dims is not None and reference is None:
                taken["outlier_dims"] = dims
            return {**grids, **measured}

        return _Pass(measure, finish, kept=lambda: dict(taken))


def _require_labels(context: ProbeContext) -> None:
    if not context.probe.has_labels and context.settings.loss_fn is None:
        raise RuntimeError("gradient statistics need labels in every probe example")  # refused at setup


#: Every measurement of the probe pass, in the order their work runs within a stage.
MEASUREMENTS: tuple[Measurement, ...] = (
    GradientStatistics(),
    NormStatistics(),
    MapStatistics(),
    MixingStatistics(),
    StabilityStatistics(),
    OutlierStatistics(),
    IntegratedGradientsStatistic(),
)


def measurement_of(name: str, measurements: Sequence[Measurement] = MEASUREMENTS) -> Measurement:
    """The measurement that gives statistic ``name`` (``KeyError`` for a name none gives)."""
    for measurement in measurements:
        if name in measurement.names:
            return measurement
    raise KeyError(f"no bertwatch measurement gives {name!r}")


def supported_stats(names: frozenset[str], requested: bool, encoder: Any, owner: str) -> frozenset[str]:
    """``names`` less the statistics this model family cannot give (norm-based masses without a known attention
    block, ``qk_spectral_norm`` without head-sized query/key weights, the block-based mixing measures without
    x + Attn(x) -> LayerNorm, the feed-forward outlier statistics without a known feed-forward output; rollout and
    the residual stream's outlier statistics work on every family). Dropped quietly from a callback's defaults; when
    the user ``requested`` them by name, ``SetupError`` from ``owner`` saying why."""
    norms = names & set(NORM_NAMES)
    if norms and not supports_norms(encoder):
        if requested:
            raise SetupError(f"{owner}: {sorted(norms)} are not available for this model family")
        names = names - norms
    if QK_NAME in names and not supports_qk_spectral_norm(encoder):
        if requested:
            raise SetupError(f"{owner}: {QK_NAME!r} is not available for this model family")
        names = names - {QK_NAME}
    ffn = names & set(OUTLIER_FFN_NAMES)
    if ffn and ffn_outputs(encoder) is None:
        if requested:
            raise SetupError(f"{owner}: {sorted(ffn)}: bertwatch does not know this family's feed-forward output")
        names = names - ffn
    mixing = {n for n in names & set(MIXING_NAMES) if "rollout" not in n}
    if mixing and not supports_mixing(encoder):
        if requested:
            try:
                block_weights(encoder)
            except ValueError as err:
                raise SetupError(f"{owner}: {sorted(mixing)}: {err}") from err
        names = names - mixing
    return names
