"""See and change attention inside transformers 5 encoders through a registered attention implementation.

transformers 5 removed ``head_mask`` and defaults to SDPA, which returns no probabilities. bertwatch registers
its own implementation, ``"bertwatch"``, and switches a model into it only for the passes it owns:

>>> with capture(model) as cap:
...     model(**batch)
>>> cap.attentions.shape          # [batch, layers, heads, query, key]

The implementation computes exactly what eager attention computes, records the post-softmax, pre-dropout
probabilities, and applies per-head interventions (Kovaleva's uniform disabling, Michel's zeroing, any scale)
and gates whose gradients measure head importance.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

IMPLEMENTATION = "bertwatch"

SUPPORTED_MODEL_TYPES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "electra",
    "albert",
    "ernie",
    "mobilebert",
    "modernbert",
)

__all__ = [
    "IMPLEMENTATION",
    "SUPPORTED_MODEL_TYPES",
    "Capture",
    "Intervention",
    "UnsupportedModelError",
    "capture",
    "check_supported",
    "model_shape",
]


class UnsupportedModelError(ValueError):
    """The model's attention does not go through transformers' AttentionInterface."""


@dataclass(frozen=True)
class Intervention:
    """Per-head changes applied inside attention.

    ``uniform``: bool ``[layers, heads]`` or ``[batch, layers, heads]``; a marked head's probabilities become
    1/n over the keys it may attend to (Kovaleva et al.'s disabling, after softmax, before dropout).
    ``scale``: float, same shapes; multiplies each head's context vector (0 is Michel et al.'s zeroing).
    """

    uniform: torch.Tensor | None = None
    scale: torch.Tensor | None = None

    @classmethod
    def zero(cls, mask: torch.Tensor) -> Intervention:
        """Zero the context of the heads where ``mask`` is true."""
        mask = torch.as_tensor(mask, dtype=torch.bool)
        return cls(scale=(~mask).to(torch.float32))

    @classmethod
    def uniform_heads(cls, mask: torch.Tensor) -> Intervention:
        """Make the heads where ``mask`` is true attend uniformly to every key they may see."""
        return cls(uniform=torch.as_tensor(mask, dtype=torch.bool))

    @classmethod
    def disable(cls, mask: torch.Tensor, mode: str) -> Intervention:
        """Disable the marked heads with ``mode`` "uniform" (Kovaleva) or "zero" (Michel)."""
        if mode == "uniform":
            return cls.uniform_heads(mask)
        if mode == "zero":
            return cls.zero(mask)
        raise ValueError(f"unknown disabling mode {mode!r}: use 'uniform' or 'zero'")


def _model_type(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    return str(getattr(config, "model_type", type(model).__name__)).replace("_", "-")


def check_supported(model: nn.Module) -> None:
    """Raise UnsupportedModelError, naming the model type, unless bertwatch can capture its attention."""
    model_type = _model_type(model)
    if getattr(model, "config", None) is None or not hasattr(model, "set_attn_implementation"):
        raise UnsupportedModelError(f"bertwatch needs a transformers PreTrainedModel; got {type(model).__name__}")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"model type {model_type!r} does not route its attention through transformers' AttentionInterface, "
            f"so bertwatch cannot capture or change it. Supported: {', '.join(SUPPORTED_MODEL_TYPES)}."
        )
    if getattr(model.config, "is_encoder_decoder", False) or getattr(model.config, "is_decoder", False):
        raise UnsupportedModelError(f"bertwatch watches encoders; this {model_type!r} model is configured as a decoder")


def model_shape(model: nn.Module) -> tuple[int, int]:
    """Return (layers, heads) of a supported encoder; raises UnsupportedModelError otherwise."""
    check_supported(model)
    config = model.config
    return int(config.num_hidden_layers), int(config.num_attention_heads)


class _State(threading.local):
    """The active capture of this thread; the attention function reads it."""

    def __init__(self) -> None:
        self.active: Capture | None = None


_STATE = _State()


class Capture:
    """What one ``capture`` block recorded; see ``capture``."""

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        record: bool,
        intervention: Intervention | None,
        gates: torch.Tensor | None,
        keep_graph: bool = False,
        record_values: bool = False,
    ) -> None:
        self.num_layers = num_layers
        self.record_values = record_values
        self._values: list[torch.Tensor] = []
        self.keep_graph = keep_graph
        self.num_heads = num_heads
        self.record = record
        self.intervention = intervention
        self.gates = gates
        self.start_layer = 0
        self._calls = 0
        self._maps: list[torch.Tensor] = []

    def reset(self, start_layer: int = 0) -> None:
        """Start a new forward pass whose first attention call is layer ``start_layer``."""
        self.start_layer = start_layer
        self._calls = 0
        self._maps = []
        self._values = []

    @property
    def attentions(self) -> torch.Tensor | None:
        """Recorded probabilities of the last pass, ``[batch, layers, heads, query, key]``."""
        if not self._maps:
            return None
        return torch.stack(self._maps, dim=1)

    @property
    def values(self) -> torch.Tensor | None:
        """Value states of the last pass (``record_values=True``), ``[batch, layers, heads, key, d_head]``."""
        if not self._values:
            return None
        return torch.stack(self._values, dim=1)

    def layer(self, index: int) -> torch.Tensor:
        """Recorded probabilities of one layer, ``[batch, heads, query, key]``."""
        return self._maps[index]

    def _next_layer(self) -> int:
        layer = self.start_layer + self._calls
        self._calls += 1
        if layer >= self.num_layers:
            raise RuntimeError(
                f"attention was called {self._calls} times in one pass, more than the model's {self.num_layers} "
                "layers; call cap.reset() between forward passes made outside model(...)"
            )
        return layer


def _per_head(
    value: torch.Tensor | None, layer: int, batch: int, heads: int, like: torch.Tensor
) -> torch.Tensor | None:
    """Slice a ``[layers, heads]`` or ``[batch, layers, heads]`` spec to ``[batch or 1, heads, 1, 1]`` for one layer."""
    if value is None:
        return None
    if value.dim() == 2:
        out = value[layer].reshape(1, heads, 1, 1)
    elif value.dim() == 3:
        if value.shape[0] != batch:
            raise ValueError(f"a per-example head spec has batch {value.shape[0]}, the input has {batch}")
        out = value[:, layer].reshape(batch, heads, 1, 1)
    else:
        raise ValueError(f"a head spec must be [layers, heads] or [batch, layers, heads], got {tuple(value.shape)}")
    return out.to(device=like.device, dtype=like.dtype if out.is_floating_point() else out.dtype)


def _attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention, plus recording and per-head interventions of the active capture."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    key_value_groups = query.shape[1] // key.shape[1]
    if key_value_groups > 1:
        key = key.repeat_interleave(key_value_groups, dim=1)
        value = value.repeat_interleave(key_value_groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)

    cap = _STATE.active
    scale = None
    if cap is not None:
        layer = cap._next_layer()
        batch, heads = probs.shape[0], probs.shape[1]
        if cap.intervention is not None and cap.intervention.uniform is not None:
            mark = _per_head(cap.intervention.uniform, layer, batch, heads, probs)
            allowed = torch.ones_like(probs) if attention_mask is None else _allowed_keys(attention_mask, probs)
            uniform = allowed / allowed.sum(-1, keepdim=True).clamp_min(1)
            probs = torch.where(mark, uniform, probs)
        if cap.record:
            cap._maps.append(probs if cap.keep_graph else probs.detach())
        if cap.record_values:
            cap._values.append(value.detach())
        scales = [
            _per_head(s, layer, batch, heads, probs)
            for s in (cap.intervention.scale if cap.intervention is not None else None, cap.gates)
            if s is not None
        ]
        for s in scales:
            scale = s if scale is None else scale * s

    weights = nn.functional.dropout(probs, p=dropout, training=module.training)
    context = torch.matmul(weights, value)
    if scale is not None:
        context = context * scale
    return context.transpose(1, 2).contiguous(), weights


def _allowed_keys(attention_mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """1 where a query may attend to a key under the model's mask, broadcast to ``like``."""
    if attention_mask.dtype == torch.bool:
        allowed = attention_mask
    else:
        allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    allowed = allowed[:, :, :, : like.shape[-1]]
    return allowed.to(like.dtype).expand_as(like)


_REGISTERED = False
_REGISTER_LOCK = threading.Lock()


def _register() -> None:
    """Register the "bertwatch" attention function and its eager-style mask with transformers (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    with _REGISTER_LOCK:
        if _REGISTERED:
            return
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(IMPLEMENTATION, _attention)
        AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)
        _REGISTERED = True


def _user_implementation(model: nn.Module) -> str | None:
    return getattr(model.config, "_attn_implementation", None)


@contextlib.contextmanager
def _rng_preserved(device: torch.device) -> Iterator[None]:
    cpu_state = torch.get_rng_state()
    cuda_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state, device)


@contextlib.contextmanager
def capture(
    model: nn.Module,
    record: bool = True,
    intervention: Intervention | None = None,
    gates: torch.Tensor | None = None,
    train_mode: bool = False,
    keep_graph: bool = False,
    record_values: bool = False,
) -> Iterator[Capture]:
    """Run the block's forward passes through bertwatch's attention, then restore the model exactly.

    Inside the block the model uses the "bertwatch" implementation and is in eval mode (unless ``train_mode``);
    on exit, also on error, its attention implementation, ``training`` flags and the torch RNG state are
    restored. Each ``model(...)`` call starts a new pass; ``cap.attentions`` holds the last one. With
    ``keep_graph`` the recorded maps stay in the autograd graph, so ``torch.autograd.grad(loss, cap.layer(l))``
    gives ∂L/∂A. With ``record_values`` each layer's value states (bias included) are kept too, as ``cap.values``.
    """
    num_layers, num_heads = model_shape(model)
    _register()
    for name, spec in (
        ("uniform", getattr(intervention, "uniform", None)),
        ("scale", getattr(intervention, "scale", None)),
        ("gates", gates),
    ):
        if spec is not None and tuple(spec.shape[-2:]) != (num_layers, num_heads):
            raise ValueError(f"{name} must end in [layers={num_layers}, heads={num_heads}], got {tuple(spec.shape)}")
    if _STATE.active is not None:
        raise RuntimeError("bertwatch.heads.capture blocks cannot be nested")

    cap = Capture(num_layers, num_heads, record, intervention, gates, keep_graph, record_values)
    previous = _user_implementation(model)
    modes = {m: m.training for m in model.modules()}
    device = next(model.parameters()).device
    hook = model.register_forward_pre_hook(lambda *_: cap.reset())
    try:
        with _rng_preserved(device):
            model.set_attn_implementation(IMPLEMENTATION)
            if _user_implementation(model) != IMPLEMENTATION:
                raise UnsupportedModelError(
                    f"{type(model).__name__} refused the {IMPLEMENTATION!r} attention implementation"
                )
            model.train(train_mode)
            _STATE.active = cap
            yield cap
    finally:
        _STATE.active = None
        hook.remove()
        if previous is not None and _user_implementation(model) != previous:
            model.set_attn_implementation(previous)
        for module, training in modes.items():
            module.training = training
