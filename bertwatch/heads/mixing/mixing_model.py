"""The model side of the context-mixing measures (``bertwatch.heads.mixing.mixing_scores``): each layer's
attention-block weights, the block inputs recorded during a pass, the statistics of a probe batch, every measure's maps,
and value zeroing.

Which modules form a family's attention block (value projection, output projection, post-attention LayerNorm) is
``bertwatch.heads.norms.norm_based.attention_blocks``; a family whose block is not x + Attn(x) -> LayerNorm is refused
there.

>>> weights = block_weights(model)
>>> with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
...     model(**batch)
>>> stats = mixing_stats(cap.attentions, cap.values, blocks.residuals, weights, roles, MIXING_NAMES)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import Tensor, nn

from bertwatch.core.stat_names import MIXING_LAYER_NAMES, MIXING_NAMES
from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.mixing.mixing_scores import (
    BlockWeights,
    alti_matrix,
    block_terms,
    compose,
    key_mass,
    mixing_ratios,
    norm_maps,
    rollout,
    value_zeroing_scores,
)
from bertwatch.heads.norms.norm_based import attention_blocks, head_grams, transformed_norms
from bertwatch.heads.roles import TokenRoles

__all__ = [
    "MIXING_NAMES",
    "BlockRecorder",
    "block_weights",
    "mixing_maps",
    "mixing_stats",
    "record_blocks",
    "supports_mixing",
    "value_zeroing",
]


def supports_mixing(model: nn.Module) -> bool:
    """Whether ``attention_blocks`` knows this model's attention block (so every mixing measure is exact)."""
    try:
        attention_blocks(model)
    except (ValueError, AttributeError):  # UnsupportedModelError is a ValueError
        return False
    return True


def block_weights(model: nn.Module) -> list[BlockWeights]:
    """Each layer's :class:`~bertwatch.heads.mixing.mixing_scores.BlockWeights` (float32, detached, on the model's
    device).

    Raises UnsupportedModelError (from ``attention_blocks``) for a family the decomposition does not fit."""
    _, heads = model_shape(model)
    out = []
    for _, projection, norm in attention_blocks(model):
        weight = projection.weight.detach().float()  # [d, heads * d_head]
        per_head = weight.T.reshape(heads, -1, weight.shape[0])  # [heads, d_head, d]
        bias = projection.bias.detach().float() if projection.bias is not None else weight.new_zeros(weight.shape[0])
        gamma = norm.weight.detach().float() if norm.weight is not None else weight.new_ones(weight.shape[0])
        beta = norm.bias.detach().float() if norm.bias is not None else weight.new_zeros(weight.shape[0])
        out.append(BlockWeights(per_head, bias, gamma, beta, float(norm.eps)))
    return out


class BlockRecorder:
    """Each layer's attention-block input x ``[batch, T, d]`` of the last pass: the LayerNorm's input (the residual
    sum z) minus the output projection's output, as the model computed them (eval mode: no dropout between).

    During the pass it keeps the output projection's output (detached, no copy) and x (one subtraction per layer):
    2·batch·layers·T·d numbers held until the recorder is dropped, next to nothing in time.
    """

    def __init__(self, num_layers: int, out_biases: list[Tensor]) -> None:
        self.num_layers = num_layers
        self._biases = out_biases
        self._outputs: list[Tensor] = []
        self._residuals: list[Tensor] = []

    def _stacked(self, parts: list[Tensor]) -> Tensor:
        if not self.complete:
            raise RuntimeError(f"recorded {len(self._residuals)} attention blocks, the model has {self.num_layers}")
        return torch.stack(parts, dim=1)

    @property
    def complete(self) -> bool:
        """Whether the last pass recorded every layer's block."""
        return len(self._residuals) == self.num_layers == len(self._outputs)

    @property
    def residuals(self) -> Tensor:
        """The blocks' inputs x ``[batch, layers, T, d]`` float32 of the last pass."""
        return self._stacked(self._residuals)

    @property
    def mixed(self) -> Tensor:
        """The attention outputs without the output projection's bias, Σ_h Σ_j α^h_ij f^h(x_j) ``[batch, layers, T,
        d]`` float32 of the last pass (``bertwatch.heads.mixing.mixing_scores.block_terms``' ``mixed``)."""
        return self._stacked([out.float() - bias.to(out.device) for out, bias in zip(self._outputs, self._biases)])

    def take_output(self, output: Tensor) -> None:
        if len(self._residuals) == self.num_layers:  # a new pass
            self._outputs, self._residuals = [], []
        self._outputs.append(output.detach())

    def take_sum(self, total: Tensor) -> None:
        self._residuals.append(total.detach().float() - self._outputs[-1].float())


@contextlib.contextmanager
def record_blocks(model: nn.Module) -> Iterator[BlockRecorder]:
    """Record every layer's attention-block input during the passes inside the block (see :class:`BlockRecorder`)."""
    num_layers, _ = model_shape(model)
    recorder = BlockRecorder(num_layers, [w.out_bias for w in block_weights(model)])
    handles = []
    seen: set[int] = set()
    for _, projection, norm in attention_blocks(model):
        if id(projection) in seen:  # ALBERT: one shared layer, called once per layer
            continue
        seen.add(id(projection))
        handles.append(projection.register_forward_hook(lambda _m, _a, out: recorder.take_output(out)))
        handles.append(norm.register_forward_pre_hook(lambda _m, args: recorder.take_sum(args[0])))
    try:
        yield recorder
    finally:
        for handle in handles:
            handle.remove()


def _query_mean(per_query: Tensor, real: Tensor) -> Tensor:
    """``[B, *, T]`` -> ``[B, *]``: the mean over real, non-NaN queries (NaN when there is none); real ``[B, T]``."""
    real = real.view(real.shape[0], *([1] * (per_query.dim() - 2)), real.shape[-1])
    valid = real & ~torch.isnan(per_query)
    count = valid.sum(-1)
    total = torch.where(valid, per_query, 0.0).sum(-1)
    return torch.where(count > 0, total / count.clamp_min(1), torch.nan)


def mixing_stats(
    attn: Tensor,
    values: Tensor,
    residuals: Tensor | None,
    weights: list[BlockWeights],
    roles: TokenRoles,
    names: Iterable[str] = MIXING_NAMES,
    mixed: Tensor | None = None,
    contexts: Tensor | None = None,
) -> dict[str, Tensor]:
    """``{name: [batch, layers, heads]}`` for the per-head names and ``{name: [batch, layers, 1]}`` for the per-layer
    names (``core.stat_names.MIXING_HEAD_NAMES`` / ``MIXING_LAYER_NAMES``) from one probe batch: attn ``[B, L, H, T,
    T]``, values ``[B, L, H, T, d_head]``, residuals ``[B, L, T, d]`` (:func:`record_blocks`; None when only rollout
    is asked), weights of :func:`block_weights`, ``mixed`` ``[B, L, T, d]`` the attention outputs without b_O
    (``BlockRecorder.mixed``: saves forming them again), else ``contexts`` ``[B, L, H, T, d_head]`` (``Capture
    .contexts``: the mixing ratio forms them through W_O; ALTI ignores them), else both are formed from attn and
    values. Pad tokens never enter; NaN for an example without real tokens.
    """
    names = list(names)
    unknown = [n for n in names if n not in MIXING_NAMES]
    if unknown:
        raise ValueError(f"unknown mixing statistic {unknown[0]!r}; known: {MIXING_NAMES}")
    real = roles.real.to(attn.device).bool()
    cls, sep = roles.cls.to(attn.device), roles.sep.to(attn.device)
    out: dict[str, list[Tensor]] = {n: [] for n in names}
    needs_block = [n for n in names if "rollout" not in n]
    if needs_block and residuals is None:
        raise ValueError(f"{needs_block} need the attention blocks' inputs (record_blocks)")
    if "mixing_ratio" in names:
        out_weights = torch.stack([w.out_weight for w in weights]).to(attn.device)
        gammas = torch.stack([w.ln_weight for w in weights]).to(attn.device)
        ratios = mixing_ratios(attn, values, residuals, out_weights, gammas, real, mixed, contexts)
        out["mixing_ratio"] = list(_query_mean(ratios, real)[..., None].unbind(1))
    alti = [n for n in needs_block if "alti" in n]
    for layer in range(attn.shape[1] if alti else 0):
        own = None if mixed is None else mixed[:, layer]
        terms = block_terms(attn[:, layer], values[:, layer], residuals[:, layer], weights[layer], real, own)
        if {"cls_mass_alti", "sep_mass_alti"} & set(names):
            per_head = alti_matrix(terms, per_head=True)
            for name, keys in (("cls_mass_alti", cls), ("sep_mass_alti", sep)):
                if name in names:
                    out[name].append(key_mass(per_head, keys, real))
        if {"cls_mass_alti_layer", "sep_mass_alti_layer"} & set(names):
            whole = alti_matrix(terms)
            for name, keys in (("cls_mass_alti_layer", cls), ("sep_mass_alti_layer", sep)):
                if name in names:
                    out[name].append(key_mass(whole, keys, real)[:, None])
    if {"cls_mass_rollout", "sep_mass_rollout"} & set(names):
        rolled = rollout(attn, real)
        for name, keys in (("cls_mass_rollout", cls), ("sep_mass_rollout", sep)):
            if name in names:
                out[name] = list(key_mass(rolled, keys, real)[..., None].unbind(1))
    result = {name: torch.stack(parts, dim=1) for name, parts in out.items()}
    assert all(name in MIXING_LAYER_NAMES or v.shape[-1] == attn.shape[2] for name, v in result.items())
    return result


def mixing_maps(
    model: nn.Module, batch: Mapping[str, Tensor], real: Tensor, value_zeroing_too: bool = False
) -> dict[str, Tensor]:
    """Every measure's maps of one batch, rows receivers and columns sources, pad rows and columns 0:
    ``weights`` and ``norms`` ``[B, L, H, T, T]``; ``alti``, ``alti_composed``, ``rollout`` (and ``value_zeroing``
    with ``value_zeroing_too``) ``[B, L, T, T]``. The model runs in eval mode under ``torch.no_grad``.

    Example:
        >>> maps = mixing_maps(model, batch, batch["attention_mask"].bool())  # doctest: +SKIP
        >>> maps["alti_composed"][0, -1, 0]  # doctest: +SKIP
    """
    weights = block_weights(model)
    real = real.bool()
    with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
        model(**batch)
    attn, values = cap.attentions.float(), cap.values.float()
    both = real[:, None, None, :, None] & real[:, None, None, None, :]
    out = {"weights": torch.where(both, attn, 0.0)}
    out["norms"] = norm_maps(attn, transformed_norms(values, head_grams(model)), real)
    residuals = blocks.residuals
    layers = [
        alti_matrix(block_terms(attn[:, l], values[:, l], residuals[:, l], weights[l], real))
        for l in range(attn.shape[1])
    ]
    out["alti"] = torch.stack(layers, dim=1)
    out["alti_composed"] = compose(out["alti"])
    out["rollout"] = rollout(attn, real)
    if value_zeroing_too:
        out["value_zeroing"] = value_zeroing(model, batch, real)
    return out


def _zeroing_hooks(model: nn.Module, plan: list[tuple[int, int]]) -> list:
    """Hooks that zero, in row k of the batch, the value vectors (every head) of token ``plan[k][1]`` in layer
    ``plan[k][0]`` only."""
    num_layers, _ = model_shape(model)
    by_module: dict[int, tuple[nn.Module, list[int]]] = {}
    for layer, (value, _, _) in enumerate(attention_blocks(model)):
        by_module.setdefault(id(value), (value, []))[1].append(layer)
    handles = []
    for module, layers in by_module.values():
        calls = [0]

        def zero(_m: nn.Module, _a: tuple, out: Tensor, layers: list[int] = layers, calls: list[int] = calls) -> Tensor:
            layer = layers[calls[0] % len(layers)]
            calls[0] += 1
            rows = [k for k, (target, _) in enumerate(plan) if target == layer]
            if not rows:
                return out
            out = out.clone()
            out[rows, [plan[k][1] for k in rows]] = 0.0
            return out

        handles.append(module.register_forward_hook(zero))
    return handles


def value_zeroing(model: nn.Module, batch: Mapping[str, Tensor], real: Tensor, max_batch: int = 64) -> Tensor:
    """Mohebbi et al. 2023's value zeroing ``[B, L, T, T]``: for each example alone (its real tokens only), layer l
    and real token t, the layer's output (``hidden_states[l+1]``) with t's value vectors zeroed in every head of
    layer l only (the layer input and the attention weights unchanged) against the plain output, scored by
    :func:`~bertwatch.heads.mixing.mixing_scores.value_zeroing_scores`.

    Cost: L·n forward passes of an n-token example (in batches of ``max_batch`` zeroed variants), i.e. about L·n
    times the cost of measuring it once: keep it to a sample (``bertwatch analyze --mixing --value-zeroing``).
    """
    num_layers, _ = model_shape(model)
    attention_blocks(model)
    real = real.bool()
    out = torch.zeros(real.shape[0], num_layers, real.shape[1], real.shape[1])
    for b in range(real.shape[0]):
        keep = real[b]
        example = {k: v[b : b + 1][:, keep.to(v.device)] if v.dim() >= 2 and v.shape[1] == len(keep) else v[b : b + 1]
                   for k, v in batch.items()}  # fmt: skip
        n = int(keep.sum())
        with torch.no_grad():
            original = model(**example, output_hidden_states=True).hidden_states
        plan = [(layer, t) for layer in range(num_layers) for t in range(n)]
        zeroed = []
        for start in range(0, len(plan), max_batch):
            part = plan[start : start + max_batch]
            inputs = {k: v.repeat(len(part), *([1] * (v.dim() - 1))) for k, v in example.items()}
            handles = _zeroing_hooks(model, part)
            try:
                with torch.no_grad():
                    states = model(**inputs, output_hidden_states=True).hidden_states
            finally:
                for handle in handles:
                    handle.remove()
            zeroed.extend(states[layer + 1][k] for k, (layer, _) in enumerate(part))
        index = torch.nonzero(keep).squeeze(-1).cpu()
        for layer in range(num_layers):
            variants = torch.stack(zeroed[layer * n : (layer + 1) * n]).cpu()  # [t, i, d]
            scores = value_zeroing_scores(variants, original[layer + 1][0].cpu(), torch.ones(n, dtype=torch.bool))
            out[b, layer][index[:, None], index[None, :]] = scores.float()
    return out
