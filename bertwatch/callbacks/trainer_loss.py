"""Which loss the gradient statistics take: ``loss_fn=``, the Trainer's own loss, or the model's.

A Trainer can train on a loss that is not the model's: a subclass that overrides ``compute_loss`` (label
smoothing, focal loss, class weights), ``Trainer(compute_loss_func=...)``, or ``label_smoothing_factor > 0`` (the
Trainer's ``label_smoother``). When bertwatch knows the Trainer (``bertwatch.watch``, ``bertwatch run``,
``set_trainer``), the gradient statistics then take that loss, each probe example alone through the Trainer's
``compute_loss`` (``heads.gradients.importance.ExampleLoss``), called on a throwaway shallow copy of the Trainer so it
cannot change the training run. When bertwatch does not know the Trainer but its arguments say the loss differs
(``label_smoothing_factor``), they are refused with what to do. ``num_items_in_batch`` (gradient accumulation,
``average_tokens_across_devices``) only rescales a whole micro-batch's loss, never one example's against another,
so each example's loss is taken without it.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

from bertwatch.probe.adapt import config_value
from bertwatch.probe.probe_context import GradientLoss

__all__ = ["gradient_loss"]


def _trainer_loss_difference(trainer: Any) -> str | None:
    """Why ``trainer`` trains on a loss that is not its model's own (``compute_loss`` overridden,
    ``compute_loss_func`` set, a ``label_smoother``), or None when its loss is the model's."""
    from transformers import Trainer

    reasons = []
    if "compute_loss" in vars(trainer) or type(trainer).compute_loss is not Trainer.compute_loss:
        reasons.append(f"{type(trainer).__name__} overrides compute_loss")
    if trainer.compute_loss_func is not None:
        reasons.append("compute_loss_func is set")
    if trainer.label_smoother is not None:
        reasons.append(f"label_smoothing_factor={trainer.args.label_smoothing_factor}")
    return "; ".join(reasons) or None


def _smoothing_from_args(args: Any, model: Any) -> float:
    """The label smoothing the Trainer built from ``args`` (the Trainer turns it off for multi-label models)."""
    factor = float(args.label_smoothing_factor or 0)
    problem = config_value(model, "problem_type")
    return 0.0 if problem == "multi_label_classification" else factor


class _TrainerExampleLoss:
    """The Trainer's loss of one example alone: ``trainer.compute_loss(trainer.model, inputs)`` on a shallow copy
    of the Trainer whose ``state`` and ``control`` are copies and whose ``log`` does nothing, without
    ``num_items_in_batch``; the Trainer is held weakly by its callback, strongly here only during a call."""

    def __init__(self, trainer_ref: Callable[[], Any], reason: str) -> None:
        self._trainer_ref = trainer_ref
        self.reason = reason
        self.name = "the Trainer's compute_loss"

    def __call__(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        trainer = self._trainer_ref()
        if trainer is None:
            raise RuntimeError("the Trainer whose loss the gradient statistics take is gone")
        sandbox = copy.copy(trainer)
        sandbox.state = copy.deepcopy(trainer.state)
        sandbox.control = copy.deepcopy(trainer.control)
        sandbox.log = lambda *args, **kwargs: None
        loss = sandbox.compute_loss(sandbox.model, dict(inputs))
        return loss[0] if isinstance(loss, tuple) else loss


def gradient_loss(loss_fn: Callable | None, trainer: Any, args: Any, model: Any) -> GradientLoss:
    """Choose the gradient statistics' loss: an explicit ``loss_fn`` first, else the Trainer's when it is not the
    model's own (``trainer`` known), else the model's own; refused (``problem``) when the Trainer is not known and
    ``args`` say it trains on another loss."""
    if loss_fn is not None:
        return GradientLoss(loss_fn=loss_fn, description="loss_fn= (each example's value)")
    name = type(model).__name__
    if trainer is not None:
        reason = _trainer_loss_difference(trainer)
        if reason is None:
            return GradientLoss(description=f"{name}'s own loss, which is the Trainer's (each example alone)")
        return GradientLoss(
            example_loss=_TrainerExampleLoss(weakref.ref(trainer), reason),
            description=f"the Trainer's loss ({reason}): compute_loss on each probe example alone",
        )
    smoothing = _smoothing_from_args(args, model)
    if smoothing:
        return GradientLoss(
            problem=(
                f"the Trainer trains with label_smoothing_factor={smoothing}, not {name}'s own loss, and bertwatch "
                "does not know the Trainer (the callback is only in callbacks=[...]): attach it with "
                "bertwatch.watch(trainer) (or bertwatch run), or pass loss_fn=(outputs, batch) -> per-example loss"
            )
        )
    return GradientLoss(
        description=(
            f"{name}'s own loss (each example alone). bertwatch does not know the Trainer (callbacks=[...] only): if "
            "it trains on another loss (compute_loss overridden, compute_loss_func), attach bertwatch with "
            "bertwatch.watch(trainer) or pass loss_fn="
        )
    )
