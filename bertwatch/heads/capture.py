"""See and change attention inside transformers 5 encoders through a registered attention implementation.

transformers 5 removed ``head_mask`` and defaults to SDPA, which returns no probabilities. bertwatch registers
its own implementation, ``"bertwatch"``, and switches a model into it only for the passes it owns (a run
example: :func:`capture`). The implementation computes exactly what eager attention computes, records the post-softmax, pre-dropout
probabilities, and applies per-head interventions (Kovaleva's uniform disabling, Michel's zeroing, any scale)
and gates whose gradients measure head importance.
"""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from bertwatch.core.families import model_family
from bertwatch.heads.adapters import adapter_for
from bertwatch.heads.intervention import Intervention
from bertwatch.heads.layout import pad_token_id
from bertwatch.heads.pruned_modeling import recorded_heads
from bertwatch.heads.rng import rng_untouched
from bertwatch.heads.sharding import is_sharded
from bertwatch.heads.stability.logits import LOGIT_NAMES, allowed_keys, counted_pairs, logit_summary
from bertwatch.heads.unwrap import UnsupportedModelError, not_watched, unwrap

IMPLEMENTATION = "bertwatch"

__all__ = [
    "IMPLEMENTATION",
    "Capture",
    "Intervention",
    "UnsupportedModelError",
    "capture",
    "check_supported",
    "intervene",
    "model_shape",
]


def check_supported(model: nn.Module) -> None:
    """Raise UnsupportedModelError, naming the model type and what to do, unless bertwatch can capture the attention of
    the encoder inside ``model`` exactly (verified by a short pass against eager attention, once per encoder class and
    configuration; an encoder asked again with the same configuration object is not re-read: a pass asks often)."""
    encoder = unwrap(model).model
    if _SUPPORTED.get(encoder) is encoder.config:
        return
    model_type = model_family(encoder, type(encoder).__name__)
    if recorded_heads(encoder.config) is not None:
        raise UnsupportedModelError(
            "this model was physically pruned by 'bertwatch prune' (its layers keep different numbers of heads); "
            "bertwatch's capture needs every layer's heads: watch or ablate the unpruned model, or fine-tune the "
            "pruned one without bertwatch's callbacks"
        )
    # DistilBertConfig, AlbertConfig, DebertaV2Config... have no is_decoder (every config has is_encoder_decoder)
    if encoder.config.is_encoder_decoder or getattr(encoder.config, "is_decoder", False):
        raise not_watched(
            f"this {model_type!r} model is configured as a decoder (is_decoder); bertwatch watches encoders"
        )
    base = encoder.base_model  # the bare encoder: task heads (multiple choice) reshape inputs,
    if is_sharded(encoder) or not hasattr(base, "config"):
        base = encoder  # but a sharded model gathers its weights only when called from its root
    key = (type(base), _config_key(base.config))
    problem = _VERIFIED.get(key, "unverified")
    if problem == "unverified":
        problem = _VERIFIED[key] = _verify(base)
    if problem is not None:
        raise not_watched(problem)
    _SUPPORTED[encoder] = encoder.config


def model_shape(model: nn.Module) -> tuple[int, int]:
    """Return (layers, heads) of a supported encoder (wrappers removed); raises UnsupportedModelError otherwise."""
    check_supported(model)
    config = unwrap(model).model.config
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
        record_logits: bool = False,
    ) -> None:
        self.num_layers, self.num_heads, self.record, self.keep_graph = num_layers, num_heads, record, keep_graph
        self.record_logits, self.record_values = record_logits, record_values
        self.intervention, self.gates = intervention, gates
        self._pairs: tuple | None = None  # (mask, scores' shape, counted_pairs of them): layers share one mask
        self.reset()

    def reset(self, start_layer: int = 0) -> None:
        """Start a new forward pass whose first attention call is layer ``start_layer``."""
        self.start_layer, self._calls = start_layer, 0
        self._maps: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._contexts: list[torch.Tensor | None] = []
        self._logits: list[tuple[torch.Tensor, torch.Tensor]] = []

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

    @property
    def contexts(self) -> torch.Tensor | None:
        """Each head's context Σ_j A[i, j] v_j of the last pass as the model computed it, with A the recorded maps
        (``record_values=True``): ``[batch, layers, heads, query, d_head]``. Pad keys enter with the weight the
        model's mask gives them (exactly 0 for a real query), before any gate multiplies it. None unless every
        layer's context equals that product: a pass that scaled heads by an intervention (zeroing) or dropped
        attention (training dropout) records none."""
        if not self._contexts or any(c is None for c in self._contexts):
            return None
        return torch.stack(self._contexts, dim=1)

    @property
    def logit_summary(self) -> dict[str, torch.Tensor]:
        """``{"max_logit", "logit_std": [batch, layers, heads]}`` of the last pass (``record_logits=True``, see
        ``bertwatch.heads.stability.logits``); empty when nothing was recorded."""
        if not self._logits:
            return {}
        return {name: torch.stack(parts, dim=1) for name, parts in zip(LOGIT_NAMES, zip(*self._logits), strict=True)}

    def keep_logits(self, scores: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        """Reduce one layer's pre-softmax scores ``[batch, heads, T, T]`` (mask not added) to its logit summary."""
        if self.record_logits:
            if self._pairs is None or self._pairs[0] is not attention_mask or self._pairs[1] != scores.shape:
                self._pairs = (attention_mask, scores.shape, *counted_pairs(attention_mask, scores.shape))
            self._logits.append(logit_summary(scores, *self._pairs[2:]))

    def keep_states(self, values: torch.Tensor, context: torch.Tensor | None) -> None:
        """Record one layer's value states and context ``[batch, heads, T, d_head]`` (context None: not exact)."""
        if self.record_values:
            self._values.append(values.detach())
            self._contexts.append(None if context is None else context.detach())

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


def intervene(probs: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What the active capture does to one layer's post-softmax probabilities ``[batch, heads, query, key]``.

    Counts the layer, makes marked heads uniform over the keys ``attention_mask`` allows (boolean, or additive
    with large negatives; any shape that broadcasts), records the result, and returns it with the per-head factor
    ``[batch or 1, heads, 1, 1]`` for the context (None when nothing scales). Outside a capture: unchanged, None.
    """
    cap = _STATE.active
    if cap is None:
        return probs, None
    layer = cap._next_layer()
    batch, heads = probs.shape[0], probs.shape[1]
    if cap.intervention is not None and cap.intervention.uniform is not None:
        mark = _per_head(cap.intervention.uniform, layer, batch, heads, probs)
        allowed = torch.ones_like(probs) if attention_mask is None else allowed_keys(attention_mask, probs)
        uniform = allowed / allowed.sum(-1, keepdim=True).clamp_min(1)
        probs = torch.where(mark, uniform, probs)
    if cap.record:
        cap._maps.append(probs if cap.keep_graph else probs.detach())
    scale = None
    for spec in (cap.intervention.scale if cap.intervention is not None else None, cap.gates):
        if spec is not None:
            s = _per_head(spec, layer, batch, heads, probs)
            scale = s if scale is None else scale * s
    return probs, scale


def _keep_states(values: torch.Tensor, context: torch.Tensor | None) -> None:
    """Hand one layer's value states and context to the active capture (the adapters' recording hook)."""
    cap = _STATE.active
    if cap is not None:
        cap.keep_states(values, context)


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
    cap = _STATE.active
    if cap is not None:
        cap.keep_logits(scores, attention_mask)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs, scale = intervene(probs, attention_mask)
    weights = nn.functional.dropout(probs, p=dropout, training=module.training)
    context = torch.matmul(weights, value)
    if cap is not None and cap.record_values:
        gates_only = cap.intervention is None or cap.intervention.scale is None  # the context is taken before them
        exact = (scale is None or gates_only) and not (module.training and dropout > 0)
        cap.keep_states(value, context if exact else None)
    if scale is not None:
        context = context * scale
    return context.transpose(1, 2).contiguous(), weights


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
    return model.config._attn_implementation


@contextlib.contextmanager
def capture(
    model: nn.Module,
    record: bool = True,
    intervention: Intervention | None = None,
    gates: torch.Tensor | None = None,
    train_mode: bool = False,
    keep_graph: bool = False,
    record_values: bool = False,
    record_logits: bool = False,
) -> Iterator[Capture]:
    """Run the block's forward passes through bertwatch's attention, then restore the model exactly.

    Inside the block the encoder uses the "bertwatch" implementation (or its family's adapter) and is in eval
    mode (unless ``train_mode``); on exit, also on error, its attention implementation, ``training`` flags and
    the torch RNG state are restored. Each forward pass starts a new recording; ``cap.attentions`` holds the
    last one.

    Args:
        model: a supported encoder, possibly wrapped (peft, torch.compile, DDP, sentence-transformers; see
            ``bertwatch.heads.unwrap``): the encoder inside is captured, and calling either the wrapper or the
            encoder inside the block is recorded.
        record: keep the attention probabilities of every layer.
        intervention: per-head changes (:class:`Intervention`: uniform attention, scaled or zeroed contexts).
        gates: float ``[layers, heads]`` or ``[batch, layers, heads]`` multipliers of each head's context; give
            them ``requires_grad`` for Michel's head importance ∂L/∂gate.
        train_mode: leave the model in training mode (dropout on).
        keep_graph: keep the recorded maps in the autograd graph, so ``torch.autograd.grad(loss, cap.layer(l))``
            gives ∂L/∂A.
        record_values: keep each layer's value states (bias included) and the heads' contexts too, as
            ``cap.values`` and ``cap.contexts``.
        record_logits: reduce each head's pre-softmax scores over the real query/key pairs to
            ``cap.logit_summary`` (``max_logit``, ``logit_std``: ``[batch, layers, heads]``), never keeping them.

    Yields:
        The :class:`Capture`: ``attentions`` ``[batch, layers, heads, query, key]`` of the last forward pass.

    Raises:
        UnsupportedModelError: a model bertwatch cannot capture (a decoder, an unknown attention), with the reason.
        ValueError: ``intervention`` or ``gates`` not shaped ``[..., layers, heads]``.
        RuntimeError: a ``capture`` block opened inside another.

    Example:
        >>> import torch, transformers
        >>> from bertwatch.heads.capture import Intervention, capture
        >>> _ = torch.manual_seed(0)
        >>> config = transformers.BertConfig(
        ...     vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
        ... )
        >>> model = transformers.BertModel(config).eval()
        >>> ids = torch.tensor([[2, 7, 8, 9, 3]])
        >>> with capture(model) as cap:
        ...     _ = model(input_ids=ids)
        >>> cap.attentions.shape  # [batch, layers, heads, query, key]
        torch.Size([1, 2, 2, 5, 5])
        >>> off = torch.tensor([[True, False], [False, False]])  # head 0 of layer 0 attends uniformly
        >>> with capture(model, intervention=Intervention.uniform_heads(off)) as cap:
        ...     _ = model(input_ids=ids)
        >>> torch.allclose(cap.attentions[0, 0, 0], torch.full((5, 5), 0.2))
        True
    """
    num_layers, num_heads = model_shape(model)
    for name, spec in (
        ("uniform", intervention.uniform if intervention is not None else None),
        ("scale", intervention.scale if intervention is not None else None),
        ("gates", gates),
    ):
        if spec is not None and tuple(spec.shape[-2:]) != (num_layers, num_heads):
            raise ValueError(f"{name} must end in [layers={num_layers}, heads={num_heads}], got {tuple(spec.shape)}")
    with _open(
        unwrap(model).model,
        Capture(num_layers, num_heads, record, intervention, gates, keep_graph, record_values, record_logits),
        train_mode,
    ):
        yield _STATE.active


@contextlib.contextmanager
def _open(encoder: nn.Module, cap: Capture, train_mode: bool = False) -> Iterator[None]:
    """Make ``cap`` the active capture of ``encoder`` (an unwrapped transformers model) for the block."""
    if _STATE.active is not None:
        raise RuntimeError("bertwatch.heads.capture blocks cannot be nested")
    adapter = adapter_for(encoder)
    previous = _user_implementation(encoder)
    modes = {m: m.training for m in encoder.modules()}
    handles = [encoder.register_forward_pre_hook(lambda *_: cap.reset())]
    try:
        with rng_untouched():
            if adapter is not None:
                handles.extend(
                    adapter.install(encoder, intervene, _keep_states, cap.keep_logits if cap.record_logits else None)
                )
            else:
                _register()
                encoder.set_attn_implementation(IMPLEMENTATION)
                if _user_implementation(encoder) != IMPLEMENTATION:
                    raise UnsupportedModelError(
                        f"{type(encoder).__name__} refused the {IMPLEMENTATION!r} attention implementation"
                    )
            encoder.train(train_mode)
            _STATE.active = cap
            yield
    finally:
        _STATE.active = None
        for handle in handles:
            handle.remove()
        if adapter is None and previous is not None and _user_implementation(encoder) != previous:
            encoder.set_attn_implementation(previous)
        for module, training in modes.items():
            module.training = training


#: Per encoder class and configuration: None when capture was verified exact, else why not (the error message); and
#: each encoder that passed :func:`check_supported`, with its configuration object.
_VERIFIED: dict[tuple[type, str], str | None] = {}
_SUPPORTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _config_key(config: Any) -> str:
    """The configuration's public settings: a class whose attention path depends on them is verified per variant.
    ``problem_type`` is left out: a classifier writes it at its first labelled forward (the head's, not attention's)."""
    settings = {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k != "problem_type"}
    return json.dumps(settings, sort_keys=True, default=str)


_SUPPORT_HINT = (
    "A DropoutHookAdapter in bertwatch.heads.adapters.ADAPTERS would add this family if its attention module ends in "
    "softmax -> self.dropout -> probs @ value"
)


def _probe_inputs(encoder: nn.Module) -> dict[str, torch.Tensor]:
    """Two short sequences, the second right-padded, with ids that are neither padding nor outside the vocabulary."""
    config = encoder.config
    vocab = int(getattr(config, "vocab_size", 0) or 100)  # a config of a model without token ids has none
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(min(5, vocab - 1), vocab, (2, 7), generator=g)
    pad = pad_token_id(None, config)
    ids = ids.masked_fill(ids == pad, (pad + 1) % vocab)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    device = next(encoder.parameters()).device
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def _verify(encoder: nn.Module) -> str | None:
    """Why bertwatch cannot capture ``encoder`` exactly, or None: one pass on a tiny padded input, recorded maps
    and outputs against the model's own eager attention (``output_attentions=True``), plus a bidirectionality
    check. Run once per encoder class and configuration; the model is restored afterwards (implementation,
    modes, RNG)."""
    model_type = model_family(encoder, type(encoder).__name__)
    what = f"{type(encoder).__name__} (model type {model_type!r})"
    layers, heads = int(encoder.config.num_hidden_layers), int(encoder.config.num_attention_heads)
    inputs = _probe_inputs(encoder)
    previous = _user_implementation(encoder)
    modes = {m: m.training for m in encoder.modules()}
    try:
        with torch.no_grad(), rng_untouched():
            encoder.eval()
            if adapter_for(encoder) is None and previous != "eager":
                encoder.set_attn_implementation("eager")
            eager = encoder(**inputs, output_attentions=True)
            if adapter_for(encoder) is None and previous != "eager":
                encoder.set_attn_implementation(previous)
            cap = Capture(layers, heads, True, None, None)
            with _open(encoder, cap):
                captured = encoder(**inputs)
    except UnsupportedModelError:
        return f"{what} does not route its attention through transformers' AttentionInterface. {_SUPPORT_HINT}"
    except Exception as error:  # any failure means: not verified
        failure = f"{type(error).__name__}: {error}"
        return f"{what}: bertwatch could not verify its attention capture ({failure}). {_SUPPORT_HINT}"
    finally:
        if previous is not None and _user_implementation(encoder) != previous:
            encoder.set_attn_implementation(previous)
        for module, training in modes.items():
            module.training = training
    expected = getattr(eager, "attentions", None)  # a plain tuple when the config sets return_dict=False
    if not expected or cap.attentions is None or len(cap._maps) != len(expected) or len(expected) != layers:
        return f"{what} does not route its attention through transformers' AttentionInterface. {_SUPPORT_HINT}"
    low = any(t.dtype in (torch.float16, torch.bfloat16) for t in (expected[0], *cap._maps))  # mixed precision
    expected = torch.stack([a.float() for a in expected], 1)
    keep = inputs["attention_mask"].bool()
    real = keep[:, None, None, :, None] & keep[:, None, None, None, :]
    got = cap.attentions.float()
    tol = 1e-2 if low else 1e-5
    if got.shape != expected.shape or not torch.allclose(
        got[real.expand_as(got)], expected[real.expand_as(expected)], atol=tol, rtol=tol
    ):
        return f"{what}: bertwatch's captured attention differs from the model's own eager attention. {_SUPPORT_HINT}"
    out, ref = captured[0].float(), eager[0].float()
    if out.shape[:2] == keep.shape:
        out, ref = out[keep], ref[keep]
    if out.shape != ref.shape or not torch.allclose(out, ref, atol=10 * tol, rtol=10 * tol):
        return f"{what}: the model's outputs change under bertwatch's capture. {_SUPPORT_HINT}"
    if bool((expected[0, :, :, 0, 1:] == 0).all()):
        return f"{what} attends causally (each token sees only earlier ones); bertwatch watches bidirectional encoders"
    return None
