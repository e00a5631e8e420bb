"""Gradient-based head importance: Michel's gate score, Clark's attention gradients by key type, and IG.

All gradients are taken with ``torch.autograd.grad`` with respect to gates and attention maps only, so nothing
is ever written into a parameter's ``.grad`` and the optimiser's state is untouched. Each function returns
per-example values ``[batch, layers, heads]``; average them with ``bertwatch.heads.stats.aggregate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.roles import TokenRoles

GRADIENT_NAMES = ("head_importance", "attn_grad_sep", "attn_grad_punct", "attn_grad_other")
IG_NAME = "head_attribution_ig"

LossFn = Callable[[Any, Mapping[str, torch.Tensor]], torch.Tensor]

__all__ = [
    "GRADIENT_NAMES",
    "IG_NAME",
    "gradient_stats",
    "integrated_gradients",
    "normalize_by_layer",
    "per_example_loss",
]


def per_example_loss(outputs: Any, batch: Mapping[str, torch.Tensor], problem_type: str | None = None) -> torch.Tensor:
    """The task loss of each example, ``[batch]``, from the logits and ``batch["labels"]``.

    Cross-entropy for classification, squared error for regression (one output), binary cross-entropy for
    multi-label; token-level labels (``[batch, T]``, -100 ignored) are averaged per example.
    """
    logits = outputs.logits if hasattr(outputs, "logits") else outputs[0]
    labels = batch.get("labels")
    if labels is None:
        raise ValueError("gradient statistics need labels in the batch (the loss is the task's own loss)")
    labels = labels.to(logits.device)
    if problem_type == "regression" or (problem_type is None and logits.shape[-1] == 1 and labels.is_floating_point()):
        return (logits.reshape(labels.shape[0], -1).squeeze(-1).float() - labels.float()) ** 2
    if problem_type == "multi_label_classification":
        bce = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
        return bce.reshape(bce.shape[0], -1).mean(-1)
    if logits.dim() == 3:
        flat = nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none", ignore_index=-100)
        counted = (labels != -100).sum(-1).clamp_min(1)
        return flat.sum(-1) / counted
    return nn.functional.cross_entropy(logits.float(), labels, reduction="none")


def _model_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


def _loss(model: nn.Module, outputs: Any, batch: Mapping[str, torch.Tensor], loss_fn: LossFn | None) -> torch.Tensor:
    if loss_fn is not None:
        return loss_fn(outputs, batch)
    return per_example_loss(outputs, batch, getattr(model.config, "problem_type", None))


def gradient_stats(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    roles: TokenRoles,
    loss_fn: LossFn | None = None,
    return_attentions: bool = False,
) -> dict[str, torch.Tensor] | tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Per-example gradient statistics from one forward and one backward pass, ``{name: [batch, layers, heads]}``.

    ``head_importance`` = abs(∂L_b/∂ξ_h) with ξ a gate on head h's context (Michel et al. 2019), abs per example.
    ``attn_grad_{sep,punct,other}`` = mean over real queries i and keys j of that type of abs(∂L_b/∂A[i,j])
    (Clark et al. 2019, Fig 3); "other" is every real key that is neither [SEP] nor punctuation. Examples are
    independent, so the gradient of the summed loss restricted to example b is example b's own gradient.
    With ``return_attentions`` the pass's maps ``[batch, layers, heads, T, T]`` come back too, so a caller that
    also needs the attention statistics pays for one forward, not two.
    """
    layers, heads = model_shape(model)
    device = next(model.parameters()).device
    size = roles.real.shape[0]
    gates = torch.ones(size, layers, heads, device=device, dtype=torch.float32, requires_grad=True)
    with torch.enable_grad(), capture(model, gates=gates, keep_graph=True) as cap:
        outputs = model(**_model_inputs(batch))
        loss = _loss(model, outputs, batch, loss_fn)
        maps = [cap.layer(l) for l in range(layers)]
        grads = torch.autograd.grad(loss.sum(), [gates, *maps])
    gate_grad, map_grads = grads[0], torch.stack(grads[1:], dim=1)

    roles = roles.to(device)
    real = roles.real.float()
    queries = real.sum(-1).clamp_min(1)
    magnitude = map_grads.float().abs() * real[:, None, None, :, None]
    per_key = magnitude.sum(-2)
    out = {"head_importance": gate_grad.abs().detach()}
    other = roles.real & ~roles.sep & ~roles.punct
    for name, keys in (("sep", roles.sep & roles.real), ("punct", roles.punct & roles.real), ("other", other)):
        count = keys.float().sum(-1)
        total = (per_key * keys.float()[:, None, None, :]).sum(-1)
        value = total / (queries * count.clamp_min(1))[:, None, None]
        out[f"attn_grad_{name}"] = torch.where(count[:, None, None] > 0, value, torch.nan).detach()
    if return_attentions:
        return out, torch.stack([m.detach() for m in maps], dim=1)
    return out


def integrated_gradients(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    loss_fn: LossFn | None = None,
    steps: int = 20,
) -> torch.Tensor:
    """Integrated gradients (captum) of each example's loss w.r.t. the head gates from 0 to 1, ``[batch, layers, heads]``.

    By completeness, an example's attributions sum to L(all gates 1) − L(all gates 0).
    """
    from captum.attr import IntegratedGradients

    layers, heads = model_shape(model)
    device = next(model.parameters()).device
    names = sorted(batch)
    size = batch[names[0]].shape[0]

    def forward(gates: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        expanded = dict(zip(names, tensors))
        with capture(model, gates=gates, record=False):
            outputs = model(**_model_inputs(expanded))
        return _loss(model, outputs, expanded, loss_fn)

    ig = IntegratedGradients(forward)
    ones = torch.ones(size, layers, heads, device=device)
    with torch.enable_grad():
        attributions = ig.attribute(
            ones,
            baselines=torch.zeros_like(ones),
            additional_forward_args=tuple(batch[n] for n in names),
            n_steps=steps,
            internal_batch_size=size,
        )
    return attributions.detach()


def normalize_by_layer(grid: torch.Tensor) -> torch.Tensor:
    """Divide each layer's row by its L2 norm (Michel et al.'s per-layer normalisation), ``[layers, heads]``."""
    return grid / grid.norm(dim=-1, keepdim=True).clamp_min(1e-20)
