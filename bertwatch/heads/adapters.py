"""Capture for encoders whose attention does not go through transformers' attention interface.

DeBERTa-v2/v3 (disentangled attention) and MPNet (relative position bias) compute their probabilities in their own
self-attention module: ``softmax`` -> ``self.dropout`` (an ``nn.Dropout``) -> ``probs @ value``. An adapter hooks
that dropout module for the duration of a capture: its input is the post-softmax, pre-dropout probabilities (where
bertwatch records them and makes disabled heads uniform), and scaling its output per head scales each head's
context exactly as ``Intervention.scale`` and gates do on the interface path. The attention mask is read from the
self-attention module's own call. Adding a family whose attention has this shape is one ``DropoutHookAdapter``
line in ``ADAPTERS``; every adapter is checked against the model's own eager attention before first use
(``bertwatch.heads.capture.check_supported``). For norm-based statistics an adapter also hands over each layer's
value states (the output of the value projection, bias included) and the heads' contexts (the concatenated
``probs @ value`` the module computes before its output projection). For the logit statistics it hands over the
pre-softmax scores, relative-position terms included: the input of the module's one softmax call, seen through a
``TorchFunctionMode`` that is active only between the module's start and its dropout (the mask is excluded later,
by ``bertwatch.heads.stability.logits``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.hooks import RemovableHandle

from bertwatch.core.families import model_family

__all__ = ["ADAPTERS", "DropoutHookAdapter", "adapter_for"]

#: ``(probs [batch, heads, query, key], attention mask or None) -> (probs, per-head context factor or None)``.
OnProbs = Callable[[torch.Tensor, "torch.Tensor | None"], "tuple[torch.Tensor, torch.Tensor | None]"]
#: ``(values [batch, heads, key, d_head], contexts [batch, heads, query, d_head] or None when not exact) -> None``.
OnStates = Callable[[torch.Tensor, "torch.Tensor | None"], None]
#: ``(scores [batch, heads, query, key] before softmax, attention mask or None) -> None``.
OnLogits = Callable[[torch.Tensor, "torch.Tensor | None"], None]
_SOFTMAX = (nn.functional.softmax, torch.softmax, torch.Tensor.softmax)


class _SoftmaxInput(TorchFunctionMode):
    """While entered, keeps the input of the last softmax call; ``remove`` leaves it if a forward failed inside."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = False
        self.scores: torch.Tensor | None = None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _SOFTMAX:
            self.scores = args[0]
        return func(*args, **(kwargs or {}))

    def start(self) -> None:
        self.stop()
        self.scores = None
        self.__enter__()
        self.entered = True

    def stop(self) -> None:
        if self.entered:
            self.entered = False
            self.__exit__(None, None, None)

    def remove(self) -> None:
        self.stop()


@dataclass(frozen=True)
class DropoutHookAdapter:
    """One family: its self-attention class, where that module's ``forward`` takes the attention mask, and for
    norm-based statistics its value projection (a submodule whose output is ``[batch, T, heads * d_head]``; empty:
    none recorded) and where the concatenated contexts are: the input of submodule ``context_input``, or the
    module's own first output when that is empty."""

    model_type: str
    attention_class: str
    mask_position: int = 1
    mask_name: str = "attention_mask"
    value_projection: str = ""
    context_input: str = ""

    def modules(self, model: nn.Module) -> list[nn.Module]:
        """The self-attention modules in call order (one per layer)."""
        return [m for m in model.modules() if type(m).__name__ == self.attention_class]

    def install(
        self,
        model: nn.Module,
        on_probs: OnProbs,
        on_states: OnStates | None = None,
        on_logits: OnLogits | None = None,
    ) -> list[Any]:
        """Hook every layer's attention dropout so ``on_probs`` sees and changes its probabilities, and hand each
        layer's value states and contexts to ``on_states`` and its pre-softmax scores to ``on_logits``. Returns
        handles whose ``remove()`` undoes it all."""
        handles: list[RemovableHandle] = []
        for module in self.modules(model):
            dropout = getattr(module, "dropout", None)  # an attention class a newer transformers rewrote may lack it
            if not isinstance(dropout, nn.Dropout):
                raise TypeError(
                    f"{self.attention_class} has no nn.Dropout 'dropout'; the {self.model_type} adapter is stale"
                )
            handles.extend(self._hook(module, dropout, on_probs, on_states, on_logits))
        return handles

    def _hook(
        self,
        module: nn.Module,
        dropout: nn.Dropout,
        on_probs: OnProbs,
        on_states: OnStates | None,
        on_logits: OnLogits | None,
    ) -> list[Any]:
        slot: dict[str, Any] = {}
        softmax = _SoftmaxInput() if on_logits is not None else None

        def take_mask(_: nn.Module, args: tuple, kwargs: dict) -> None:
            mask = kwargs.get(self.mask_name)
            if mask is None and len(args) > self.mask_position:
                mask = args[self.mask_position]
            slot["mask"], slot["scale"], slot["values"] = mask, None, None
            if softmax is not None:
                softmax.start()

        def change_probs(_: nn.Module, args: tuple) -> tuple:
            if softmax is not None:
                softmax.stop()
                if softmax.scores is None:
                    raise RuntimeError(
                        f"{self.attention_class} called no softmax; the {self.model_type} adapter is stale"
                    )
                on_logits(softmax.scores, slot.get("mask"))
                softmax.scores = None
            probs, scale = on_probs(args[0], slot.get("mask"))
            slot["scale"] = scale
            return (probs, *args[1:])

        def scale_context(_: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor | None:
            scale = slot.get("scale")
            return None if scale is None else output * scale

        handles: list[Any] = [
            module.register_forward_pre_hook(take_mask, with_kwargs=True),
            dropout.register_forward_pre_hook(change_probs),
            dropout.register_forward_hook(scale_context),
        ]
        if softmax is not None:
            handles.append(softmax)
        if on_states is not None and self.value_projection:
            handles.extend(self._hook_states(module, dropout, slot, on_states))
        return handles

    def _hook_states(
        self, module: nn.Module, dropout: nn.Dropout, slot: dict[str, Any], on_states: OnStates
    ) -> list[RemovableHandle]:
        """Keep the value projection's output, then hand it over with the heads' contexts; a context is exact
        (``probs @ value`` with the recorded probs) only when no head was scaled and dropout was off."""
        heads = int(module.num_attention_heads)

        def per_head(states: torch.Tensor) -> torch.Tensor:
            return states.view(*states.shape[:2], heads, -1).transpose(1, 2)

        def take_values(_: nn.Module, args: tuple, output: torch.Tensor) -> None:
            slot["values"] = output

        def hand_over(context: torch.Tensor) -> None:
            values = slot.get("values")
            if values is None:
                return
            exact = slot.get("scale") is None and not (dropout.training and dropout.p > 0)
            on_states(per_head(values), per_head(context) if exact else None)
            slot["values"] = None

        if self.context_input:
            target = module.get_submodule(self.context_input)
            hand = target.register_forward_pre_hook(lambda _, args: hand_over(args[0]))
        else:
            hand = module.register_forward_hook(lambda _, a, out: hand_over(out[0] if isinstance(out, tuple) else out))
        return [module.get_submodule(self.value_projection).register_forward_hook(take_values), hand]


ADAPTERS: dict[str, DropoutHookAdapter] = {
    a.model_type: a
    for a in (
        DropoutHookAdapter("deberta-v2", "DisentangledSelfAttention", value_projection="value_proj"),
        DropoutHookAdapter("mpnet", "MPNetSelfAttention", value_projection="v", context_input="o"),
    )
}


def adapter_for(model: nn.Module) -> DropoutHookAdapter | None:
    """The adapter of ``model``'s family when it has one and its attention modules are there, else None."""
    adapter = ADAPTERS.get(model_family(model))
    if adapter is None or not adapter.modules(model):
        return None
    return adapter
