"""Norm-based attention (Kobayashi et al. 2020, "Attention is Not Only a Weight"): each head's attention weights
times the norm of the vector they weight.

For head h of a layer, f_h(x_j) = (x_j W_V + b_V)_h W_O^h: key j's value vector (value bias included, as the model
computes it) through the head's slice of the output projection. The output projection's bias is excluded: it is
added once after the heads are summed, so it belongs to no head. With A the head's map over real keys:

- ``cls_mass_norm`` / ``sep_mass_norm`` / ``punct_mass_norm``: the share of Σ_j A[i,j]·‖f_h(x_j)‖ on the [CLS] /
  [SEP] / "." and "," keys, averaged over real queries i (then over examples), like ``cls_mass`` and its twins;
- ``norm_ratio``: the mean over real queries of ‖Σ_j A[i,j] f_h(x_j)‖ / Σ_j A[i,j]‖f_h(x_j)‖ (1 when the weighted
  vectors point the same way, near 0 when they cancel).

Inputs: ``attn`` ``[batch, layers, heads, T, T]`` and ``values`` ``[batch, layers, heads, T, d_head]`` from one
``capture(model, record_values=True)`` pass, the per-head Gram matrices ``[layers, heads, d_head, d_head]`` of
:func:`head_grams`. ‖f‖² = v G v with G = W_O^hᵀ W_O^h = R Rᵀ, so on the CPU the output projection is never applied to
every key: ‖f‖ = ‖v R‖ with R d×d (its Cholesky factor). On a GPU, where asking whether a factorisation succeeded
would stall the device, R is W_O^h itself (:func:`head_factors`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from bertwatch.core.families import model_family
from bertwatch.core.stat_names import NORM_NAMES
from bertwatch.heads.capture import UnsupportedModelError, model_shape
from bertwatch.heads.host import reads_free
from bertwatch.heads.roles import TokenRoles

__all__ = [
    "NORM_NAMES",
    "attention_blocks",
    "gram_factors",
    "head_factors",
    "head_grams",
    "norm_stats",
    "output_projections",
    "query_key_weights",
    "supports_norms",
    "transformed_norms",
]


_NORM_CHUNK = 1 << 20
_WIDE_CHUNK = 1 << 24
_BERT_LIKE = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "mobilebert")


#: family -> (the layer list under the base model, then per layer: the query, key and value projections, the
#: attention output projection, and the LayerNorm that takes the residual sum (None: not a post-LN block, so no
#: mixing measures)); a query or key found in a fused ``Wqkv`` is its first or second third.
_BLOCKS: dict[str, tuple[str, str, str, str, str, str | None]] = {
    **{
        family: (
            "encoder.layer",
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
        )
        for family in _BERT_LIKE
    },
    "distilbert": ("transformer.layer", "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
                   "sa_layer_norm"),
    "deberta-v2": ("encoder.layer", "attention.self.query_proj", "attention.self.key_proj",
                   "attention.self.value_proj", "attention.output.dense", "attention.output.LayerNorm"),
    "mpnet": ("encoder.layer", "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o",
              "attention.LayerNorm"),
    "modernbert": ("layers", "attn.Wqkv", "attn.Wqkv", "attn.Wqkv", "attn.Wo", None),
    "albert": ("encoder.albert_layer_groups.0.albert_layers", "attention.query", "attention.key", "attention.value",
               "attention.dense", "attention.LayerNorm"),
}  # fmt: skip
_PARTS = ("query", "key", "value", "output", "layer_norm")
#: Why a family's attention block is not one post-LN sum x + Attn(x) -> LayerNorm that the mixing measures decompose.
_NOT_DECOMPOSABLE = {
    "modernbert": "ModernBERT is pre-LN (the LayerNorm comes before attention, the residual sum has none after it)",
    "mobilebert": "MobileBERT's residual is its bottleneck input, its values come from another input, and its "
    "'LayerNorm' is NoNorm by default",
}


def _layer_modules(model: nn.Module, part: str, what: str) -> list[nn.Module]:
    """Each layer's ``part`` (one of ``_PARTS``) in order; UnsupportedModelError naming ``what`` (the statistics
    that need it) for a family bertwatch does not know."""
    num_layers, _ = model_shape(model)
    model_type = model_family(model.config)
    base = model.base_model
    paths = _BLOCKS.get(model_type)
    shared = model_type == "albert" and model.config.num_hidden_groups == 1 and model.config.inner_group_num == 1
    path = None if paths is None else paths[1 + _PARTS.index(part)]
    if path is None or (model_type == "albert" and not shared):
        raise UnsupportedModelError(
            f"{what} do not know the attention {part} of {model_type!r} models; leave them out of stats="
        )
    found = [layer.get_submodule(path) for layer in base.get_submodule(paths[0])]
    if shared:
        found = found * num_layers
    if len(found) != num_layers:
        raise UnsupportedModelError(f"found {len(found)} attention {part} modules for {num_layers} layers")
    return found


def output_projections(model: nn.Module) -> list[nn.Linear]:
    """Each layer's attention output projection (the linear map applied to the concatenated heads), in order.

    Raises UnsupportedModelError for a family whose projection bertwatch does not know.
    """
    return _layer_modules(model, "output", f"norm-based statistics {NORM_NAMES}")


def query_key_weights(model: nn.Module, what: str = "query/key statistics") -> tuple[Tensor, Tensor]:
    """(W_Q, W_K), each ``[layers, heads * d_head, hidden]`` (detached, the model's dtype): every layer's query and
    key projection weights as the model applies them (an adapter's update included, see :func:`_applied_weight`),
    rows head by head as the model splits them (a fused ``Wqkv`` sliced). Raises UnsupportedModelError, naming
    ``what``, for a family whose projections bertwatch does not know."""
    weights = []
    for part in ("query", "key"):
        per_layer = []
        for linear in _layer_modules(model, part, what):
            weight = _applied_weight(linear)
            if model_family(model.config) == "modernbert":
                third = weight.shape[0] // 3
                weight = weight[:third] if part == "query" else weight[third : 2 * third]
            per_layer.append(weight)
        weights.append(torch.stack(per_layer))
    return weights[0], weights[1]


def _applied_weight(linear: nn.Module) -> Tensor:
    """The ``[out, in]`` weight of a projection as the forward applies it, detached. A plain ``nn.Linear``'s own
    (an FSDP2 shard gathered); a wrapped one (peft's LoRA layers keep the pretrained weight in ``base_layer`` and
    add their update in ``forward``) measured as f(e_k) − f(0) on the unit vectors, in eval mode (no adapter
    dropout), so the update is in the number."""
    if type(linear) is nn.Linear:
        weight = linear.weight.detach()
        return weight.full_tensor() if hasattr(weight, "full_tensor") else weight
    base = getattr(linear, "base_layer", linear)  # peft's LoRA layers hold the pretrained linear map there
    like = base.weight
    eye = torch.eye(base.in_features, device=like.device, dtype=like.dtype)  # made there: no copy from the host
    points = torch.cat([torch.zeros_like(eye[:1]), eye])
    modes = {m: m.training for m in linear.modules()}
    linear.eval()
    try:
        with torch.no_grad():
            out = linear(points)
    finally:
        for module, training in modes.items():
            module.training = training
    return (out[1:] - out[:1]).T.contiguous()


def attention_blocks(model: nn.Module) -> list[tuple[nn.Linear, nn.Linear, nn.LayerNorm]]:
    """(value projection, output projection, post-attention LayerNorm) of each layer, for the mixing measures
    (``bertwatch.heads.mixing.mixing_model``).

    Raises UnsupportedModelError, saying why, for a family whose block is not x + Attn(x) -> LayerNorm.
    """
    model_type = model_family(model.config)
    why = _NOT_DECOMPOSABLE.get(model_type)
    if why is None:
        try:
            blocks = list(zip(*(_layer_modules(model, part, "the mixing measures") for part in _PARTS[2:])))
        except UnsupportedModelError as err:
            why = str(err)
    if why is None and not all(isinstance(ln, nn.LayerNorm) for _, _, ln in blocks):
        why = "its post-attention normalisation is not an nn.LayerNorm"
    if why is None and not all(isinstance(v, nn.Linear) and isinstance(o, nn.Linear) for v, o, _ in blocks):
        why = "its value or output projection is not an nn.Linear"
    if why is not None:
        raise UnsupportedModelError(
            f"the context-mixing measures (ALTI, mixing ratio, value zeroing) need each layer's attention block to be "
            f"x + Attn(x) -> LayerNorm, and {model_type!r} models are not: {why}; leave the mixing statistics out of "
            "stats= (attention rollout and the weight- and norm-based masses still work)"
        )
    return blocks


def supports_norms(model: nn.Module) -> bool:
    """Whether :func:`output_projections` knows this model."""
    try:
        output_projections(model)
    except (UnsupportedModelError, AttributeError):
        return False
    return True


def _head_weights(model: nn.Module) -> Tensor:
    """W_O^h ``[layers, heads, d_head, out]`` (float32): each head's input columns of its layer's output projection,
    transposed (an adapter's update included)."""
    _, heads = model_shape(model)
    per_layer = []
    for linear in output_projections(model):
        weight = _applied_weight(linear).float()  # [out, heads * d_head], an adapter's update included
        if weight.shape[1] % heads:
            raise UnsupportedModelError(f"an output projection of {weight.shape[1]} inputs does not split into {heads}")
        per_layer.append(weight.reshape(weight.shape[0], heads, -1).permute(1, 2, 0))  # [heads, d_head, out]
    return torch.stack(per_layer)


def head_grams(model: nn.Module) -> Tensor:
    """G[l, h] = W_O^hᵀ W_O^h ``[layers, heads, d_head, d_head]`` (float32), W_O^h the head's input columns of layer
    l's output projection."""
    weights = _head_weights(model)
    return weights @ weights.mT


def head_factors(model: nn.Module) -> Tensor:
    """R ``[layers, heads, d_head, k]`` with R Rᵀ = :func:`head_grams`, for :func:`norm_stats`' ``factors``: where
    the host reads a tensor for free (``heads.host.reads_free``), the head-sized factors of :func:`gram_factors`
    (k = d_head: a d×d product per vector); elsewhere each head's own W_O^h (k = the projection's width), which
    needs no factorisation and so nothing read back from the device (:func:`gram_factors` asks whether every
    Cholesky factorisation succeeded)."""
    weights = _head_weights(model)
    return gram_factors(weights @ weights.mT) if reads_free(weights.device) else weights


def gram_factors(grams: Tensor) -> Tensor:
    """R ``[layers, heads, d, d]`` (float32) with R Rᵀ = G for grams ``[layers, heads, d, d]``, so that
    ‖f_h(x)‖ = ‖v R‖: one d×d product and a norm per vector, never a negative square. The Cholesky factor in
    float64, or, when a G is singular (a zero or rank-deficient W_O^h, e.g. a pruned head), U·sqrt(Λ) from the
    eigendecomposition. A head whose G is not finite (a diverged run) gets a NaN factor, so its norms are NaN."""
    g = grams.double()
    finite = g.isfinite().all(-1).all(-1)[..., None, None]  # [layers, heads, 1, 1]
    g = g.where(finite, torch.eye(g.shape[-1], dtype=g.dtype, device=g.device))
    lower, info = torch.linalg.cholesky_ex(g)
    if not bool((info == 0).all()):
        eigenvalues, vectors = torch.linalg.eigh(g)
        lower = vectors * eigenvalues.clamp_min(0.0).sqrt()[..., None, :]
    return lower.where(finite, torch.nan).float()


def transformed_norms(values: Tensor, grams: Tensor, factors: Tensor | None = None) -> Tensor:
    """‖f_h(x_j)‖ = sqrt(v G v): values ``[batch, layers, heads, T, d]``, grams ``[layers, heads, d, d]`` ->
    ``[batch, layers, heads, T]``. ``factors``: any R ``[layers, heads, d, k]`` with R Rᵀ = G, when already computed
    (:func:`gram_factors`, :func:`head_factors`).

    Taken a few examples at a time, so the product v·R stays in cache between the matmul and the norm (on CPU this
    is about 1.7× faster than one product of the whole batch); with factors wider than a head (k > d), one layer of
    a few examples at a time, so the ``[.., k]`` products stay small."""
    if factors is None:
        factors = gram_factors(grams)
    factors = factors.to(values.device).contiguous()
    if factors.shape[-1] != values.shape[-1]:
        return _wide_norms(values, factors)
    out = torch.empty(values.shape[:-1], device=values.device)
    step = max(1, _NORM_CHUNK // values[:1].numel())
    product = torch.empty(min(step, len(values)), *values.shape[1:], device=values.device)
    for start in range(0, len(values), step):
        v = values[start : start + step]
        part = torch.matmul(v if v.dtype == torch.float32 else v.float(), factors, out=product[: len(v)])
        torch.linalg.vector_norm(part, dim=-1, out=out[start : start + len(v)])
    return out


def _wide_norms(values: Tensor, factors: Tensor) -> Tensor:
    """:func:`transformed_norms` with factors ``[layers, heads, d, k]`` wider than a head: ‖v R‖ a layer and a few
    examples at a time (products of at most ``_WIDE_CHUNK`` elements)."""
    out = torch.empty(values.shape[:-1], device=values.device)
    step = max(1, _WIDE_CHUNK // max(1, values.shape[2] * values.shape[3] * factors.shape[-1]))
    for layer in range(values.shape[1]):
        for start in range(0, len(values), step):
            v = values[start : start + step, layer]
            part = torch.matmul(v if v.dtype == torch.float32 else v.float(), factors[layer])
            torch.linalg.vector_norm(part, dim=-1, out=out[start : start + len(v), layer])
    return out


def norm_stats(
    attn: Tensor,
    values: Tensor,
    grams: Tensor | None,
    roles: TokenRoles,
    names: Iterable[str] = NORM_NAMES,
    contexts: Tensor | None = None,
    factors: Tensor | None = None,
) -> dict[str, Tensor]:
    """``{name: [batch, layers, heads]}`` for NORM_NAMES from attn ``[B, L, H, T, T]``, values ``[B, L, H, T, d]``
    and grams ``[L, H, d, d]`` (or their ``factors``); pad queries and keys are ignored, NaN for an example without real tokens.

    ``contexts`` ``[B, L, H, T, d]``: Σ_j A[i, j] v_j as the capture pass recorded it (``Capture.contexts``),
    which saves recomputing it for ``norm_ratio``. The model's context also runs over pad keys, but a real query
    gives them exactly zero weight under the attention mask, so it equals the sum over real keys (to float
    rounding); without ``contexts`` the sum is taken over real keys here. ``factors``: the grams' factors
    (:func:`head_factors`, for a probe pass that measures many batches with the same weights), else
    :func:`gram_factors` of ``grams``.
    """
    names = list(names)
    unknown = [n for n in names if n not in NORM_NAMES]
    if unknown:
        raise ValueError(f"unknown norm statistic {unknown[0]!r}; known: {NORM_NAMES}")
    if attn.dim() != 5 or values.shape[:4] != attn.shape[:4]:
        raise ValueError(f"attn {tuple(attn.shape)} and values {tuple(values.shape)} must share [B, L, H, T]")
    if contexts is not None and contexts.shape != values.shape:
        raise ValueError(f"contexts {tuple(contexts.shape)} must be shaped like values {tuple(values.shape)}")
    device = attn.device
    real = roles.real.to(device).bool()
    keys = real[:, None, None, :].float()
    a = attn if attn.dtype == torch.float32 else attn.float()
    factors = (gram_factors(grams) if factors is None else factors).to(device)
    norms = transformed_norms(values, grams, factors) * keys  # [B, L, H, T]
    masks = [real] + [m.to(device).bool() & real for m in (roles.cls, roles.sep, roles.punct)]
    rows = torch.stack([norms * m[:, None, None, :] for m in masks], dim=-2)  # [B, L, H, 4, T]
    weighted = a @ rows.mT  # [B, L, H, T, 4]: Σ_j A‖f‖ over real / cls / sep / punct keys (one pass over the maps)
    total = weighted[..., 0]
    queries = real[:, None, None, :]
    n = real.sum(-1).float().view(-1, 1, 1)

    def mean_over_queries(per_query: Tensor) -> Tensor:
        valid = queries & (total > 0)
        return torch.where(valid, per_query, 0.0).sum(-1) / n

    out = {}
    for k, name in enumerate(("cls_mass_norm", "sep_mass_norm", "punct_mass_norm"), start=1):
        if name in names:
            out[name] = mean_over_queries(weighted[..., k] / total.clamp_min(1e-30))
    if "norm_ratio" in names:
        if contexts is None:
            contexts = a @ (values.float() * keys[..., None])  # Σ_j A[i, j] v_j over real keys: [B, L, H, T, d]
        summed = transformed_norms(contexts, grams, factors)
        out["norm_ratio"] = mean_over_queries(summed / total.clamp_min(1e-30))
    return {name: torch.where(n > 0, value, math.nan) for name, value in out.items()}
