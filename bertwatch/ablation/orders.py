"""The orders heads are pruned in: Michel et al.'s gradient importance, computed once (one-shot) or again after
each step with the pruned heads disabled (iterative, Michel's ``--exact_pruning``); random orders live in
:func:`bertwatch.ablation.configs.random_orders`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.configs import step_sizes
from bertwatch.ablation.inputs import EvalBatch, EvalData


def _batch_with_labels(data: EvalData, batch: EvalBatch, regression: bool, device: torch.device) -> dict:
    from bertwatch.ablation.task_types import label_batch

    inputs = {k: v.to(device) for k, v in batch.inputs.items()}
    width = inputs["attention_mask"].shape[-1]
    task_type = "regression" if regression else data.task_type
    return {**inputs, **label_batch(task_type, data.labels[batch.index], width, device)}


def _masked_gate_gradients(
    model: nn.Module, batch: dict, disabled: np.ndarray, mode: str, loss_fn: Callable | None
) -> torch.Tensor:
    """``|∂L_b/∂ξ|`` per example ``[batch, layers, heads]`` with the ``disabled`` heads ``[layers, heads]`` switched
    off by ``mode``'s intervention (the gates of the others at 1); ``L_b`` is each example's own loss."""
    from bertwatch.heads.capture import Intervention, capture, model_shape
    from bertwatch.heads.task_heads import LABEL_FIELDS, check_loss_inputs, label_fields, model_loss

    layers, heads = model_shape(model)
    ids = batch["input_ids"]
    group = int(ids.shape[1]) if ids.dim() == 3 else 1
    rows = int(ids.shape[0]) * group
    size = rows // group
    device = ids.device
    gates = torch.ones(rows, layers, heads, device=device, dtype=torch.float32, requires_grad=True)
    intervention = Intervention.disable(torch.as_tensor(disabled, dtype=torch.bool, device=device), mode)
    with torch.enable_grad(), capture(model, record=False, intervention=intervention, gates=gates):
        if loss_fn is not None:
            outputs = model(**{k: v for k, v in batch.items() if k not in LABEL_FIELDS})
            total, scale = loss_fn(outputs, batch).sum(), None
        else:
            kind = check_loss_inputs(model, batch)
            keep = set(label_fields(kind))
            model_inputs = {k: v for k, v in batch.items() if k in keep or k not in LABEL_FIELDS}
            total, scale = model_loss(model, model(**model_inputs), batch, kind)
        (grad,) = torch.autograd.grad(total, [gates])
    factor = torch.ones(size, device=device) if scale is None else scale.float()
    return grad.float().reshape(size, group, layers, heads).sum(1).abs() * factor[:, None, None]


def head_importance(
    model: nn.Module,
    data: EvalData,
    regression: bool,
    loss_fn: Callable | None,
    disabled: np.ndarray | None = None,
    mode: str = "zero",
) -> np.ndarray:
    """Michel et al.'s importance ``E_x |∂L/∂ξ_h|`` over the evaluation set, L2-normalised per layer, ``[layers,
    heads]`` float64.

    With ``disabled`` (bool ``[layers, heads]``), the gradient is taken with those heads switched off by ``mode``
    (as the pruning curve evaluates them), their importance is set to 0 and each layer is normalised over the heads
    still on (a layer with none left stays 0).
    """
    from bertwatch.heads.gradients.importance import gradient_stats, normalize_by_layer
    from bertwatch.heads.roles import TokenRoles

    device = next(model.parameters()).device
    masked = disabled is not None and bool(np.any(disabled))
    total, count = None, 0
    for shard in data.shards:
        for batch in shard:
            full = _batch_with_labels(data, batch, regression, device)
            if masked:
                part = _masked_gate_gradients(model, full, disabled, mode, loss_fn).double().sum(0).cpu()
            else:
                real = full["attention_mask"].bool().reshape(-1, full["attention_mask"].shape[-1])
                none = torch.zeros_like(real)
                roles = TokenRoles(real=real, cls=none, sep=none, punct=none)
                part = gradient_stats(model, full, roles, loss_fn=loss_fn)["head_importance"].double().sum(0).cpu()
            total = part if total is None else total + part
            count += batch.size
    mean = total / count
    if masked:
        mean = torch.where(torch.as_tensor(disabled), torch.zeros_like(mean), mean)
    return normalize_by_layer(mean).numpy()


def iterative_masks(
    first_importance: np.ndarray,
    steps: int,
    step: float,
    importance_under: Callable[[np.ndarray], np.ndarray],
) -> list[np.ndarray]:
    """Michel's iterative pruning: the first ``steps`` cumulative masks ``[layers, heads]``, each step disabling the
    least important of the heads still on (``max(1, int(step * remaining))`` of them, the counts of
    :func:`bertwatch.ablation.configs.step_sizes`), importance re-estimated with the pruned heads disabled
    (``importance_under(mask)``) before every step but the first, which uses ``first_importance``.
    Ties go by position, as in the one-shot order."""
    shape = first_importance.shape
    mask = np.zeros(shape, dtype=bool)
    masks: list[np.ndarray] = []
    importance = np.asarray(first_importance, dtype=np.float64)
    for j, pruned in enumerate(step_sizes(mask.size, step)[:steps]):
        if j > 0:
            importance = np.asarray(importance_under(mask), dtype=np.float64)
        scores = np.nan_to_num(importance, nan=np.inf).ravel()
        order = np.lexsort((scores, mask.ravel()))  # heads still on first, then by importance, ties by position
        mask = mask.copy().ravel()
        mask[order[: pruned - int(mask.sum())]] = True
        mask = mask.reshape(shape)
        masks.append(mask)
    return masks
