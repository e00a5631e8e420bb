"""Gradient-based head importance: Michel's gate score, Clark's attention gradients by key type, and IG.

All gradients are taken with ``torch.autograd.grad`` with respect to gates and attention maps only, so nothing
is ever written into a parameter's ``.grad`` and the optimiser's state is untouched. Each function returns
per-example values ``[batch, layers, heads]``; average them with ``bertwatch.heads.maps.stats.aggregate``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from bertwatch.core.stat_names import GRADIENT_NAMES, IG_NAME
from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.gradients import length_groups
from bertwatch.heads.gradients.health import HealthAccumulator
from bertwatch.heads.mixing import mixing_model
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.task_heads import (
    LABEL_FIELDS,
    LOSS_AGREEMENT,
    LossSetupError,
    check_loss_inputs,
    head_kind,
    label_fields,
    model_loss,
    per_example_loss,
    problem_type,
)

LossFn = Callable[[Any, Mapping[str, torch.Tensor]], torch.Tensor]
#: A loss that runs the model itself on one example's inputs (a batch of one, label fields included) and returns
#: that example's loss, a one-element tensor: the training's own loss when it is not the model's (a Trainer's
#: ``compute_loss``). Called once per example inside a gated ``capture`` of the model; its ``name`` attribute, when
#: it has one, names it in errors.
ExampleLoss = Callable[[Mapping[str, torch.Tensor]], torch.Tensor]

__all__ = [
    "GRADIENT_NAMES",
    "IG_NAME",
    "ExampleLoss",
    "check_gradients",
    "gradient_stats",
    "integrated_gradients",
    "normalize_by_layer",
    "per_example_loss",
]


def _model_inputs(batch: Mapping[str, torch.Tensor], keep: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k not in LABEL_FIELDS or k in keep}


def _loss(model: nn.Module, outputs: Any, batch: Mapping[str, torch.Tensor], loss_fn: LossFn | None) -> torch.Tensor:
    """Per-example losses ``[batch]``: ``loss_fn``'s, else the head's own (:func:`bertwatch.heads.task_heads.weighted_losses`)."""
    if loss_fn is not None:
        return loss_fn(outputs, batch)
    kind = head_kind(model)
    labels = batch.get("labels")
    problem = problem_type(model, labels) if kind == "sequence-classification" else None
    return per_example_loss(outputs, batch, problem, kind)


def _choices(batch: Mapping[str, torch.Tensor]) -> int:
    """Rows per example: the number of choices of a multiple-choice batch ``[batch, choices, T]``, else 1."""
    ids = batch.get("input_ids")
    return int(ids.shape[1]) if ids is not None and ids.dim() == 3 else 1


def _example(batch: Mapping[str, torch.Tensor], b: int, size: int) -> dict[str, torch.Tensor]:
    """Example ``b`` of a batch of ``size`` as a batch of one (every field that has a batch dimension sliced)."""
    return {
        k: v[b : b + 1] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == size else v
        for k, v in batch.items()
    }


def _size(batch: Mapping[str, torch.Tensor]) -> int:
    return int(batch["input_ids"].shape[0])


def _one_loss(example_loss: ExampleLoss, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """``example_loss`` on one example, checked to be one value (``LossSetupError`` otherwise)."""
    name = getattr(example_loss, "name", "example_loss")  # a user's plain function has no name
    try:
        loss = example_loss(inputs)
    except LossSetupError:
        raise
    except Exception as err:
        raise LossSetupError(f"{name} failed on a probe example: {type(err).__name__}: {err}") from err
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise LossSetupError(f"{name} must return one loss for an example alone; it returned {shape}")
    return loss.reshape(())


def _examples_alone(model: nn.Module, batch: Mapping[str, torch.Tensor], real: torch.Tensor | None) -> list[dict]:
    """Each example of ``batch`` as a batch of one, cropped to its real tokens (``real`` ``[rows, T]``) where that is
    exact (:func:`bertwatch.heads.gradients.length_groups.widths`): what a loss that runs the model itself is given."""
    size, kind = _size(batch), head_kind(model)
    lengths = length_groups.widths(batch, real, kind) if real is not None else None
    if lengths is None:
        return [_example(batch, b, size) for b in range(size)]
    return [length_groups.crop_rows(batch, torch.tensor([b]), lengths[b], kind) for b in range(size)]


def _example_passes(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    rows: int,
    example_loss: ExampleLoss,
    real: torch.Tensor | None = None,
    health: HealthAccumulator | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], None, list[torch.Tensor]]:
    """:func:`_gated_pass` for a loss that runs the model itself: one gated forward and backward per example alone
    (``example_loss`` on a batch of one), so each example's gradients are those of its own loss by construction.
    Each example is cropped to its real tokens (``real`` ``[rows, T]``) where that is exact
    (:func:`bertwatch.heads.gradients.length_groups.widths`); maps and their gradients come back padded to T with zeros.
    ``health`` gets each example's loss (weight 1) only: the loss is the caller's, its outputs unseen."""
    layers, heads = model_shape(model)
    device = next(model.parameters()).device
    size = _size(batch)
    gate_grads: list[torch.Tensor] = []
    map_grads: list[list[torch.Tensor]] = [[] for _ in range(layers)]
    maps: list[list[torch.Tensor]] = [[] for _ in range(layers)]
    length = int(batch["input_ids"].shape[-1])
    for example in _examples_alone(model, batch, real):
        gates = torch.ones(rows // size, layers, heads, device=device, dtype=torch.float32, requires_grad=True)
        with torch.enable_grad(), capture(model, gates=gates, keep_graph=True) as cap:
            loss = _one_loss(example_loss, example)
            layer_maps = [cap.layer(l) for l in range(layers)]
            grads = torch.autograd.grad(loss, [gates, *layer_maps])
        if health is not None:
            health.add_losses(loss.detach().reshape(1), torch.ones(1))
        gate_grads.append(grads[0])
        for l in range(layers):
            map_grads[l].append(length_groups.pad_tokens(grads[1 + l], length, "maps"))
            maps[l].append(length_groups.pad_tokens(layer_maps[l].detach(), length, "maps"))
    return torch.cat(gate_grads), [torch.cat(g) for g in map_grads], None, [torch.cat(m) for m in maps]


def _gated_pass(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    rows: int,
    loss_fn: LossFn | None,
    states: list | None = None,
    blocks: bool = False,
    logits: bool = True,
    health: HealthAccumulator | None = None,
    check: bool = True,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None, list[torch.Tensor]]:
    """One gated forward and backward: gate gradients ``[rows, layers, heads]``, map gradients per layer, the
    per-example factors that make the model's batch loss each example's own (None with ``loss_fn``), the maps.
    ``health`` gets the batch's losses and predictions and, where it takes them, the gradients of
    ``Σ_b w_b ℓ_b`` with respect to the encoder layers' parameters, from the same ``torch.autograd.grad`` call
    (the model's own loss is that sum over Σ_b w_b; ``loss_fn``'s total is the sum itself, w_b = 1).
    ``states``: a list that receives the pass's value states, contexts and logit summary (``Capture.values``,
    ``.contexts``, and with ``logits`` ``.logit_summary``: the scores are taken before the gates, so all are exact
    under them) and, with ``blocks``, the attention blocks' :class:`~bertwatch.heads.mixing.mixing_model.BlockRecorder`
    (a gate of 1 leaves every product exact, so the blocks are those of the plain forward). ``check``: compare the
    model's loss with the one bertwatch computes (``task_heads.model_loss``; it reads both back to the host)."""
    layers, heads = model_shape(model)
    device = next(model.parameters()).device
    kind = None if loss_fn is not None else check_loss_inputs(model, batch)
    gates = torch.ones(rows, layers, heads, device=device, dtype=torch.float32, requires_grad=True)
    record = states is not None
    with (
        torch.enable_grad(),
        capture(model, gates=gates, keep_graph=True, record_values=record, record_logits=record and logits) as cap,
        mixing_model.record_blocks(model) if record and blocks else contextlib.nullcontext() as recorder,
    ):
        if loss_fn is not None:
            outputs = model(**_model_inputs(batch))
            losses = loss_fn(outputs, batch)
            total, scale = losses.sum(), None
        else:
            outputs = model(**_model_inputs(batch, label_fields(kind)))
            total, scale = model_loss(model, outputs, batch, kind, check=check)
        maps = [cap.layer(l) for l in range(layers)]
        params = health.flat_parameters if health is not None else []
        grads = torch.autograd.grad(total, [gates, *maps, *params], allow_unused=bool(params))
    if health is not None:
        _add_health(health, outputs, batch, None if loss_fn is None else losses, grads[1 + layers :])
    grads = grads[: 1 + layers]
    if states is not None:
        states.extend((cap.values, cap.contexts, cap.logit_summary, recorder))
    return grads[0], list(grads[1:]), scale, maps


def _add_health(
    health: HealthAccumulator,
    outputs: Any,
    batch: Mapping[str, torch.Tensor],
    losses: torch.Tensor | None,
    param_grads: Sequence[torch.Tensor | None],
) -> None:
    """One batch (or length group) into ``health``: its outputs and losses (``losses`` ``[rows]``, ``loss_fn``'s,
    else the model's own with their weights) and its parameter gradients, scaled to those of ``Σ_b w_b ℓ_b``."""
    if losses is None:
        start = len(health.losses)
        health.add_model_outputs(outputs, batch)
        weight: torch.Tensor | float = health.weights[
            start
        ].sum()  # the model's loss is the weighted mean: Σ w ℓ = W · L
    else:
        weight = float(losses.shape[0])  # loss_fn's total is already the sum Σ ℓ
        health.add_outputs(outputs, batch, losses, torch.ones_like(losses))
    if param_grads:
        health.add_gradients(param_grads, weight, scale=weight if losses is None else 1.0)


def check_gradients(
    model: nn.Module,
    batches: Sequence[Mapping[str, torch.Tensor]],
    loss_fn: LossFn | None = None,
    example_loss: ExampleLoss | None = None,
) -> None:
    """Refuse, before anything is measured, probe batches that cannot give gradient statistics (``LossSetupError``
    with what to do): one forward of each batch as :func:`gradient_stats` runs it (its length groups, or each example
    alone; no gradients; ``capture`` restores modes and RNG) must give the loss it takes: the model's own, from the
    label fields its head reads, ``loss_fn``'s one value per example, or ``example_loss``'s one value for each
    example alone. The batches' real tokens are read from their ``attention_mask``. A ``loss_fn`` must also give
    each example the same loss in the whole batch as in part of it (its length group, or the batch's half where the
    pass runs whole): one that reads padding or the other examples would make an example's statistics depend on its
    batch."""
    device = next(model.parameters()).device
    for cpu_batch in batches:
        whole = {k: v.to(device) for k, v in cpu_batch.items()}
        mask = whole.get("attention_mask")
        real = mask != 0 if isinstance(mask, torch.Tensor) else None
        if example_loss is not None:
            with torch.no_grad(), capture(model, record=False):
                for example in _examples_alone(model, whole, real):
                    _one_loss(example_loss, example)
            continue
        groups = length_groups.batch_groups(model, whole, real)
        if loss_fn is None:  # the model's own loss is each example's own in any group: check what the pass runs
            for _, part in groups or [(None, whole)]:
                _check_batch(model, part, None)
            continue
        in_groups = [(rows, _check_batch(model, part, loss_fn)) for rows, part in groups or ()]
        in_whole = _check_batch(model, whole, loss_fn)
        in_halves = (
            [] if groups else [(rows, _check_batch(model, half, loss_fn)) for rows, half in _halves(model, whole)]
        )
        _check_own_losses(in_whole, in_groups or in_halves)


def _halves(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> list[tuple[torch.Tensor, dict]]:
    """The batch's first and second half of examples, uncropped (none for a batch of one)."""
    size, kind = _size(batch), head_kind(model)
    width = int(batch["input_ids"].shape[1])
    cuts = (torch.arange(size // 2), torch.arange(size // 2, size))
    return [(rows, length_groups.crop_rows(batch, rows, width, kind)) for rows in cuts if size > 1]


def _check_own_losses(whole: torch.Tensor, parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Refuse a ``loss_fn`` whose per-example losses ``[rows]`` in the whole batch differ from those of the same
    examples in part of it (their length groups, cropped, or the batch's halves) by more than
    ``task_heads.LOSS_AGREEMENT``: an example's loss, and so its gradient statistics, would depend on its batch."""
    eps = torch.finfo(whole.dtype).eps if whole.is_floating_point() else 0.0
    relative, absolute = max(LOSS_AGREEMENT[0], 16 * eps), LOSS_AGREEMENT[1]  # at least 16 roundings
    for rows, got in parts:
        want = whole[rows.to(whole.device)]
        if not torch.allclose(got.to(want.dtype), want, rtol=relative, atol=absolute, equal_nan=True):
            raise LossSetupError(
                "loss_fn gives an example another loss when its batch changes (its padding, or the other examples "
                "in it; bertwatch runs the gradient pass in groups of similar length on CPU, each cut to its longest "
                "example): make loss_fn give each example's loss from that example's real tokens alone (mask the "
                "padding; no in-batch negatives)"
            )


def _check_batch(model: nn.Module, batch: Mapping[str, torch.Tensor], loss_fn: LossFn | None) -> torch.Tensor | None:
    """:func:`check_gradients` on one batch as the gradient pass runs it; ``loss_fn``'s losses ``[rows]`` (None
    without one)."""
    with torch.no_grad(), capture(model, record=False):
        if loss_fn is None:
            kind = check_loss_inputs(model, batch)
            model_loss(model, model(**_model_inputs(batch, label_fields(kind))), batch, kind)
            return None
        outputs = model(**_model_inputs(batch))
        try:
            losses = loss_fn(outputs, batch)
        except Exception as err:
            raise LossSetupError(f"loss_fn failed on a probe batch: {type(err).__name__}: {err}") from err
    rows = int(batch["input_ids"].shape[0])
    if not isinstance(losses, torch.Tensor) or tuple(losses.shape) != (rows,):
        shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
        raise LossSetupError(f"loss_fn must return one loss per example, a tensor [{rows}]; it returned {shape}")
    return losses.detach()


def gradient_stats(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    roles: TokenRoles,
    loss_fn: LossFn | None = None,
    return_attentions: bool = False,
    example_loss: ExampleLoss | None = None,
    return_states: bool = False,
    record_blocks: bool = False,
    record_logits: bool = True,
    health: HealthAccumulator | None = None,
    split: bool = True,
    check_loss: bool = True,
) -> dict[str, torch.Tensor] | tuple:
    """Per-example gradient statistics from one forward and one backward pass, ``{name: [batch, layers, heads]}``.

    ``head_importance`` = abs(∂L_b/∂ξ_h) with ξ a gate on head h's context (Michel et al. 2019), abs per example.
    ``attn_grad_{sep,punct,other}`` = mean over real queries i and keys j of that type of abs(∂L_b/∂A[i,j])
    (Clark et al. 2019, Fig 3); "other" is every real key that is neither [SEP] nor punctuation. L_b is example
    b's share of the model's own loss (:func:`bertwatch.heads.task_heads.model_loss`, any task head; refused at the
    first pass when it cannot be computed), or ``loss_fn(outputs, batch)[b]``. Examples are independent, so the
    rescaled gradient of the batch loss restricted to example b is example b's own. With ``example_loss`` (a loss
    that runs the model itself, such as a Trainer's ``compute_loss``), L_b is ``example_loss`` of example b alone,
    one forward and backward per example (``loss_fn`` is then ignored). Multiple choice: ``roles`` are
    per choice row ``[batch * choices, T]`` and a gate is shared by an example's choices.
    With ``return_attentions`` the pass's maps ``[batch, layers, heads, T, T]`` come back too, so a caller that
    also needs the attention statistics pays for one forward, not two. ``return_states`` adds the pass's value
    states, contexts and logit summary (``Capture.values``, ``Capture.contexts``, ``Capture.logit_summary``; None,
    None, {} when this pass could not record them exactly, e.g. with ``example_loss``), so the norm-based and the
    logit statistics need no forward of their own either: ``(stats, maps, values, contexts, logit_summary,
    blocks)``, ``blocks`` the attention blocks' recording (``heads.mixing.mixing_model.BlockRecorder``) with
    ``record_blocks`` (a family ``supports_mixing`` knows), for the mixing statistics, else None;
    ``record_logits=False`` leaves the logit summary out ({}), sparing its reduction of every layer's scores.
    On CPU the pass runs in length groups (:mod:`bertwatch.heads.gradients.length_groups`: rows of similar real length
    together, each group cropped to its longest row) where that is exact, and an ``example_loss`` example runs
    cropped to its real tokens; everything comes back in the batch's row order and shape, zero at the pad positions
    past a row's group (which no statistic reads). ``health`` (a
    :class:`bertwatch.heads.gradients.health.HealthAccumulator`) gets the run-health signals of the same pass: losses,
    predictions and, with its parameters, the gradient of the encoder layers' parameters (one ``torch.autograd.grad``
    call with the gates and maps). ``split=False`` runs the batch whole (a caller that planned its groups itself: the
    probe pass); ``check_loss=False`` skips comparing the model's loss with the one bertwatch computes (the probe pass
    checks it once, at the run's start), so nothing is read back to the host. The maps' gradients are reduced a layer at
    a time, and the maps stacked a layer at a time as their list empties, so the pass holds about one copy of the maps
    and one of their gradients at most.
    """
    rows = roles.real.shape[0]
    group = _choices(batch)
    states: list = []
    if example_loss is not None:
        gate_grad, map_grads, scale, maps = _example_passes(model, batch, rows, example_loss, roles.real, health)
        states = [None, None, {}, None]
    else:
        kept = states if return_states else None
        gated = functools.partial(
            _gated_pass, model, loss_fn=loss_fn, blocks=record_blocks, logits=record_logits, health=health,
            check=check_loss,
        )  # fmt: skip
        if split:
            gate_grad, map_grads, scale, maps = length_groups.grouped_pass(model, batch, roles.real, rows, kept, gated)
        else:
            gate_grad, map_grads, scale, maps = gated(batch, rows, states=kept)
    size = rows // group
    roles = roles.to(gate_grad.device)
    real = roles.real.float()
    queries = real.sum(-1).clamp_min(1)
    per_key = _key_gradients(map_grads, real)
    factor = torch.ones(size, device=gate_grad.device) if scale is None else scale.float()
    importance = gate_grad.float().reshape(size, group, *gate_grad.shape[1:]).sum(1).abs()
    out = {"head_importance": (importance * factor[:, None, None]).detach()}
    other = roles.real & ~roles.sep & ~roles.punct
    for name, keys in (("sep", roles.sep & roles.real), ("punct", roles.punct & roles.real), ("other", other)):
        count = keys.float().sum(-1)
        total = (per_key * keys.float()[:, None, None, :]).sum(-1)
        total = total.reshape(size, group, *total.shape[1:]).sum(1)
        cells = (queries * count).reshape(size, group).sum(1)
        value = total * factor[:, None, None] / cells.clamp_min(1)[:, None, None]
        out[f"attn_grad_{name}"] = torch.where(cells[:, None, None] > 0, value, torch.nan).detach()
    if return_states:
        return out, _stacked(maps), *states
    if return_attentions:
        return out, _stacked(maps)
    return out


def _key_gradients(map_grads: list, real: torch.Tensor) -> torch.Tensor:
    """Σ_{i real} |∂L/∂A[i, j]| of every key, ``[rows, layers, heads, T]`` float32, from the per-layer gradients
    ``[rows, heads, T, T]``; each layer's entry of ``map_grads`` is dropped once reduced."""
    first = map_grads[0]
    out = torch.empty(first.shape[0], len(map_grads), *first.shape[1:-2], first.shape[-1], device=first.device)
    queries = real[:, None, :, None]  # [rows, 1, T (query), 1]
    for layer in range(len(map_grads)):
        grad, map_grads[layer] = map_grads[layer], None
        torch.sum(grad.float().abs() * queries, dim=-2, out=out[:, layer])
        del grad
    return out


def _stacked(maps: list) -> torch.Tensor:
    """The per-layer maps ``[rows, heads, T, T]`` as one detached ``[rows, layers, heads, T, T]``, each layer's entry
    of ``maps`` dropped once copied (never a second copy of every layer)."""
    first = maps[0]
    out = first.new_empty(first.shape[0], len(maps), *first.shape[1:])
    for layer in range(len(maps)):
        out[:, layer].copy_(maps[layer].detach())
        maps[layer] = None
    return out


def integrated_gradients(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    loss_fn: LossFn | None = None,
    steps: int = 20,
    example_loss: ExampleLoss | None = None,
) -> torch.Tensor:
    """Integrated gradients (captum) of each example's loss w.r.t. the head gates from 0 to 1, ``[batch, layers, heads]``.

    By completeness, an example's attributions sum to L(all gates 1) − L(all gates 0). Multiple choice: a gate is
    shared by an example's choices, as in :func:`gradient_stats`. With ``example_loss``, each interpolated example
    is run alone through it (``steps`` × examples forwards of one example).
    """
    from captum.attr import IntegratedGradients

    layers, heads = model_shape(model)
    device = next(model.parameters()).device
    names = sorted(batch)
    size = batch[names[0]].shape[0]

    def forward(gates: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        expanded = dict(zip(names, tensors))
        rows = gates.repeat_interleave(_choices(expanded), dim=0)  # multiple choice: one gate for all choices
        if example_loss is not None:
            count, group = gates.shape[0], _choices(expanded)
            losses = []
            for b in range(count):
                with capture(model, gates=rows[b * group : (b + 1) * group], record=False):
                    losses.append(_one_loss(example_loss, _example(expanded, b, count)))
            return torch.stack(losses)
        with capture(model, gates=rows, record=False):
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
