"""Context mixing beyond raw attention, as pure tensor functions: how much of each token's representation after a
layer's attention block comes from every other token, with the value vectors, the output projection, the residual
connection and the LayerNorm taken into account.

One post-LN attention block (BERT's layout) computes, for real tokens i, j of one example,

    z_i = x_i + Σ_h Σ_j α^h_ij f^h(x_j) + b_O,        y_i = LN(z_i) = γ ⊙ (z_i − mean(z_i)) / σ_i + β,

with f^h(x_j) = (x_j W_V + b_V)_h W_O^h (the value bias included: ``bertwatch.heads.norms.norm_based``), σ_i =
sqrt(var(z_i) + ε) (biased variance, as ``nn.LayerNorm``). Once σ_i is fixed at its actual value, LN is linear in
the summands, so y_i = Σ_j T_i(x_j) + g_i(b_O) + β with g_i(v) = γ ⊙ (v − mean(v)) / σ_i and

    T_i(x_j) = g_i(Σ_h α^h_ij f^h(x_j) + δ_ij x_i)        (Kobayashi et al. 2021; Ferrando et al. 2022)

(the residual only on the diagonal; b_O and β attributed to no token). From it:

- :func:`mixing_ratios` (Kobayashi 2021, "AttnResLn-N"): ‖Σ_{j≠i} T_i(x_j)‖ / (‖Σ_{j≠i} T_i(x_j)‖ + ‖T_i(x_i)‖),
  the share of a token's output that comes from the other tokens; σ_i cancels, and it needs no token×token tensor:
  one output-projection-sized product per layer.
- :func:`alti_matrix` (ALTI): c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁), rows normalised to sum 1 over real keys;
  ``per_head=True`` does the same inside each head (resultant Σ_j g_i(α^h_ij f^h(x_j)), no residual).
- :func:`compose`: ALTI's composition over layers R^(l) = C^(l) R^(l−1) (no identity added: the residual is in C).
- :func:`rollout` (Abnar & Zuidema 2020): the head average of α, the residual as ½(Ā + I), composed the same way.
- :func:`value_zeroing_scores` (Mohebbi et al. 2023): cosine distances between a layer's output and its output with
  one token's value vectors zeroed, rows normalised (``bertwatch.heads.mixing.mixing_model`` runs the zeroed passes).
- :func:`key_mass`: the mean over real queries of a map's mass on chosen keys ([CLS], [SEP]).

Every function takes the padded batch and a ``real`` mask ``[batch, T]``; pad keys and pad queries never enter,
so a real token's value does not depend on its batch or its padding. Rows are receivers (query i), columns sources
(key j). Pad rows and columns of the returned maps are 0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "BlockWeights",
    "alti_matrix",
    "block_terms",
    "compose",
    "decomposition",
    "key_mass",
    "mixing_ratio",
    "mixing_ratios",
    "norm_maps",
    "rollout",
    "transformed_vectors",
    "value_zeroing_scores",
]

_ROW_CHUNK = 1 << 22  # elements of a [batch, rows, T, d] block of the L1 distances held at once


@dataclass(frozen=True)
class BlockWeights:
    """One layer's attention-block weights: ``out_weight`` W_O per head ``[heads, d_head, d]``, ``out_bias`` b_O
    ``[d]``, the post-attention LayerNorm's ``ln_weight`` γ and ``ln_bias`` β ``[d]`` and ``ln_eps`` ε."""

    out_weight: Tensor
    out_bias: Tensor
    ln_weight: Tensor
    ln_bias: Tensor
    ln_eps: float


@dataclass(frozen=True)
class BlockTerms:
    """What every measure of one layer shares (see :func:`block_terms`); float32 or the inputs' float dtype.

    ``attn`` ``[B, H, T, T]`` with pad rows and keys zeroed; ``values`` ``[B, H, T, d_head]``; ``mixed`` the
    attention output without b_O, Σ_h Σ_j α^h_ij f^h(x_j) ``[B, T, d]``; ``residual`` x ``[B, T, d]``; ``sigma``
    σ_i ``[B, T]``; ``output`` y = LN(z) ``[B, T, d]``; ``real`` ``[B, T]``. ``f`` (the transformed vectors
    ``[B, H, T, d]``) is formed on first use: only ALTI needs it.
    """

    attn: Tensor
    values: Tensor
    mixed: Tensor
    residual: Tensor
    sigma: Tensor
    output: Tensor
    real: Tensor
    weights: BlockWeights

    @functools.cached_property
    def f(self) -> Tensor:
        return transformed_vectors(self.values, self.weights.out_weight)

    def g(self, v: Tensor) -> Tensor:
        """g_i(v) = γ ⊙ (v − mean(v)) / σ_i for v ``[B, T, ..., d]`` whose second axis is the query i."""
        sigma = self.sigma.view(*self.sigma.shape, *([1] * (v.dim() - 2)))
        return (v - v.mean(-1, keepdim=True)) * self.weights.ln_weight / sigma


def transformed_vectors(values: Tensor, out_weight: Tensor) -> Tensor:
    """f^h(x_j) = v^h_j W_O^h: values ``[B, H, T, d_head]`` (value bias included), out_weight ``[H, d_head, d]``
    -> ``[B, H, T, d]``."""
    return torch.einsum("bhtk,hkd->bhtd", values, out_weight.to(values.dtype))


def block_terms(
    attn: Tensor,
    values: Tensor,
    residual: Tensor,
    weights: BlockWeights,
    real: Tensor,
    mixed: Tensor | None = None,
) -> BlockTerms:
    """The shared terms of one layer from attn ``[B, H, T, T]``, values ``[B, H, T, d_head]`` (as the model computed
    them: ``capture(record_values=True)``), the block's input x ``[B, T, d]`` and ``real`` ``[B, T]``.

    ``mixed`` ``[B, T, d]``: Σ_h Σ_j α^h_ij f^h(x_j) as the model computed it (its output projection's output minus
    b_O; a real query gives pad keys exactly zero weight); None: formed here over real keys, at the cost of the
    output projection applied per head (B·H·T·d_head·d) and the weighted sum (B·H·T²·d)."""
    dtype = torch.promote_types(residual.dtype, torch.float32)
    real = real.to(attn.device).bool()
    both = real[:, None, :, None] & real[:, None, None, :]
    a = torch.where(both, attn.to(dtype), 0.0)
    out_weight = weights.out_weight.to(device=attn.device, dtype=dtype)
    v = values.to(dtype)
    if mixed is None:
        contexts = a @ torch.where(real[:, None, :, None], v, 0.0)  # [B, H, T, d_head]
        mixed = torch.einsum("bhtk,hkd->btd", contexts, out_weight)
    x = torch.where(real[..., None], residual.to(dtype), 0.0)
    z = x + torch.where(real[..., None], mixed.to(dtype), 0.0) + weights.out_bias.to(dtype)
    sigma = torch.sqrt(z.var(-1, unbiased=False) + weights.ln_eps)
    gamma, beta = weights.ln_weight.to(dtype), weights.ln_bias.to(dtype)
    output = (z - z.mean(-1, keepdim=True)) / sigma[..., None] * gamma + beta
    cast = BlockWeights(out_weight, weights.out_bias.to(dtype), gamma, beta, weights.ln_eps)
    return BlockTerms(a, torch.where(real[:, None, :, None], v, 0.0), mixed.to(dtype), x, sigma, output, real, cast)


def decomposition(terms: BlockTerms) -> Tensor:
    """T_i(x_j) ``[B, T(i), T(j), d]``: the explicit per-pair vectors (memory B·T²·d: small inputs, tests, single
    examples). Σ_j T_i(x_j) + g_i(b_O) + β equals the LayerNorm's output for every real token i."""
    mixed = torch.einsum("bhij,bhjd->bijd", terms.attn, terms.f)
    eye = torch.eye(mixed.shape[1], dtype=torch.bool, device=mixed.device)
    mixed = mixed + torch.where(eye[None, :, :, None], terms.residual[:, :, None, :], 0.0)
    keep = terms.real[:, :, None, None] & terms.real[:, None, :, None]
    return torch.where(keep, terms.g(mixed), 0.0)


def mixing_ratio(terms: BlockTerms) -> Tensor:
    """Kobayashi et al. 2021's mixing ratio ``[B, T]`` of one layer's :class:`BlockTerms` (:func:`mixing_ratios`
    with the terms' inputs; NaN at pad queries)."""
    w = terms.weights
    ratios = mixing_ratios(
        terms.attn[:, None], terms.values[:, None], terms.residual[:, None], w.out_weight[None], w.ln_weight[None],
        terms.real, mixed=terms.mixed[:, None],
    )  # fmt: skip
    return ratios[:, 0]


def mixing_ratios(
    attn: Tensor,
    values: Tensor,
    residuals: Tensor,
    out_weights: Tensor,
    ln_weights: Tensor,
    real: Tensor,
    mixed: Tensor | None = None,
    contexts: Tensor | None = None,
) -> Tensor:
    """Kobayashi et al. 2021's mixing ratio ``[B, L, T]`` (AttnResLn-N) of every layer at once: ‖g_i(Σ_{j≠i} r_ij)‖
    / (‖g_i(Σ_{j≠i} r_ij)‖ + ‖g_i(r_ii)‖) with r_ij = Σ_h α^h_ij f^h(x_j) + δ_ij x_i; NaN at pad queries.

    σ_i divides both norms, so neither it nor b_O, β or ε enters: the ratio is ‖P o_i‖_γ / (‖P o_i‖_γ + ‖P s_i‖_γ)
    with P the centring, ‖u‖_γ = ‖γ ⊙ u‖, the self term s_i = Σ_h α^h_ii f^h(x_i) + x_i = (α_diag ⊙ v)_i W_O + x_i
    and the others' sum o_i the attention output without b_O minus the self part. No token×token tensor: one
    ``[B·T, d] × [d, d]`` product per layer (two when only ``contexts`` are given), with the centring and γ folded
    into W_O.

    Args:
        attn: ``[B, L, H, T, T]`` the maps (only their diagonals are read).
        values: ``[B, L, H, T, d_head]`` value states, bias included (``capture(record_values=True)``).
        residuals: ``[B, L, T, d]`` each block's input x.
        out_weights: ``[L, H, d_head, d]`` W_O per head (``BlockWeights.out_weight``, stacked).
        ln_weights: ``[L, d]`` the post-attention LayerNorms' γ.
        real: ``[B, T]`` real tokens.
        mixed: ``[B, L, T, d]`` the attention outputs without b_O as the model computed them
            (``BlockRecorder.mixed``); a real query gives pad keys exactly zero weight.
        contexts: ``[B, L, H, T, d_head]`` the heads' contexts (``Capture.contexts``), used when ``mixed`` is None;
            both None: formed from ``attn`` and ``values`` over real keys.

    Example:
        >>> mixing_ratios(cap.attentions, cap.values, blocks.residuals, w_o, gamma, real, blocks.mixed)  # doctest: +SKIP
    """
    batch, layers, heads, length, d_head = values.shape
    dtype = torch.promote_types(residuals.dtype, torch.float32)
    real = real.to(attn.device).bool()
    gamma = ln_weights.to(device=attn.device, dtype=dtype)  # [L, d]
    w = out_weights.to(device=attn.device, dtype=dtype).reshape(layers, heads * d_head, -1)
    w = (w - w.mean(-1, keepdim=True)) * gamma[:, None, :]  # W_O then g without 1/σ: u W = γ ⊙ P(u W_O)
    own = torch.empty(batch, length, heads, d_head, dtype=dtype, device=attn.device)
    ratios = []
    for layer in range(layers):
        v = values[:, layer].to(dtype)
        diagonal = torch.diagonal(attn[:, layer], dim1=-2, dim2=-1).to(dtype)  # α^h_ii [B, H, T]
        torch.mul(diagonal.transpose(1, 2)[..., None], v.transpose(1, 2), out=own)
        self_part = (own.view(-1, heads * d_head) @ w[layer]).view(batch, length, -1)  # γ ⊙ P(Σ_h α^h_ii f^h(x_i))
        if mixed is not None:
            others = _centred(mixed[:, layer].to(dtype), gamma[layer]).sub_(self_part)
        else:
            context = contexts[:, layer] if contexts is not None else _contexts(attn[:, layer], v, real)
            others = context.to(dtype).transpose(1, 2).reshape(-1, heads * d_head) - own.view(-1, heads * d_head)
            others = (others @ w[layer]).view(batch, length, -1)
        other = torch.linalg.vector_norm(others, dim=-1)
        itself = torch.linalg.vector_norm(_centred(residuals[:, layer].to(dtype), gamma[layer]).add_(self_part), dim=-1)
        ratios.append(other / (other + itself))
    return torch.where(real[:, None], torch.stack(ratios, dim=1), math.nan)


def _centred(u: Tensor, gamma: Tensor) -> Tensor:
    """γ ⊙ (u − mean(u)) over the last axis, a new tensor."""
    return (u - u.mean(-1, keepdim=True)).mul_(gamma)


def _contexts(attn: Tensor, values: Tensor, real: Tensor) -> Tensor:
    """Σ_j α^h_ij v^h_j over real keys: attn ``[B, H, T, T]``, values ``[B, H, T, d_head]`` -> ``[B, H, T, d_head]``."""
    both = real[:, None, :, None] & real[:, None, None, :]
    return torch.where(both, attn.to(values.dtype), 0.0) @ torch.where(real[:, None, :, None], values, 0.0)


def _normalise_rows(c: Tensor, real_rows: Tensor) -> Tensor:
    """c ``[..., T, T]`` divided by its row sums; a real row summing to 0 is NaN, pad rows stay 0."""
    total = c.sum(-1, keepdim=True)
    normalised = c / torch.where(total > 0, total, 1.0)
    normalised = torch.where(total > 0, normalised, math.nan)
    return torch.where(real_rows[..., None], normalised, 0.0)


def alti_matrix(terms: BlockTerms, per_head: bool = False) -> Tensor:
    """ALTI's contribution matrix C ``[B, T, T]`` of one layer (or ``[B, H, T, T]`` with ``per_head``).

    c_ij = max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁) over real keys j, rows normalised to sum 1 (NaN for a row with no
    positive contribution). Per head: y^h_i = Σ_j g_i(α^h_ij f^h(x_j)) replaces y_i (no residual, no bias, the same
    LayerNorm linearisation). Both sides are taken times σ_i (a positive factor of row i, which the normalisation
    removes), so the T_i(x_j) are sums of γ ⊙ P f^h(x_j) weighted by α^h_ij. The L1 distances cost O(B·T²·d) (× H per
    head), a block of query rows at a time, each block written once (a product over heads, or one fused
    multiply-subtract per head) and read once.
    """
    batch, heads, length, d = terms.f.shape
    shared = (terms.f - terms.f.mean(-1, keepdim=True)) * terms.weights.ln_weight  # σ_i g_i(f^h(x_j)) [B, H, T, d]
    rows_per_block = max(1, _ROW_CHUNK // max(1, batch * (heads if per_head else 1) * length * d))
    if per_head:
        total = torch.einsum("bhij,bhjd->bhid", terms.attn, shared)  # σ_i y^h_i [B, H, T, d]
    else:
        total = terms.output * terms.sigma[..., None]  # σ_i y_i [B, T, d]
        own = (terms.residual - terms.residual.mean(-1, keepdim=True)) * terms.weights.ln_weight  # σ_i g_i(x_i)
        by_key = shared.transpose(1, 2)  # [B, T(j), H, d]
    blocks = []
    for start in range(0, length, rows_per_block):
        stop = min(length, start + rows_per_block)
        if per_head:
            y = total[:, :, start:stop, None]  # [B, H, r, 1, d]
            a = terms.attn[:, :, start:stop, :, None]  # [B, H, r, T, 1]
            distance = torch.linalg.vector_norm(torch.addcmul(y, a, shared[:, :, None], value=-1.0), ord=1, dim=-1)
        else:
            a = terms.attn[:, :, start:stop].permute(0, 3, 2, 1)  # [B, T(j), r, H]
            diff = torch.matmul(a, by_key)  # Σ_h α^h_ij σ_i g_i(f^h(x_j)) [B, T(j), r, d]
            rows = torch.arange(start, stop, device=diff.device)
            diff[:, rows, rows - start] += own[:, start:stop]
            y = total[:, None, start:stop]  # [B, 1, r, d]
            distance = torch.linalg.vector_norm(torch.sub(y, diff, out=diff), ord=1, dim=-1).transpose(1, 2)
            y = y[:, 0, :, None]
        blocks.append(torch.linalg.vector_norm(y, ord=1, dim=-1) - distance)
    c = torch.cat(blocks, dim=-2).clamp_min(0.0)
    real = terms.real[:, None] if per_head else terms.real
    c = torch.where(real[..., None, :], c, 0.0)
    return _normalise_rows(c, real.expand(c.shape[:-1]))


def compose(layer_maps: Tensor) -> Tensor:
    """R^(0) = C^(0), R^(l) = C^(l) R^(l−1) for layer_maps ``[B, L, T, T]`` -> ``[B, L, T, T]`` (later layers on the
    left: R^(l)_ij is the share of token i after layer l attributed to input token j). NaN rows propagate."""
    out = [layer_maps[:, 0]]
    for layer in range(1, layer_maps.shape[1]):
        out.append(layer_maps[:, layer] @ out[-1])
    return torch.stack(out, dim=1)


def rollout(attn: Tensor, real: Tensor) -> Tensor:
    """Attention rollout ``[B, L, T, T]`` from attn ``[B, L, H, T, T]``: Ã = (Ā + I) / rowsum(Ā + I) over real
    tokens with Ā the mean over heads, composed by :func:`compose`. Identity attention gives the identity.

    Example:
        >>> rollout(cap.attentions, roles.real)[:, -1, 0]  # doctest: +SKIP
    """
    real = real.to(attn.device).bool()
    both = real[:, None, :, None] & real[:, None, None, :]  # [B, 1, T, T]
    mean = torch.where(both, attn.float().mean(2), 0.0)
    eye = torch.eye(attn.shape[-1], device=attn.device)
    mixed = torch.where(both, mean + eye, 0.0)
    return compose(_normalise_rows(mixed, real[:, None].expand(mixed.shape[:-1])))


def norm_maps(attn: Tensor, norms: Tensor, real: Tensor) -> Tensor:
    """Kobayashi 2020's per-head maps α^h_ij ‖f^h(x_j)‖, rows normalised over real keys: attn ``[B, L, H, T, T]``,
    norms ‖f‖ ``[B, L, H, T]`` (``bertwatch.heads.norms.norm_based.transformed_norms``) -> ``[B, L, H, T, T]``."""
    real = real.to(attn.device).bool()
    weighted = attn.float() * norms.float()[..., None, :]
    weighted = torch.where(real[:, None, None, None, :] & real[:, None, None, :, None], weighted, 0.0)
    return _normalise_rows(weighted, real[:, None, None].expand(weighted.shape[:-1]))


def value_zeroing_scores(zeroed: Tensor, original: Tensor, real: Tensor) -> Tensor:
    """Value zeroing's matrix of one example and layer ``[T, T]``: zeroed ``[T(t), T(i), d]`` the layer's outputs with
    token t's value vectors zeroed in every head, original ``[T, d]``; score_it = 1 − cos(zeroed_t,i, original_i),
    rows normalised over real t (NaN for a row that nothing changed). Pad rows and columns are 0."""
    unit = torch.nn.functional.normalize(original.double(), dim=-1)
    moved = torch.nn.functional.normalize(zeroed.double(), dim=-1)
    scores = (0.5 * (moved - unit).square().sum(-1)).T  # 1 − cos as ½‖â − b̂‖²: exactly 0 when nothing moved
    real = real.bool()
    scores = torch.where(real[None, :] & real[:, None], scores, 0.0)
    return _normalise_rows(scores, real)


def key_mass(maps: Tensor, keys: Tensor, real: Tensor) -> Tensor:
    """The mean over real queries of Σ_{j in keys} maps[..., i, j]: maps ``[B, *, T, T]``, keys and real ``[B, T]``
    -> ``[B, *]`` (NaN for an example without real tokens; NaN rows are left out of the mean)."""
    extra = maps.dim() - 3
    shape = (maps.shape[0],) + (1,) * extra
    keys = (keys.bool() & real.bool()).to(maps.device).view(*shape, 1, -1)
    rows = real.bool().to(maps.device).view(*shape, -1)
    mass = torch.where(keys, maps, 0.0).sum(-1)  # [B, *, T]
    valid = rows & ~torch.isnan(mass)
    count = valid.sum(-1)
    total = torch.where(valid, mass, 0.0).sum(-1)
    return torch.where(count > 0, total / count.clamp_min(1), math.nan)
