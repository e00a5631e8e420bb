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
from bertwatch.heads.host import reads_free

#: Most score elements reduced at once on CPU (a chunk of examples whose deviations stay in cache).
_CPU_CHUNK = 1 << 21

__all__ = [
    "LOGIT_NAMES",
    "allowed_keys",
    "allowed_pairs",
    "logit_summary",
    "counted_pairs",
    "mask_allows",
    "pair_blocks",
]


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


def counted_pairs(
    attention_mask: Tensor | None, shape: torch.Size
) -> tuple[Tensor | None, list[tuple[int, int] | None]]:
    """(:func:`allowed_pairs`, :func:`pair_blocks`) for scores of ``shape`` ``[batch, heads, T, T]``: what
    :func:`logit_summary` takes, found once per mask and reused by every layer of a pass."""
    pairs = allowed_pairs(attention_mask, shape[-1])
    return pairs, pair_blocks(pairs, shape[0], shape[-1])


def pair_blocks(pairs: Tensor | None, batch: int, length: int) -> list[tuple[int, int] | None]:
    """For each example, (start, stop) when its counted pairs are exactly the square block of queries and keys
    start..stop-1 for every head (right or left padding, no padding), else None (a window, per-head masks, no pair).

    Args:
        pairs: bool ``[batch, 1 or heads, T, T]`` from :func:`allowed_pairs`, or None (every pair counts).
        batch: the number of examples; length: T.

    Returns:
        ``batch`` entries; :func:`logit_summary` reduces an example with a block over a slice of its scores, with
        no mask. Blocks are looked for where host reads are free only (``heads.host.reads_free``): elsewhere reading
        the mask back would stall the device, and the masked path is a few kernels for the whole batch.
    """
    if pairs is None:
        return [(0, length)] * batch
    if pairs.shape[1] != 1 or not reads_free(pairs.device):
        return [None] * batch
    allowed = pairs[:, 0].expand(batch, length, length)
    real = allowed.any(dim=-1)  # [batch, T]: queries with a counted pair
    count = real.sum(dim=-1)
    start = real.float().argmax(dim=-1)
    position = torch.arange(length, device=pairs.device)
    inside = (position >= start[:, None]) & (position < (start + count)[:, None])  # [batch, T]
    square = (allowed == (inside[:, :, None] & inside[:, None, :])).all(dim=-1).all(dim=-1) & (count > 0)
    return [
        (s, s + n) if ok else None for s, n, ok in zip(start.tolist(), count.tolist(), square.tolist(), strict=True)
    ]


def logit_summary(
    scores: Tensor, pairs: Tensor | None, blocks: list[tuple[int, int] | None] | None = None
) -> tuple[Tensor, Tensor]:
    """(max, std) of each example's and head's scores over ``pairs``: scores ``[batch, heads, T, T]``, pairs bool
    broadcastable to it (:func:`allowed_pairs`) -> two float32 ``[batch, heads]``; NaN where no pair counts.

    The standard deviation is taken about the mean in two passes (scores may be large and nearly equal). An
    example whose pairs are a square block (:func:`pair_blocks`; ``blocks`` when already found for this mask) is
    reduced over that slice of its scores, unmasked, so padding costs nothing; any other is masked. Examples with
    the same block (a padded batch of pairs has many equal lengths) are gathered and reduced together: on CPU each
    small reduction costs about as much in dispatch and thread start-up as in arithmetic.

    Example:
        >>> s = torch.tensor([[[[1.0, 3.0], [2.0, -1e9]]]])
        >>> m, sd = logit_summary(s, torch.tensor([[[[True, True], [True, False]]]]))
        >>> float(m), round(float(sd), 4)
        (3.0, 0.8165)
    """
    scores = scores.detach().float()
    batch, length = scores.shape[0], scores.shape[-1]
    if pairs is not None:
        pairs = pairs.to(scores.device)
    if blocks is None:
        blocks = pair_blocks(pairs, batch, length)
    peak, std = torch.empty(scores.shape[:2], device=scores.device), torch.empty(scores.shape[:2], device=scores.device)
    if batch == 0:
        return peak, std
    if blocks[0] is not None and all(block == blocks[0] for block in blocks):
        _block_summary(scores[..., blocks[0][0] : blocks[0][1], blocks[0][0] : blocks[0][1]], peak, std)
        return peak, std
    masked = [b for b, block in enumerate(blocks) if block is None]
    if len(masked) == batch:
        return _masked_summary(scores, pairs)
    same: dict[tuple[int, int], list[int]] = {}
    for b, block in enumerate(blocks):
        if block is not None:
            same.setdefault(block, []).append(b)
    sides = [stop - start for (start, stop), group in same.items() if len(group) == 1]
    scratch = torch.empty(scores.shape[1] * max(sides, default=0) ** 2, device=scores.device)
    for (start, stop), group in same.items():
        if len(group) == 1:
            b = group[0]
            part = scores[b : b + 1, :, start:stop, start:stop]
            _block_summary(part, peak[b : b + 1], std[b : b + 1], scratch[: part.numel()].view(part.shape))
            continue
        index = torch.tensor(group, device=scores.device)
        part = scores[:, :, start:stop, start:stop].index_select(0, index)
        peak[index], std[index] = _block_summary_of(part)
    if masked:
        index = torch.tensor(masked, device=scores.device)
        part = pairs.expand(batch, *pairs.shape[1:]).index_select(0, index)
        peak[index], std[index] = _masked_summary(scores.index_select(0, index), part)
    return peak, std


def _block_summary_of(scores: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`_block_summary` into fresh ``[b, heads]`` tensors."""
    peak, std = torch.empty(scores.shape[:2], device=scores.device), torch.empty(scores.shape[:2], device=scores.device)
    _block_summary(scores, peak, std)
    return peak, std


def _block_summary(scores: Tensor, peak: Tensor, std: Tensor, scratch: Tensor | None = None) -> None:
    """Max and population std over the last two dims of ``scores`` ``[b, heads, n, n]`` (every pair counts), into
    ``peak`` and ``std`` ``[b, heads]``. On CPU a few examples at a time (``_CPU_CHUNK`` elements at most), so the
    deviations are taken while the chunk is still in cache, in one scratch buffer (``scratch``, shaped like
    ``scores``, when the caller has one). A slice of padded scores is copied there first: reductions over one
    contiguous dimension save more than the copy costs (on CPU, per example)."""
    step = len(scores)
    if scores.device.type == "cpu":
        step = max(1, _CPU_CHUNK // max(1, scores[:1].numel()))
    if scratch is None:
        scratch = torch.empty((min(step, len(scores)), *scores.shape[1:]), dtype=scores.dtype, device=scores.device)
    for start in range(0, len(scores), step):
        part, rows = scores[start : start + step], slice(start, start + step)
        deviation = scratch[: len(part)].view(*part.shape[:2], -1)
        if part.is_contiguous():
            part = part.view(deviation.shape)
            torch.amax(part, dim=-1, out=peak[rows])
            torch.sub(part, part.mean(dim=-1, keepdim=True), out=deviation)
        else:
            deviation.view(part.shape).copy_(part)
            torch.amax(deviation, dim=-1, out=peak[rows])
            deviation.sub_(deviation.mean(dim=-1, keepdim=True))
        torch.linalg.vector_norm(deviation, dim=-1, out=std[rows])
    std.div_(scores.shape[-1])


def _masked_summary(scores: Tensor, pairs: Tensor) -> tuple[Tensor, Tensor]:
    """(max, std) over ``pairs`` (bool, broadcastable to ``scores`` ``[b, heads, T, T]``), NaN where none counts."""
    count = pairs.sum(dim=(-2, -1), dtype=torch.float32).expand(scores.shape[:2])  # before broadcasting over heads
    peak = torch.where(pairs, scores, -torch.inf).amax(dim=(-2, -1))
    mean = torch.where(pairs, scores, 0.0).sum(dim=(-2, -1)) / count
    deviation = torch.where(pairs, scores - mean[..., None, None], 0.0)
    spread = torch.linalg.vector_norm(deviation, dim=(-2, -1)) / count.sqrt()
    empty = count == 0
    return peak.masked_fill(empty, torch.nan), spread.masked_fill(empty, torch.nan)
