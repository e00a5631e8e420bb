"""Run-health signals from the gradient pass the probe pass already runs (no forward of their own).

Mosbach et al. (2021) trace failed fine-tunes to vanishing gradients in the lower layers, with predictions stuck
on the majority class; Dodge et al. (2020) show such runs can be told apart early. The gradient pass of the
probe set (``heads.importance.gradient_stats``) has what those signals need: its loss, its outputs and, when the
encoder layers' parameters are added to its ``torch.autograd.grad`` call, their gradients. Nothing is written
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


def layer_gradient_norms(sums: Sequence[Sequence[torch.Tensor]], weight: float) -> torch.Tensor:
    """‖Σ_g W_g ∂L_g/∂θ_l / Σ_g W_g‖₂ per layer, ``[layers]`` float64: ``sums[l]`` holds layer l's accumulated
    weighted gradients, one tensor per parameter (any shapes), ``weight`` = Σ_g W_g."""
    norms = [math.sqrt(sum(float(g.double().pow(2).sum()) for g in layer)) for layer in sums]
    return torch.tensor(norms, dtype=torch.float64) / weight


def majority_share(predicted: torch.Tensor) -> tuple[float, int]:
    """The share of examples predicted as the most frequent predicted class and that count: ``predicted`` ``[n]``
    class indices (``n`` > 0; NaN and 0 for none)."""
    if predicted.numel() == 0:
        return math.nan, 0
    count = int(torch.bincount(predicted.long().reshape(-1)).max())
    return count / predicted.numel(), count


def prediction_spread(predictions: torch.Tensor) -> float:
    """The population standard deviation of regression predictions ``[n]`` (NaN for none)."""
    if predictions.numel() == 0:
        return math.nan
    return float(predictions.double().std(unbiased=False))


def prior_loss(labels: torch.Tensor, regression: bool) -> float:
    """The loss of the best constant prediction on ``labels`` ``[n]``: the entropy (nats) of the class frequencies
    of integer labels (cross-entropy), the population variance of regression targets (squared error); NaN for
    none."""
    if labels.numel() == 0:
        return math.nan
    if regression:
        return float(labels.double().var(unbiased=False))
    p = torch.bincount(labels.long().reshape(-1)).double()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


def loss_moments(losses: torch.Tensor, weights: torch.Tensor) -> tuple[float, float]:
    """``(Σ w ℓ / Σ w, std of ℓ over the examples with w > 0)`` of per-example losses ``ℓ`` and weights ``w``
    ``[n]`` (the mean is the loss as the model weighs it; the spread is population std); NaN for no weight."""
    labelled = weights > 0
    total = float(weights.double().sum())
    if total <= 0 or not bool(labelled.any()):
        return math.nan, math.nan
    mean = float((losses.double() * weights.double()).sum()) / total
    return mean, float(losses.double()[labelled].std(unbiased=False))


class HealthAccumulator:
    """One probe pass's run-health signals, added up over its batches and length groups.

    ``parameters``: each encoder layer's parameters whose gradients the pass takes (None: no gradient norms);
    the pass calls :meth:`add_gradients` with each group's ``∂(Σ_b w_b ℓ_b)/∂θ`` and its weight ``Σ_b w_b``,
    :meth:`add_outputs` with its outputs, and :meth:`values` gives the ``run_health`` values.
    """

    def __init__(self, model: nn.Module, layers: int, parameters: list[list[nn.Parameter]] | None) -> None:
        self.kind = head_kind(model)
        self.model = model
        self.layers = layers
        self.parameters = parameters
        self.sums: list[list[torch.Tensor]] | None = None
        self.weight = 0.0
        self.losses: list[torch.Tensor] = []
        self.weights: list[torch.Tensor] = []
        self.classes: list[torch.Tensor] = []
        self.regression: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []

    @classmethod
    def for_model(cls, model: nn.Module, layers: int, gradients: bool = True) -> HealthAccumulator:
        """An accumulator for ``model`` (``layers`` layers), taking gradient norms when ``gradients``."""
        return cls(model, layers, encoder_layer_parameters(model, layers) if gradients else None)

    @property
    def flat_parameters(self) -> list[nn.Parameter]:
        """The parameters to add to the pass's ``torch.autograd.grad`` call, layer after layer."""
        return [p for layer in self.parameters or () for p in layer]

    def add_gradients(self, grads: Sequence[torch.Tensor], weight: float) -> None:
        """Add one group's gradients of ``Σ_b w_b ℓ_b`` (``flat_parameters`` order) and its weight ``Σ_b w_b``."""
        if self.parameters is None:
            return
        params = self.flat_parameters
        flat = [
            torch.zeros_like(p, dtype=torch.float32) if g is None else g.detach().float() for g, p in zip(grads, params)
        ]
        if self.sums is None:
            self.sums = [[] for _ in self.parameters]
            layer_of = [l for l, layer in enumerate(self.parameters) for _ in layer]
            for l, g in zip(layer_of, flat):
                self.sums[l].append(g.clone())
        else:
            for total, g in zip((t for layer in self.sums for t in layer), flat):
                total += g
        self.weight += float(weight)

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
        keep = (weights > 0).cpu()
        if problem == "single_label_classification":
            self.classes.append(logits.detach().argmax(-1).cpu()[keep])
        elif problem == "regression":
            self.regression.append(logits.detach().float().reshape(logits.shape[0], -1)[:, 0].cpu()[keep])
        if problem in ("single_label_classification", "regression") and labels is not None:
            self.labels.append(labels.detach().cpu().reshape(logits.shape[0], -1)[:, 0][keep])

    def add_losses(self, losses: torch.Tensor, weights: torch.Tensor) -> None:
        """Add per-example ``losses`` and ``weights`` ``[rows]`` alone (a loss that runs the model itself)."""
        self.losses.append(losses.detach().float().cpu().reshape(-1))
        self.weights.append(weights.detach().float().cpu().reshape(-1))

    def add_model_outputs(self, outputs: Any, batch: Mapping[str, torch.Tensor]) -> None:
        """:meth:`add_outputs` with the model's own per-example losses and weights (``task_heads.weighted_losses``)."""
        labels = batch.get("labels")
        problem = problem_type(self.model, labels) if self.kind == "sequence-classification" else None
        with torch.no_grad():
            losses, weights = weighted_losses(outputs, batch, problem, self.kind)
        self.add_outputs(outputs, batch, losses, weights)

    def values(self) -> dict[str, float]:
        """The pass's ``run_health`` values (``core.health_names``; NaN where a signal is not defined)."""
        out: dict[str, float] = {}
        norms = None
        if self.sums is not None and self.weight > 0:
            norms = layer_gradient_norms(self.sums, self.weight)
        for layer in range(self.layers):
            out[grad_norm_name(layer)] = float(norms[layer]) if norms is not None else math.nan
        classes = torch.cat(self.classes) if self.classes else torch.zeros(0, dtype=torch.long)
        share, count = majority_share(classes)
        out[PREDICTION_SHARE], out[PREDICTION_COUNT], out[PREDICTED] = share, float(count), float(classes.numel())
        out[PREDICTION_STD] = prediction_spread(torch.cat(self.regression)) if self.regression else math.nan
        out[PRIOR_LOSS] = prior_loss(torch.cat(self.labels), bool(self.regression)) if self.labels else math.nan
        if self.losses:
            weights = torch.cat(self.weights)
            out[LOSS_MEAN], out[LOSS_STD] = loss_moments(torch.cat(self.losses), weights)
            out[LOSS_EXAMPLES] = float((weights > 0).sum())
        else:
            out[LOSS_MEAN] = out[LOSS_STD] = math.nan
            out[LOSS_EXAMPLES] = 0.0
        return out
