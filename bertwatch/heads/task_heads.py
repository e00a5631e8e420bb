"""Task heads: which head a model has, which label fields its loss takes, and that loss per example.

A Hugging Face task model returns one number, its loss averaged over the batch's labelled items (examples,
tokens or masked tokens). Every head's loss is a weighted mean ``L = Σ_b w_b ℓ_b / Σ_b w_b`` of per-example losses
``ℓ_b`` with weights ``w_b`` (1 per example, or its number of labelled tokens), so example b's own gradient is
``(Σ w / w_b) ∂L/∂θ_b`` for anything ``θ_b`` that only example b's forward depends on (its head gates, its
attention maps). :func:`model_loss` takes the model's own loss that way, after checking that the weighted mean of
:func:`per_example_loss` equals it (a head whose loss is not understood is refused, not measured wrongly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

__all__ = [
    "HEAD_KINDS",
    "LABEL_FIELDS",
    "LOSS_AGREEMENT",
    "LossSetupError",
    "MASK_PROBABILITY",
    "check_loss_inputs",
    "example_mask",
    "original_ids",
    "fixed_mask",
    "head_kind",
    "label_fields",
    "label_names",
    "model_loss",
    "per_example_loss",
    "problem_type",
]

#: Model class suffix -> head kind.
HEAD_KINDS = {
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForMaskedLM": "masked-lm",
}
#: Every batch field that holds labels of some head.
LABEL_FIELDS = ("labels", "start_positions", "end_positions")
IGNORE_INDEX = -100
#: The share of tokens a fixed masked-LM mask covers (BERT's 15%).
MASK_PROBABILITY = 0.15
#: How far two computations of the same loss may differ, relative and absolute: the model's loss against the
#: weighted mean bertwatch computes, an example's loss in the whole batch against in its length group (products
#: round differently in another batch; a custom loss, or one that reads padding, moves by far more).
LOSS_AGREEMENT = (1e-3, 1e-5)


class LossSetupError(ValueError):
    """The model's loss cannot be computed or understood for this batch: raised before anything is measured."""


def head_kind(model: nn.Module) -> str | None:
    """The task head of ``model`` ("sequence-classification", "token-classification", "question-answering",
    "multiple-choice", "masked-lm"), or None for a bare encoder or a head bertwatch does not know."""
    name = type(model).__name__
    for suffix, kind in HEAD_KINDS.items():
        if name.endswith(suffix):
            return kind
    return None


def label_fields(kind: str | None) -> tuple[str, ...]:
    """The batch fields the head's loss reads."""
    return ("start_positions", "end_positions") if kind == "question-answering" else ("labels",)


def label_names(config: Any) -> tuple[str, ...]:
    """A classifier's class names by id from ``config.id2label`` (keyed by int, or by str as a config read by hand
    may be), the id itself where a name is missing.

    Example:
        >>> from transformers import PretrainedConfig
        >>> config = PretrainedConfig()
        >>> config.id2label = {0: "neg", 2: "pos"}  # two classes, the second named under another id
        >>> label_names(config)
        ('neg', '1')
    """
    id2label = config.id2label or {}
    return tuple(str(id2label.get(i, id2label.get(str(i), i))) for i in range(int(config.num_labels)))


def problem_type(model: nn.Module, labels: torch.Tensor | None = None) -> str:
    """A sequence classifier's problem type as its forward decides it: the config's, else regression for one
    output, single-label for integer labels, multi-label otherwise."""
    config = model.config
    if config.problem_type:
        return str(config.problem_type)
    if int(config.num_labels) == 1:
        return "regression"
    if labels is None or not labels.is_floating_point():
        return "single_label_classification"
    return "multi_label_classification"


def check_loss_inputs(model: nn.Module, batch: Mapping[str, Any]) -> str:
    """The head kind, after checking that ``batch`` has what the model's loss needs; a clear error if not."""
    kind = head_kind(model)
    if kind is None:
        raise LossSetupError(
            f"{type(model).__name__} has no task head bertwatch knows (sequence/token classification, question "
            "answering, multiple choice, masked LM), so it has no loss to take gradients of: pass loss_fn="
            "(outputs, batch) -> per-example loss, or drop the gradient statistics"
        )
    missing = [f for f in label_fields(kind) if batch.get(f) is None]
    if missing:
        raise LossSetupError(
            f"gradient statistics of a {kind} model need {' and '.join(missing)} in every batch (the loss is the "
            f"model's own); probe with labelled examples, or pass loss_fn="
        )
    return kind


def _token_ce(logits: torch.Tensor, labels: torch.Tensor, ignore: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example mean cross-entropy over labelled positions ``[batch]`` and their counts ``[batch]``;
    logits ``[batch, T, C]``, labels ``[batch, T]``."""
    flat = nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, reduction="none", ignore_index=ignore)
    counted = (labels != ignore).sum(-1)
    return flat.sum(-1) / counted.clamp_min(1), counted.float()


def _qa(outputs: Any, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    start, end = outputs.start_logits, outputs.end_logits
    length = start.shape[-1]
    positions = [batch[f].to(start.device).reshape(-1).long() for f in ("start_positions", "end_positions")]
    if any(bool(((p < 0) | (p >= length)).any()) for p in positions):
        raise LossSetupError(
            "an answer position lies outside the sequence, where the model's loss ignores it: map answers that "
            "were cut off to position 0 (the [CLS] token), as SQuAD v2 preprocessing does"
        )
    losses = [nn.functional.cross_entropy(x.float(), p, reduction="none") for x, p in zip((start, end), positions)]
    return (losses[0] + losses[1]) / 2, torch.ones_like(losses[0])


def per_example_loss(
    outputs: Any, batch: Mapping[str, torch.Tensor], problem: str | None = None, kind: str | None = None
) -> torch.Tensor:
    """The task loss of each example, ``[batch]`` (see :func:`weighted_losses` for the heads)."""
    return weighted_losses(outputs, batch, problem, kind)[0]


def weighted_losses(
    outputs: Any, batch: Mapping[str, torch.Tensor], problem: str | None = None, kind: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-example losses ``ℓ`` and weights ``w`` (``[batch]`` each) whose weighted mean is the head's loss.

    Sequence classification: cross-entropy (w = 1, 0 for label -100), squared error for regression (mean over
    outputs), binary cross-entropy for multi-label (mean over labels). Token classification and masked LM: mean
    cross-entropy over the example's labelled tokens (-100 ignored; w = their number). Question answering: the
    mean of the start and end cross-entropies. Multiple choice: cross-entropy over the choices.
    """
    if kind == "question-answering" or (kind is None and hasattr(outputs, "start_logits")):
        return _qa(outputs, batch)
    logits = outputs.logits if hasattr(outputs, "logits") else outputs[0]
    labels = batch.get("labels")
    if labels is None:
        raise LossSetupError("gradient statistics need labels in the batch (the loss is the task's own loss)")
    labels = labels.to(logits.device)
    if kind in ("token-classification", "masked-lm") or (kind is None and logits.dim() == 3):
        return _token_ce(logits, labels.long(), IGNORE_INDEX)
    size = labels.shape[0]
    if problem == "regression" or (problem is None and logits.shape[-1] == 1 and labels.is_floating_point()):
        error = (logits.float().reshape(size, -1) - labels.float().reshape(size, -1)) ** 2
        return error.mean(-1), torch.ones(size, device=logits.device)
    if problem == "multi_label_classification":
        bce = nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="none")
        return bce.reshape(size, -1).mean(-1), torch.ones(size, device=logits.device)
    loss, count = _token_ce(logits.reshape(size, 1, -1), labels.long().reshape(size, 1), IGNORE_INDEX)
    return loss, count


def model_loss(
    model: nn.Module, outputs: Any, batch: Mapping[str, torch.Tensor], kind: str | None = None, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own loss (a scalar with its graph) and the per-example factors ``Σw / w_b`` ``[batch]`` that
    turn its gradient into example b's own (NaN for an example with no labelled item).

    Refuses a model that returned no loss, or (with ``check``, which reads both losses back to the host) a batch
    with no labelled item or whose loss is not the weighted mean of :func:`weighted_losses` (a custom loss: pass
    ``loss_fn=``)."""
    kind = kind or check_loss_inputs(model, batch)
    loss = getattr(outputs, "loss", None)  # a bare encoder's output has no loss field
    if loss is None:
        raise LossSetupError(
            f"{type(model).__name__} returned no loss for a batch with {', '.join(label_fields(kind))}: pass "
            "loss_fn=(outputs, batch) -> per-example loss"
        )
    labels = batch.get("labels")
    problem = problem_type(model, labels) if kind == "sequence-classification" else None
    losses, weights = weighted_losses(outputs, batch, problem, kind)
    total = weights.sum()
    if check:
        _check_model_loss(model, loss, losses, weights, total, kind)
    scale = torch.where(weights > 0, total / weights.clamp_min(1e-30), torch.nan)
    return loss, scale


def _check_model_loss(
    model: nn.Module, loss: torch.Tensor, losses: torch.Tensor, weights: torch.Tensor, total: torch.Tensor, kind: str
) -> None:
    """:func:`model_loss`'s refusals: no labelled item, or a loss that is not the weighted mean of ``losses``."""
    if float(total) == 0:
        raise LossSetupError("no example of the batch has a labelled item (all labels are -100)")
    expected = float((losses * weights).sum().detach() / total)
    value = float(loss.detach())
    if abs(value - expected) > LOSS_AGREEMENT[0] * abs(expected) + LOSS_AGREEMENT[1]:
        raise LossSetupError(
            f"{type(model).__name__}'s loss ({value:.6g}) is not the {kind} loss bertwatch knows "
            f"({expected:.6g}; a custom or weighted loss?): pass loss_fn=(outputs, batch) -> per-example loss"
        )


def fixed_mask(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask_token_id: int,
    special_ids: Sequence[int] = (),
    probability: float = MASK_PROBABILITY,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded masked-LM mask, the same on every call: ``(masked input_ids, labels)`` ``[batch, T]``.

    Each real, non-special token is replaced by ``mask_token_id`` with ``probability`` (at least one per example
    that has a maskable token); labels hold the original id there and -100 elsewhere. Seeded from ``seed`` and
    the example's position only, so every probe pass and every configuration sees the same masks."""
    generator = torch.Generator().manual_seed(int(seed))
    candidates = attention_mask.bool().cpu() & ~torch.isin(input_ids.cpu(), torch.tensor(list(special_ids)))
    draw = torch.rand(input_ids.shape, generator=generator) < probability
    chosen = draw & candidates
    for b in range(input_ids.shape[0]):
        if not bool(chosen[b].any()) and bool(candidates[b].any()):
            chosen[b, int(torch.nonzero(candidates[b])[0])] = True
    chosen = chosen.to(input_ids.device)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return input_ids.masked_fill(chosen, mask_token_id), labels


def example_mask(
    ids: Sequence[int],
    number: int,
    mask_token_id: int,
    special_ids: Sequence[int] = (),
    probability: float = MASK_PROBABILITY,
    seed: int = 0,
) -> tuple[list[int], list[int]]:
    """Example ``number``'s fixed mask (:func:`fixed_mask` seeded by ``seed`` and ``number`` only): ``(masked ids,
    labels)``. The probe set and the ablation sweep both mask this way, so an example has the same masks in each, whatever
    batch it falls in."""
    tensor = torch.tensor([[int(t) for t in ids]])
    masked, labels = fixed_mask(
        tensor, torch.ones_like(tensor), mask_token_id, special_ids, probability, int(seed) * 1_000_003 + int(number)
    )
    return masked[0].tolist(), labels[0].tolist()


def original_ids(input_ids: Sequence[int], labels: Sequence[int] | None = None) -> list[int]:
    """An example's unmasked token ids: ``labels`` where they hold a token (a masked-LM example masked beforehand),
    ``input_ids`` elsewhere, so re-masking it with :func:`example_mask` never hides a [MASK] as a target."""
    ids = [int(t) for t in input_ids]
    if labels is None or len(labels) != len(ids):
        return ids
    return [int(l) if int(l) != IGNORE_INDEX else t for t, l in zip(ids, labels)]
