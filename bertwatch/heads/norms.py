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
:func:`head_grams`. ‖f‖² = v G v with G = W_O^hᵀ W_O^h = R Rᵀ, so the output projection is never applied to every key:
‖f‖ = ‖v R‖ with R d×d.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from bertwatch.core.families import model_family
from bertwatch.core.stat_names import NORM_NAMES
from bertwatch.heads.capture import UnsupportedModelError, model_shape
from bertwatch.heads.roles import TokenRoles

__all__ = [
    "NORM_NAMES",
    "attention_blocks",
    "gram_factors",
    "head_grams",
    "norm_stats",
    "output_projections",
    "supports_norms",
    "transformed_norms",
]


_NORM_CHUNK = 1 << 20
_BERT_LIKE = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "mobilebert")


#: family: (the layer list under the base model, then per layer: the value projection, the attention output
#: projection, and the LayerNorm that takes the residual sum (None: not a post-LN block, so no mixing measures)).
_BLOCKS: dict[str, tuple[str, str, str, str | None]] = {
    **{
        family: ("encoder.layer", "attention.self.value", "attention.output.dense", "attention.output.LayerNorm")
        for family in _BERT_LIKE
    },
    "distilbert": ("transformer.layer", "attention.v_lin", "attention.out_lin", "sa_layer_norm"),
    "deberta-v2": (
        "encoder.layer",
        "attention.self.value_proj",
        "attention.output.dense",
        "attention.output.LayerNorm",
    ),
    "mpnet": ("encoder.layer", "attention.attn.v", "attention.attn.o", "attention.LayerNorm"),
    "modernbert": ("layers", "attn.Wqkv", "attn.Wo", None),
    "albert": (
        "encoder.albert_layer_groups.0.albert_layers",
        "attention.value",
        "attention.dense",
        "attention.LayerNorm",
    ),
}
#: Why a family's attention block is not one post-LN sum x + Attn(x) -> LayerNorm that the mixing measures decompose.
_NOT_DECOMPOSABLE = {
    "modernbert": "ModernBERT is pre-LN (the LayerNorm comes before attention, the residual sum has none after it)",
    "mobilebert": "MobileBERT's residual is its bottleneck input, its values come from another input, and its "
    "'LayerNorm' is NoNorm by default",
}


def _layer_modules(model: nn.Module, what: str) -> list[nn.Module]:
    """Each layer's submodule ``what`` (1: value, 2: output projection, 3: post-attention LayerNorm), in order."""
    num_layers, _ = model_shape(model)
    model_type = model_family(model.config)
    base = getattr(model, "base_model", model)
    paths = _BLOCKS.get(model_type)
    shared_albert = model_type == "albert" and model.config.num_hidden_groups == 1 and model.config.inner_group_num == 1
    if paths is None or (model_type == "albert" and not shared_albert) or paths[what] is None:
        raise UnsupportedModelError(f"bertwatch does not know the attention block of {model_type!r} models")
    layers = list(base.get_submodule(paths[0]))
    found = [layer.get_submodule(paths[what]) for layer in layers]
    if model_type == "albert":
        found = found * num_layers
    if len(found) != num_layers:
        raise UnsupportedModelError(f"found {len(found)} attention blocks for {num_layers} layers")
    return found


def output_projections(model: nn.Module) -> list[nn.Linear]:
    """Each layer's attention output projection (the linear map applied to the concatenated heads), in order.

    Raises UnsupportedModelError for a family whose projection bertwatch does not know.
    """
    try:
        return _layer_modules(model, 2)
    except UnsupportedModelError as err:
        raise UnsupportedModelError(f"norm-based statistics {NORM_NAMES}: {err}; leave them out of stats=") from err


def attention_blocks(model: nn.Module) -> list[tuple[nn.Linear, nn.Linear, nn.LayerNorm]]:
    """(value projection, output projection, post-attention LayerNorm) of each layer, for the mixing measures
    (``bertwatch.heads.mixing_model``).

    Raises UnsupportedModelError, saying why, for a family whose block is not x + Attn(x) -> LayerNorm.
    """
    model_type = model_family(model.config)
    why = _NOT_DECOMPOSABLE.get(model_type)
    if why is None:
        try:
            blocks = list(zip(_layer_modules(model, 1), _layer_modules(model, 2), _layer_modules(model, 3)))
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


def head_grams(model: nn.Module) -> Tensor:
    """G[l, h] = W_O^hᵀ W_O^h ``[layers, heads, d_head, d_head]`` (float32), W_O^h the head's input columns of layer
    l's output projection."""
    _, heads = model_shape(model)
    grams = []
    for linear in output_projections(model):
        weight = linear.weight.detach()  # [out, heads * d_head]
        if hasattr(weight, "full_tensor"):  # an FSDP2 shard: every rank gathers the whole weight together
            weight = weight.full_tensor()
        weight = weight.float()
        if weight.shape[1] % heads:
            raise UnsupportedModelError(f"an output projection of {weight.shape[1]} inputs does not split into {heads}")
        per_head = weight.reshape(weight.shape[0], heads, -1).transpose(0, 1)  # [heads, out, d_head]
        grams.append(per_head.transpose(1, 2) @ per_head)
    return torch.stack(grams)


def gram_factors(grams: Tensor) -> Tensor:
    """R ``[layers, heads, d, d]`` (float32) with R Rᵀ = G for grams ``[layers, heads, d, d]``, so that
    ‖f_h(x)‖ = ‖v R‖: one d×d product and a norm per vector, never a negative square. The Cholesky factor in
    float64, or, when a G is singular (a zero or rank-deficient W_O^h, e.g. a pruned head), U·sqrt(Λ) from the
    eigendecomposition."""
    g = grams.double()
    lower, info = torch.linalg.cholesky_ex(g)
    if bool((info == 0).all()):
        return lower.float()
    eigenvalues, vectors = torch.linalg.eigh(g)
    return (vectors * eigenvalues.clamp_min(0.0).sqrt()[..., None, :]).float()


def transformed_norms(values: Tensor, grams: Tensor, factors: Tensor | None = None) -> Tensor:
    """‖f_h(x_j)‖ = sqrt(v G v): values ``[batch, layers, heads, T, d]``, grams ``[layers, heads, d, d]`` ->
    ``[batch, layers, heads, T]``. ``factors``: :func:`gram_factors` of ``grams`` when already computed.

    Taken a few examples at a time, so the product v·R stays in cache between the matmul and the norm (on CPU this
    is about 1.7× faster than one product of the whole batch)."""
    if factors is None:
        factors = gram_factors(grams)
    factors = factors.to(values.device).contiguous()
    out = torch.empty(values.shape[:-1], device=values.device)
    step = max(1, _NORM_CHUNK // values[:1].numel())
    product = torch.empty(min(step, len(values)), *values.shape[1:], device=values.device)
    for start in range(0, len(values), step):
        v = values[start : start + step]
        part = torch.matmul(v if v.dtype == torch.float32 else v.float(), factors, out=product[: len(v)])
        torch.linalg.vector_norm(part, dim=-1, out=out[start : start + len(v)])
    return out


def norm_stats(
    attn: Tensor,
    values: Tensor,
    grams: Tensor,
    roles: TokenRoles,
    names: Iterable[str] = NORM_NAMES,
    contexts: Tensor | None = None,
) -> dict[str, Tensor]:
    """``{name: [batch, layers, heads]}`` for NORM_NAMES from attn ``[B, L, H, T, T]``, values ``[B, L, H, T, d]``
    and grams ``[L, H, d, d]``; pad queries and keys are ignored, NaN for an example without real tokens.

    ``contexts`` ``[B, L, H, T, d]``: Σ_j A[i, j] v_j as the capture pass recorded it (``Capture.contexts``),
    which saves recomputing it for ``norm_ratio``. The model's context also runs over pad keys, but a real query
    gives them exactly zero weight under the attention mask, so it equals the sum over real keys (to float
    rounding); without ``contexts`` the sum is taken over real keys here.
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
    factors = gram_factors(grams).to(device)
    norms = transformed_norms(values, grams, factors) * keys  # [B, L, H, T]
    masks = [real] + [m.to(device).bool() & real for m in (roles.cls, roles.sep, roles.punct)]
    rows = torch.stack([norms * m[:, None, None, :] for m in masks], dim=-2)  # [B, L, H, 4, T]
    weighted = (rows @ a.mT).mT  # [B, L, H, T, 4]: Σ_j A‖f‖ over real / cls / sep / punct keys (4 rows: fast)
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
