"""Capture for encoders whose attention does not go through transformers' attention interface.

DeBERTa-v2/v3 (disentangled attention) and MPNet (relative position bias) compute their probabilities in their own
self-attention module: ``softmax`` -> ``self.dropout`` (an ``nn.Dropout``) -> ``probs @ value``. An adapter hooks
that dropout module for the duration of a capture: its input is the post-softmax, pre-dropout probabilities (where
bertwatch records them and makes disabled heads uniform), and scaling its output per head scales each head's
context exactly as ``Intervention.scale`` and gates do on the interface path. The attention mask is read from the
self-attention module's own call. Adding a family whose attention has this shape is one ``DropoutHookAdapter``
line in ``ADAPTERS``; every adapter is checked against the model's own eager attention before first use
(``bertwatch.heads.capture.check_supported``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

__all__ = ["ADAPTERS", "DropoutHookAdapter", "adapter_for"]

#: ``(probs [batch, heads, query, key], attention mask or None) -> (probs, per-head context factor or None)``.
OnProbs = Callable[[torch.Tensor, "torch.Tensor | None"], "tuple[torch.Tensor, torch.Tensor | None]"]


@dataclass(frozen=True)
class DropoutHookAdapter:
    """One family: its self-attention class and where that module's ``forward`` takes the attention mask."""

    model_type: str
    attention_class: str
    mask_position: int = 1
    mask_name: str = "attention_mask"

    def modules(self, model: nn.Module) -> list[nn.Module]:
        """The self-attention modules in call order (one per layer)."""
        return [m for m in model.modules() if type(m).__name__ == self.attention_class]

    def install(self, model: nn.Module, on_probs: OnProbs) -> list[RemovableHandle]:
        """Hook every layer's attention dropout so ``on_probs`` sees and changes its probabilities."""
        handles: list[RemovableHandle] = []
        for module in self.modules(model):
            dropout = getattr(module, "dropout", None)
            if not isinstance(dropout, nn.Dropout):
                raise TypeError(
                    f"{self.attention_class} has no nn.Dropout 'dropout'; the {self.model_type} adapter is stale"
                )
            handles.extend(self._hook(module, dropout, on_probs))
        return handles

    def _hook(self, module: nn.Module, dropout: nn.Dropout, on_probs: OnProbs) -> list[RemovableHandle]:
        slot: dict[str, Any] = {}

        def take_mask(_: nn.Module, args: tuple, kwargs: dict) -> None:
            mask = kwargs.get(self.mask_name)
            if mask is None and len(args) > self.mask_position:
                mask = args[self.mask_position]
            slot["mask"], slot["scale"] = mask, None

        def change_probs(_: nn.Module, args: tuple) -> tuple:
            probs, scale = on_probs(args[0], slot.get("mask"))
            slot["scale"] = scale
            return (probs, *args[1:])

        def scale_context(_: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
            scale = slot.get("scale")
            return None if scale is None else output * scale

        return [
            module.register_forward_pre_hook(take_mask, with_kwargs=True),
            dropout.register_forward_pre_hook(change_probs),
            dropout.register_forward_hook(scale_context),
        ]


ADAPTERS: dict[str, DropoutHookAdapter] = {
    a.model_type: a
    for a in (
        DropoutHookAdapter("deberta-v2", "DisentangledSelfAttention"),
        DropoutHookAdapter("mpnet", "MPNetSelfAttention"),
    )
}


def adapter_for(model: nn.Module) -> DropoutHookAdapter | None:
    """The adapter of ``model``'s family when it has one and its attention modules are there, else None."""
    model_type = str(getattr(getattr(model, "config", None), "model_type", "")).replace("_", "-")
    adapter = ADAPTERS.get(model_type)
    if adapter is None or not adapter.modules(model):
        return None
    return adapter
