"""Per-head summaries of the pre-softmax attention scores, reduced inside the capture pass.

A head's score s_ij is what enters its softmax: q_i·k_j times the family's scale, plus the relative-position terms
of DeBERTa (c2p, p2c) and MPNet (position bias), before the attention mask. Over the pairs the model lets attend
(its own attention mask, which also encodes ModernBERT's local window) with a real query i:

- ``max_logit`` = max_ij s_ij (Dehghani et al. 2023's attention logit growth; the quantity QK-clip bounds);
- ``logit_std`` = the population standard deviation of those s_ij.

Masked pairs never enter: the mask's large negative additive values (or its boolean fill) are replaced by the
pair mask before any reduction, and a query is real when some query may attend to it as a key (padding masks
key columns), so neither value depends on the batch the example is in or on its padding. The capture reduces each
layer's ``[batch, heads, T, T]`` scores at once and keeps only ``[batch, heads]`` per layer.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bertwatch.core.stat_names import LOGIT_NAMES

__all__ = ["LOGIT_NAMES", "allowed_keys", "allowed_pairs", "logit_summary", "mask_allows"]


def mask_allows(attention_mask: Tensor, length: int) -> Tensor:
    """Where a mask lets a query attend to a key: boolean (True: may attend), 0/1 integers, or additive float
    (0, or a large negative value), any of ``[batch, 1 or heads, 1 or T, T]`` or ``[batch, 1 or T, T]`` -> bool
    ``[batch, 1 or heads, 1 or T, length]``."""
    if attention_mask.dtype == torch.bool:
        allowed = attention_mask
    elif not attention_mask.is_floating_point():  # 0/1 integers (DeBERTa's own mask)
        allowed = attention_mask != 0
    else:
        allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    if allowed.dim() == 3:
        allowed = allowed[:, None]
    return allowed[..., :length]


def allowed_keys(attention_mask: Tensor, like: Tensor) -> Tensor:
    """1 where a query may attend to a key under the model's mask, broadcast to ``like`` (``[..., query, key]``,
    its dtype): the disabling of heads and the uniform rows of the ablation read the mask through this one rule."""
    return mask_allows(attention_mask, like.shape[-1]).to(like.dtype).expand_as(like)


def allowed_pairs(attention_mask: Tensor | None, length: int) -> Tensor | None:
    """The (query, key) pairs whose scores count, from the mask the attention function received.

    Args:
        attention_mask: any mask :func:`mask_allows` reads; None when nothing is masked.
        length: T, the number of queries and keys (self-attention).

    Returns:
        bool ``[batch, 1 or heads, T, T]``: the model allows the pair and the query is a real token (a column some
        query may attend to); None when ``attention_mask`` is None (every pair counts).
    """
    if attention_mask is None:
        return None
    allowed = mask_allows(attention_mask, length)
    real_query = allowed.any(dim=-2)  # [batch, 1 or heads, T]: keys some query may see
    return allowed & real_query[..., :, None]


def logit_summary(scores: Tensor, pairs: Tensor | None) -> tuple[Tensor, Tensor]:
    """(max, std) of each example's and head's scores over ``pairs``: scores ``[batch, heads, T, T]``, pairs bool
    broadcastable to it (:func:`allowed_pairs`) -> two float32 ``[batch, heads]``; NaN where no pair counts.

    The standard deviation is taken about the mean in two passes (scores may be large and nearly equal).

    Example:
        >>> s = torch.tensor([[[[1.0, 3.0], [2.0, -1e9]]]])
        >>> m, sd = logit_summary(s, torch.tensor([[[[True, True], [True, False]]]]))
        >>> float(m), round(float(sd), 4)
        (3.0, 0.8165)
    """
    scores = scores.detach().float()
    if pairs is None:
        pairs = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device)
    pairs = pairs.to(scores.device)
    count = pairs.sum(dim=(-2, -1), dtype=torch.float32).expand(scores.shape[:2])  # before broadcasting over heads
    peak = torch.where(pairs, scores, -torch.inf).amax(dim=(-2, -1))
    mean = torch.where(pairs, scores, 0.0).sum(dim=(-2, -1)) / count
    deviation = torch.where(pairs, scores - mean[..., None, None], 0.0)
    std = torch.linalg.vector_norm(deviation, dim=(-2, -1)) / count.sqrt()
    empty = count == 0
    return peak.masked_fill(empty, torch.nan), std.masked_fill(empty, torch.nan)
