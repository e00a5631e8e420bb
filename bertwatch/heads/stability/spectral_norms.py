"""Training-stability statistics of each head: ``max_logit`` and ``logit_std`` (from the probe pass, see
``bertwatch.heads.stability.logits``) and ``qk_spectral_norm`` (from the weights alone, here).

``qk_spectral_norm`` of head h is c·‖W_Q^h (W_K^h)ᵀ‖₂, the largest singular value of the d_model × d_model
bilinear form whose value at (x_i, x_j) is the head's content score q_i·k_j without biases (Zhai et al. 2023 bound
the attention entropy by it), times the factor c the model multiplies q·k by before its softmax: 1/√d_head, and
1/√(d_head·(1 + number of relative terms)) for DeBERTa-v2/v3. With c included, |content score − bias terms| ≤
``qk_spectral_norm``·‖x_i‖·‖x_j‖, in the units of ``max_logit``. The product has rank d_head, so it is never formed:
with the head-sized Gram matrices G_q = W_Q^hᵀ W_Q^h and G_k = W_K^hᵀ W_K^h and any F with F Fᵀ = G_q,
‖W_Q^h W_K^hᵀ‖₂² = λ_max(Fᵀ G_k F), a symmetric d_head × d_head matrix (the same as ‖R_q R_kᵀ‖₂² of thin QR
factors, whose R_qᵀ is one such F). F is G_q's Cholesky factor: on CPU float64 QR, and eigendecompositions with
vectors, are 10 to 100 times slower than a Cholesky factorisation and eigenvalues alone. On a GPU a factorisation or
an eigendecomposition reads its success flag back to the host, stalling the device (``heads.host``); there
λ_max(G_q G_k) (the same eigenvalues, all real and ≥ 0) comes from matrix products alone: tr(M^p)^(1/p) for
p = 2^40 lies between λ_max and d^(1/p)·λ_max, within 4e-12 of it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bertwatch.core.families import model_family
from bertwatch.core.stat_names import LOGIT_NAMES, QK_NAME, STABILITY_NAMES
from bertwatch.heads.capture import UnsupportedModelError, model_shape
from bertwatch.heads.host import reads_free
from bertwatch.heads.norms.norm_based import query_key_weights
from bertwatch.heads.unwrap import unwrap

__all__ = [
    "LOGIT_NAMES",
    "QK_NAME",
    "STABILITY_NAMES",
    "content_scale",
    "head_qk_spectral_norms",
    "largest_eigenvalues",
    "qk_spectral_norms",
    "supports_qk_spectral_norm",
]


def qk_spectral_norms(w_q: Tensor, w_k: Tensor, heads: int) -> Tensor:
    """‖W_Q^h (W_K^h)ᵀ‖₂ of every head, through head-sized factors (float64 throughout; module doc). F is the
    Cholesky factor of G_q, or U·sqrt(Λ) from its eigendecomposition for a singular G_q (a zeroed, pruned head).

    Args:
        w_q: ``[layers, heads * d_head, hidden]``, query projection weights as ``nn.Linear`` stores them (head h's
            rows h·d_head … (h+1)·d_head − 1; W_Q^h is their transpose, hidden × d_head).
        w_k: the key projection weights, same shape.
        heads: the number of heads per layer.

    Returns:
        float64 ``[layers, heads]``; NaN for a head whose query or key weights are not finite (a diverged run).

    Example:
        >>> w = torch.eye(4)[None]  # one layer, 2 heads of 2 dimensions: each W_Q^h W_K^hᵀ a projection
        >>> qk_spectral_norms(w, 2 * w, heads=2).tolist()
        [[2.0, 2.0]]
    """
    if w_q.shape != w_k.shape or w_q.dim() != 3 or w_q.shape[1] % heads:
        raise ValueError(f"w_q {tuple(w_q.shape)} and w_k {tuple(w_k.shape)} must be [layers, heads * d, hidden]")
    layers, rows, hidden = w_q.shape

    def gram(weight: Tensor) -> Tensor:
        per_head = weight.double().reshape(layers, heads, rows // heads, hidden)  # [L, H, d, hidden]: W^hᵀ
        return per_head @ per_head.mT  # [L, H, d, d]

    finite = torch.stack([w.reshape(layers, heads, -1).isfinite().all(-1) for w in (w_q, w_k)]).all(0)  # [L, H]
    keep = finite[:, :, None, None].expand(layers, heads, rows // heads, hidden).reshape(w_q.shape)
    if not reads_free(w_q.device):  # nothing read back: non-finite heads measured on zeros, then NaN
        value = largest_eigenvalues(gram(w_q.where(keep, 0.0)) @ gram(w_k.where(keep, 0.0))).sqrt()
        return value.where(finite, torch.nan)
    if not bool(finite.all()):  # a diverged run: its non-finite heads are NaN, the others still measured
        nan = torch.tensor(math.nan, dtype=torch.float64)
        return torch.where(finite, qk_spectral_norms(w_q.where(keep, 0.0), w_k.where(keep, 0.0), heads), nan)
    g_q = gram(w_q)
    factor, info = torch.linalg.cholesky_ex(g_q)
    singular = info != 0
    if bool(singular.any()):
        eigenvalues, vectors = torch.linalg.eigh(g_q[singular])
        factor[singular] = vectors * eigenvalues.clamp_min(0.0).sqrt()[..., None, :]
    inner = factor.mT @ gram(w_k) @ factor
    return torch.linalg.eigvalsh(inner)[..., -1].clamp_min(0.0).sqrt()


#: Squarings of :func:`largest_eigenvalues`: p = 2^40, so d^(1/p) - 1 < 4e-12 for d <= 64 (1e-11 at d = 2^10).
_SQUARINGS = 40


def largest_eigenvalues(m: Tensor) -> Tensor:
    """λ_max of each matrix ``[..., d, d]`` whose eigenvalues are real and ≥ 0 (a product of two symmetric positive
    semi-definite matrices), from matrix products alone, so nothing is read back from a device: tr(M^p)^(1/p) with
    p = 2^``_SQUARINGS``, which lies in [λ_max, d^(1/p)·λ_max]. M is squared and rescaled to unit trace each time
    (no overflow); log tr(M^p) / p adds up the logarithms of the scales. 0 for a zero matrix.

    Example:
        >>> m = torch.tensor([[[2.0, 1.0], [1.0, 2.0]]], dtype=torch.float64)  # eigenvalues 3 and 1
        >>> round(float(largest_eigenvalues(m)[0]), 9)
        3.0
    """
    trace = m.diagonal(dim1=-2, dim2=-1).sum(-1)
    nonzero = trace > 0
    scale = torch.where(nonzero, trace, torch.ones_like(trace))
    power = m / scale[..., None, None]
    log = scale.log()
    weight = 1.0
    for _ in range(_SQUARINGS):
        power = power @ power
        square = power.diagonal(dim1=-2, dim2=-1).sum(-1)
        square = torch.where(square > 0, square, torch.ones_like(square))
        weight /= 2
        log = log + weight * square.log()
        power = power / square[..., None, None]
    return torch.where(nonzero, log.exp(), torch.zeros_like(log))


def content_scale(model: nn.Module, d_head: int) -> float:
    """The factor the model multiplies a head's q·k by before its softmax: 1/√d_head, or for DeBERTa-v2/v3
    1/√(d_head·(1 + number of relative terms "c2p", "p2c")), which scales its content and relative terms alike.
    ``d_head`` is read from the weights (MobileBERT's heads split its bottleneck, not its hidden size)."""
    config = model.config
    factor = 1
    if model_family(config) == "deberta-v2":
        factor += sum(term in (config.pos_att_type or ()) for term in ("c2p", "p2c"))
    return 1.0 / math.sqrt(d_head * factor)


def head_qk_spectral_norms(model: nn.Module) -> Tensor:
    """``qk_spectral_norm`` of every head of ``model`` (wrappers removed, ``heads.unwrap``; adapters such as LoRA
    included in the weights): float32 ``[layers, heads]``, ‖W_Q^h W_K^hᵀ‖₂ times :func:`content_scale`. Raises UnsupportedModelError for a family whose
    query and key projections bertwatch does not know.

    Example:
        >>> grid = head_qk_spectral_norms(model)  # doctest: +SKIP
        >>> grid.shape  # doctest: +SKIP
        torch.Size([12, 12])
    """
    _, heads = model_shape(model)
    model = unwrap(model).model
    w_q, w_k = query_key_weights(model, f"{QK_NAME!r}")
    return (qk_spectral_norms(w_q, w_k, heads) * content_scale(model, w_q.shape[1] // heads)).float()


def supports_qk_spectral_norm(model: nn.Module) -> bool:
    """Whether :func:`head_qk_spectral_norms` knows ``model``'s query and key projections."""
    try:
        query_key_weights(unwrap(model).model)
    except (UnsupportedModelError, AttributeError):
        return False
    return True
