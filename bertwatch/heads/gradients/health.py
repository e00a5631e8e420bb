"""Run-health signals from the gradient pass the probe pass already runs (no forward of their own).

Mosbach et al. (2021) trace failed fine-tunes to vanishing gradients in the lower layers, with predictions stuck
on the majority class; Dodge et al. (2020) show such runs can be told apart early. The gradient pass of the
probe set (``heads.gradients.importance.gradient_stats``) has what those signals need: its loss, its outputs and, when
the encoder layers' parameters are added to its ``torch.autograd.grad`` call, their gradients. Nothing is written
into a parameter's ``.grad``.

The pure functions take tensors and give tensors (shapes in their docstrings); :class:`HealthAccumulator` adds
up one probe pass (its batches and length groups) and returns the ``run_health`` values
(``core.health_names``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from bertwatch.core.health_names import (
    LOSS_EXAMPLES,
    LOSS_MEAN,
    LOSS_STD,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PREDICTION_STD,
    PRIOR_LOSS,
    grad_norm_name,
)
from bertwatch.heads.task_heads import head_kind, problem_type, weighted_losses

__all__ = [
    "HealthAccumulator",
    "encoder_layer_parameters",
    "layer_gradient_norms",
    "loss_moments",
    "majority_share",
    "prediction_spread",
    "prior_loss",
]


def encoder_layer_parameters(model: nn.Module, layers: int) -> list[list[nn.Parameter]] | None:
    """The trainable parameters of each of the encoder's ``layers`` layers, ``[layer][parameter]``: the first
    ``nn.ModuleList`` of ``layers`` modules named ``layer`` or ``layers`` (BERT, RoBERTa, ELECTRA, DistilBERT,
    MobileBERT, ModernBERT, ...). None where there is none (ALBERT shares one layer's weights among all) or a layer
    has no trainable parameter."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == layers and name.split(".")[-1] in ("layer", "layers"):
            params = [[p for p in layer.parameters() if p.requires_grad] for layer in module]
            return params if all(params) else None
    return None


def layer_gradient_norms(sums: Sequence[Sequence[torch.Tensor]], weight: torch.Tensor | float) -> torch.Tensor:
    """‖Σ_g W_g ∂L_g/∂θ_l / Σ_g W_g‖₂ per layer, ``[layers]`` float64 on the gradients' device: ``sums[l]`` holds
    layer l's accumulated weighted gradients, one tensor per parameter (any shapes), ``weight`` = Σ_g W_g (NaN
    where it is not positive)."""
    norms = torch.stack([
        torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in layer]).square().sum().sqrt()
        for layer in sums
    ])  # fmt: skip
    if not isinstance(weight, torch.Tensor):  # made on the device, not copied there
        weight = torch.full((), float(weight), dtype=torch.float64, device=norms.device)
    return torch.where(weight > 0, norms / weight, torch.nan)


def _class_counts(values: torch.Tensor, keep: torch.Tensor, classes: int) -> torch.Tensor:
    """How many kept entries of ``values`` ``[n]`` (class indices) fall in each class: ``[classes]`` float64,
    without reading a value back (``bincount`` would, for its length)."""
    hits = (values.long().reshape(-1, 1) == torch.arange(classes, device=values.device)) & keep.reshape(-1, 1)
    return hits.sum(0, dtype=torch.float64)


def majority_share(predicted: torch.Tensor, keep: torch.Tensor, classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The share of the kept examples predicted as the most frequent predicted class, and that count: ``predicted``
    ``[n]`` class indices below ``classes``, ``keep`` ``[n]`` bool (float64 scalars; NaN and 0 for none kept)."""
    count = _class_counts(predicted, keep, classes).amax() if classes else keep.new_zeros((), dtype=torch.float64)
    kept = keep.sum(dtype=torch.float64)
    return torch.where(kept > 0, count / kept, torch.nan), count


def _masked_moments(values: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, population variance) of the kept entries of ``values`` ``[n]``, float64 (NaN for none kept)."""
    keep = keep.reshape(-1)
    x = torch.where(keep, values.double().reshape(-1), 0.0)
    n = keep.sum(dtype=torch.float64)
    mean = x.sum() / n
    variance = torch.where(keep, (x - mean) ** 2, 0.0).sum() / n
    return torch.where(n > 0, mean, torch.nan), torch.where(n > 0, variance, torch.nan)


def prediction_spread(predictions: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The population standard deviation of the kept regression predictions ``[n]`` (NaN for none)."""
    return _masked_moments(predictions, keep)[1].sqrt()


def prior_loss(labels: torch.Tensor, keep: torch.Tensor, regression: bool, classes: int) -> torch.Tensor:
    """The loss of the best constant prediction on the kept ``labels`` ``[n]``: the entropy (nats) of the class
    frequencies of integer labels below ``classes`` (cross-entropy), the population variance of regression targets
    (squared error); NaN for none kept."""
    if regression:
        return _masked_moments(labels, keep)[1]
    counts = _class_counts(labels, keep, classes)
    p = counts / counts.sum()
    return torch.where(counts.sum() > 0, -torch.special.xlogy(p, p).sum(), torch.nan)


def loss_moments(losses: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σ w ℓ / Σ w, std of ℓ over the examples with w > 0)`` of per-example losses ``ℓ`` and weights ``w``
    ``[n]`` (the mean is the loss as the model weighs it; the spread is population std), float64; NaN for no
    weight."""
    labelled = weights > 0
    total = weights.double().sum()
    mean = torch.where(labelled, losses.double() * weights.double(), 0.0).sum() / total
    _, variance = _masked_moments(losses, labelled)
    ok = (total > 0) & labelled.any()
    return torch.where(ok, mean, torch.nan), torch.where(ok, variance.sqrt(), torch.nan)


class HealthAccumulator:
    """One probe pass's run-health signals, added up over its batches and length groups.

    ``parameters``: each encoder layer's parameters whose gradients the pass takes (None: no gradient norms);
    the pass calls :meth:`add_gradients` with each group's ``∂(Σ_b w_b ℓ_b)/∂θ`` and its weight ``Σ_b w_b``,
    :meth:`add_outputs` with its outputs, and :meth:`values` gives the ``run_health`` values. Everything stays on
    the model's device until :meth:`values` (or the caller of :meth:`device_values`) reads it back once.
    """

    def __init__(self, model: nn.Module, layers: int, parameters: list[list[nn.Parameter]] | None) -> None:
        self.kind = head_kind(model)
        self.model = model
        self.layers = layers
        self.parameters = parameters
        self.device = next(model.parameters()).device
        self.sums: list[list[torch.Tensor]] | None = None
        self.weight: torch.Tensor | float = 0.0
        self.losses: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []
        self.classes = 0  # the classifier's outputs, for the class counts
        # (values, kept) of each group: predicted classes, regression predictions, labels
        self.predicted: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.regression: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.labels: list[tuple[torch.Tensor, torch.Tensor]] = []

    @classmethod
    def for_model(cls, model: nn.Module, layers: int, gradients: bool = True) -> HealthAccumulator:
        """An accumulator for ``model`` (``layers`` layers), taking gradient norms when ``gradients``."""
        return cls(model, layers, encoder_layer_parameters(model, layers) if gradients else None)

    @property
    def flat_parameters(self) -> list[nn.Parameter]:
        """The parameters to add to the pass's ``torch.autograd.grad`` call, layer after layer."""
        return [p for layer in self.parameters or () for p in layer]

    def add_gradients(
        self, grads: Sequence[torch.Tensor | None], weight: torch.Tensor | float, scale: torch.Tensor | float = 1.0
    ) -> None:
        """Add one group's gradients (``flat_parameters`` order) times ``scale`` (a number or a scalar tensor: the
        factor that makes them those of ``Σ_b w_b ℓ_b``, applied as they are added, in one pass) and its weight
        ``Σ_b w_b`` (a number or a scalar tensor, left on its device)."""
        if self.parameters is None:
            return
        params = self.flat_parameters
        if self.sums is None:
            self.sums = [[] for _ in self.parameters]
            layer_of = [l for l, layer in enumerate(self.parameters) for _ in layer]
            for l, g, p in zip(layer_of, grads, params):
                self.sums[l].append(
                    torch.zeros_like(p, dtype=torch.float32) if g is None else g.detach().float() * scale
                )
        else:
            for total, g in zip((t for layer in self.sums for t in layer), grads):
                if g is None:
                    continue
                if isinstance(scale, torch.Tensor):
                    total.addcmul_(g.detach(), scale)
                else:
                    total.add_(g.detach(), alpha=float(scale))
        self.weight = self.weight + (weight.detach().double() if isinstance(weight, torch.Tensor) else float(weight))

    def add_outputs(
        self, outputs: Any, batch: Mapping[str, torch.Tensor], losses: torch.Tensor, weights: torch.Tensor
    ) -> None:
        """Add one group's per-example ``losses`` and ``weights`` ``[rows]`` and its predictions (single-label
        classification: the argmax class of each labelled example; regression: the first output)."""
        self.add_losses(losses, weights)
        if self.kind != "sequence-classification":
            return
        logits = outputs.logits if hasattr(outputs, "logits") else outputs[0]
        labels = batch.get("labels")
        problem = problem_type(self.model, labels)
        keep = weights.detach().reshape(-1) > 0
        if problem == "single_label_classification":
            self.classes = int(logits.shape[-1])
            self.predicted.append((logits.detach().argmax(-1).reshape(-1), keep))
        elif problem == "regression":
            self.regression.append((logits.detach().float().reshape(logits.shape[0], -1)[:, 0], keep))
        if problem in ("single_label_classification", "regression") and labels is not None:
            self.labels.append((labels.detach().reshape(logits.shape[0], -1)[:, 0], keep))

    def add_losses(self, losses: torch.Tensor, weights: torch.Tensor) -> None:
        """Add per-example ``losses`` and ``weights`` ``[rows]`` alone (a loss that runs the model itself)."""
        self.losses.append(losses.detach().float().reshape(-1))
        self.weights.append(weights.detach().float().reshape(-1).to(self.losses[-1].device))

    def add_model_outputs(self, outputs: Any, batch: Mapping[str, torch.Tensor]) -> None:
        """:meth:`add_outputs` with the model's own per-example losses and weights (``task_heads.weighted_losses``)."""
        labels = batch.get("labels")
        problem = problem_type(self.model, labels) if self.kind == "sequence-classification" else None
        with torch.no_grad():
            losses, weights = weighted_losses(outputs, batch, problem, self.kind)
        self.add_outputs(outputs, batch, losses, weights)

    def device_values(self) -> dict[str, torch.Tensor]:
        """:meth:`values` as float64 scalars on the model's device, read back nowhere (the probe pass copies them to
        the host with everything else it measured, at once)."""
        nan = torch.full((), math.nan, dtype=torch.float64, device=self.device)
        out: dict[str, torch.Tensor] = {}
        norms = None
        if self.sums is not None:
            norms = layer_gradient_norms(self.sums, self.weight)
        for layer in range(self.layers):
            out[grad_norm_name(layer)] = norms[layer] if norms is not None else nan
        predicted, kept = _joined(self.predicted, torch.long, self.device)
        share, count = majority_share(predicted, kept, self.classes)
        out[PREDICTION_SHARE], out[PREDICTION_COUNT] = share, count
        out[PREDICTED] = kept.sum(dtype=torch.float64)
        out[PREDICTION_STD] = prediction_spread(*_joined(self.regression, torch.float32, self.device))
        if self.labels:
            regression = bool(self.regression)
            labels, kept = _joined(self.labels, torch.float32 if regression else torch.long, self.device)
            out[PRIOR_LOSS] = prior_loss(labels, kept, regression, self.classes)
        else:
            out[PRIOR_LOSS] = nan
        if self.losses:
            weights = torch.cat(self.weights)
            out[LOSS_MEAN], out[LOSS_STD] = loss_moments(torch.cat(self.losses), weights)
            out[LOSS_EXAMPLES] = (weights > 0).sum(dtype=torch.float64)
        else:
            out[LOSS_MEAN] = out[LOSS_STD] = nan
            out[LOSS_EXAMPLES] = torch.zeros((), dtype=torch.float64, device=self.device)
        return {name: value.to(torch.float64) for name, value in out.items()}

    def values(self) -> dict[str, float]:
        """The pass's ``run_health`` values (``core.health_names``; NaN where a signal is not defined), read back
        from the device in one copy."""
        values = self.device_values()
        host = torch.stack(list(values.values())).cpu().tolist() if values else []
        return dict(zip(values, (v if v == v else math.nan for v in map(float, host))))  # NaN: math.nan itself


def _joined(
    parts: Sequence[tuple[torch.Tensor, torch.Tensor]], dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The groups' ``(values, kept)`` concatenated (empty ones on ``device`` for none)."""
    if not parts:
        return torch.zeros(0, dtype=dtype, device=device), torch.zeros(0, dtype=torch.bool, device=device)
    return torch.cat([v for v, _ in parts]), torch.cat([k for _, k in parts])
