"""Length groups for the gradient pass: a probe batch's rows split by real length, each group cropped to its longest
row, and the groups' results put back in the batch's row order, padded to its T with zeros.

A forward and backward of an encoder at T <= 128 costs about its padded tokens on CPU, and a probe batch is padded
to its longest row: SST-2's 32 probe examples are 58% real tokens. Splitting pays where a forward has little fixed
cost (``_SPLIT_DEVICES``; on a GPU a small batch costs about what a big one does). Cropping is exact when each
row's real tokens are the first positions of its row (``bertwatch.heads.layout``'s layout) and nothing past the
crop is labelled: the positions cut are masked keys that no real query sees, so an example's maps, states and
loss over its real tokens are the same (up to float rounding) in any group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional

from bertwatch.heads.mixing.mixing_model import BlockRecorder
from bertwatch.heads.task_heads import head_kind

__all__ = [
    "FORWARD_COST",
    "MergedBlocks",
    "batch_groups",
    "crop_rows",
    "grouped_pass",
    "groups_for",
    "labelled_rows",
    "merge_rows",
    "merged_states",
    "pad_tokens",
    "plan_groups",
    "splits",
    "widths",
]

#: Devices whose gradient pass is split into length groups.
_SPLIT_DEVICES = ("cpu",)
#: The fixed cost of one more gated forward and backward, in padded tokens (MiniLM on CPU, 2 threads, 0.31-0.33 ms
#: a token): a pass of one 3-token row takes 28 ms, 85 tokens' worth (reading every weight twice); the intercept of
#: a linear fit over batches of 2-16 rows x 16-64 tokens says 44-55 (``benchmarks/bench_length_groups.py --fit``),
#: low because a token costs less in a bigger batch. On SST-2's probe set every cost from 85 to 150 gives the same
#: groups (8 + 8 rows per batch), which beat those of 50 (8/4/4, 8/6/2) in three paired runs of three
#: (``--costs 50,120``: 0.846 / 0.848, 0.830 / 0.851, 0.905 / 0.948 of the whole batches).
FORWARD_COST = 100
#: Heads whose loss reads only the real tokens' outputs and labels (a QA loss takes a softmax over every position).
_TOKEN_LABELS = ("token-classification", "masked-lm")
_ROW_LABELS = ("sequence-classification",)
_IGNORE = -100


def widths(batch: Mapping[str, Any], real: Tensor, kind: str | None) -> list[int] | None:
    """Each row's real-token count ``[rows]``, or None when cropping a row to it would not be exact.

    Args:
        batch: the collated batch; ``attention_mask`` ``[rows, T]`` must mark exactly ``real``.
        real: ``roles.real`` ``[rows, T]``.
        kind: the model's head (``task_heads.head_kind``): token-level ``labels`` ``[rows, T]`` are cropped for
            token classification and masked LM, kept whole for sequence classification; any other head (question
            answering, multiple choice, unknown) is not cropped.

    None when: the batch is multiple choice (``input_ids`` 3-d) or has no mask; a row's real tokens are not its
    first positions, or it has none; a token label past a row's real tokens is not -100.
    """
    ids, mask = batch.get("input_ids"), batch.get("attention_mask")
    if kind not in _TOKEN_LABELS + _ROW_LABELS or not isinstance(ids, Tensor) or ids.dim() != 2:
        return None
    if not isinstance(mask, Tensor) or tuple(mask.shape) != tuple(real.shape) or tuple(ids.shape) != tuple(real.shape):
        return None
    real = real.detach().cpu().bool()
    counts = real.sum(-1)
    prefix = torch.arange(real.shape[1])[None, :] < counts[:, None]
    if not torch.equal(prefix, real) or not torch.equal(mask.detach().cpu() != 0, real) or not bool(counts.all()):
        return None
    labels = batch.get("labels")
    if kind in _TOKEN_LABELS and isinstance(labels, Tensor):
        if tuple(labels.shape[:2]) != tuple(real.shape) or bool((labels.detach().cpu()[~prefix] != _IGNORE).any()):
            return None
    return [int(n) for n in counts]


def plan_groups(lengths: Sequence[int], forward_cost: float = FORWARD_COST) -> list[list[int]]:
    """Rows in groups: sorted by length, contiguous, minimising Σ (group's longest length × its rows) +
    ``forward_cost`` per group (a dynamic programme over the sorted rows, O(rows²)).

    Returns the groups' row indices, shortest group first; rows of equal length keep their order.

    Example:
        >>> plan_groups([12, 28, 26, 40, 44, 25, 21, 38], forward_cost=20)
        [[0, 6, 5, 2, 1], [7, 3, 4]]
    """
    order = sorted(range(len(lengths)), key=lambda r: lengths[r])
    size = len(order)
    best = [0.0] + [float("inf")] * size
    cut = [0] * (size + 1)
    for end in range(1, size + 1):
        for start in range(end):
            cost = best[start] + lengths[order[end - 1]] * (end - start) + forward_cost
            if cost < best[end]:
                best[end], cut[end] = cost, start
    groups, end = [], size
    while end > 0:
        groups.append(order[cut[end] : end])
        end = cut[end]
    return groups[::-1]


def splits(device: torch.device) -> bool:
    """Whether a gradient pass on ``device`` pays to run in length groups (``_SPLIT_DEVICES``)."""
    return device.type in _SPLIT_DEVICES


def groups_for(
    batch: Mapping[str, Any], real: Tensor, kind: str | None, device: torch.device
) -> list[tuple[Tensor, int]] | None:
    """The length groups of a batch on ``device``: ``[(row indices [g] long, width)]``, or None to run it whole
    (a device not in ``_SPLIT_DEVICES``, a batch :func:`widths` cannot crop, one group, or a group whose every
    example is unlabelled, which the model's loss refuses)."""
    if not splits(device):
        return None
    lengths = widths(batch, real, kind)
    if lengths is None:
        return None
    groups = plan_groups(lengths, FORWARD_COST)
    if len(groups) < 2:
        return None
    labelled = labelled_rows(batch, len(lengths))
    if any(not any(labelled[r] for r in rows) for rows in groups):
        return None
    return [(torch.tensor(rows, dtype=torch.long), max(lengths[r] for r in rows)) for rows in groups]


def labelled_rows(batch: Mapping[str, Any], rows: int) -> list[bool]:
    """Per row whether the model's loss counts it (integer ``labels`` not all -100; float labels always)."""
    labels = batch.get("labels")
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.dim() == 0:
        return [True] * rows
    return [bool(v) for v in (labels.detach().cpu().reshape(rows, -1) != _IGNORE).any(-1)]


def crop_rows(batch: Mapping[str, Any], rows: Tensor, width: int, kind: str | None) -> dict[str, Any]:
    """The batch's ``rows`` cropped to ``width`` tokens: every ``[rows, T, ...]`` field (``input_ids``,
    ``attention_mask``, ``token_type_ids``, token-level ``labels``) sliced on both; per-row fields (sequence labels)
    on the rows only; anything else passed on."""
    ids = batch["input_ids"]
    size, length = int(ids.shape[0]), int(ids.shape[1])
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if not isinstance(value, Tensor) or value.dim() == 0 or value.shape[0] != size:
            out[key] = value
            continue
        picked = value.index_select(0, rows.to(value.device))
        per_token = value.dim() >= 2 and value.shape[1] == length and (key != "labels" or kind in _TOKEN_LABELS)
        out[key] = picked[:, :width].contiguous() if per_token else picked
    return out


def merge_rows(parts: Sequence[Tensor], groups: Sequence[Tensor], size: int, length: int, layout: str) -> Tensor:
    """The groups' results in the batch's row order ``[size, ...]``, zero past each group's width.

    ``parts[k]`` holds the rows ``groups[k]`` of group k, laid out as ``layout`` says: ``"rows"`` ``[g, ...]`` (no
    token dimension: gate gradients, logit summaries), ``"states"`` ``[g, ..., w, d]`` (values, contexts, block
    inputs), ``"maps"`` ``[g, ..., w, w]`` (maps and their gradients); token dimensions are padded to ``length``.
    """
    padded = [pad_tokens(part, length, layout) for part in parts]
    out = padded[0].new_zeros(size, *padded[0].shape[1:])
    for part, rows in zip(padded, groups):
        out[rows.to(out.device)] = part
    return out


def pad_tokens(part: Tensor, length: int, layout: str) -> Tensor:
    """``part`` with its token dimensions padded with zeros to ``length`` (``layout`` as in :func:`merge_rows`)."""
    if layout == "maps":
        return functional.pad(part, (0, length - part.shape[-1], 0, length - part.shape[-2]))
    if layout == "states":
        return functional.pad(part, (0, 0, 0, length - part.shape[-2]))
    return part


class MergedBlocks(BlockRecorder):
    """A :class:`~bertwatch.heads.mixing.mixing_model.BlockRecorder`'s reading of a batch run in length groups: the
    blocks' inputs and attention outputs ``[rows, layers, T, d]`` merged back in row order, zero past a group's
    width."""

    def __init__(self, num_layers: int, residuals: Tensor, mixed: Tensor) -> None:
        super().__init__(num_layers, [])
        self._merged = (residuals, mixed)

    @property
    def complete(self) -> bool:
        return True

    @property
    def residuals(self) -> Tensor:
        return self._merged[0]

    @property
    def mixed(self) -> Tensor:
        return self._merged[1]


def batch_groups(
    model: nn.Module, batch: Mapping[str, torch.Tensor], real: torch.Tensor | None
) -> list[tuple[torch.Tensor, dict]] | None:
    """``batch``'s length groups as the gradient pass runs them: ``[(row indices [g], the rows cropped)]``, or None
    to run it whole (:func:`groups_for`)."""
    kind = head_kind(model)
    groups = None if real is None else groups_for(batch, real, kind, next(model.parameters()).device)
    if groups is None:
        return None
    return [(rows, crop_rows(batch, rows, width, kind)) for rows, width in groups]


def grouped_pass(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    real: torch.Tensor,
    rows: int,
    states: list | None,
    gated: Callable,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None, list[torch.Tensor]]:
    """``gated(batch, rows, states=...)`` (``heads.gradients.importance``'s gated pass with its loss and recording
    options bound) run per length group (on CPU, rows of similar real length together, each group cropped to its longest
    row) and merged back in row order, padded to T with zeros (maps, their gradients, value states, contexts, block
    inputs); the whole batch at once where splitting does not pay or would not be exact. Each group's factors make its
    loss each of its examples' own, as for a batch."""
    groups = batch_groups(model, batch, real)
    if groups is None:
        return gated(batch, rows, states=states)
    length = int(batch["input_ids"].shape[1])
    parts = []
    for indices, cropped in groups:
        kept: list | None = [] if states is not None else None
        gate, maps_grad, scale, maps = gated(cropped, len(indices), states=kept)
        parts.append((gate, [g.detach() for g in maps_grad], scale, [m.detach() for m in maps], kept))
    index = [g for g, _ in groups]

    def merge(items: list, layout: str) -> torch.Tensor:
        return merge_rows(items, index, rows, length, layout)

    gate_grad = merge([p[0] for p in parts], "rows")
    scale = None if parts[0][2] is None else merge([p[2] for p in parts], "rows")
    layers = len(parts[0][1])
    map_grads = [merge([p[1][l] for p in parts], "maps") for l in range(layers)]
    maps = [merge([p[3][l] for p in parts], "maps") for l in range(layers)]
    if states is not None:
        states.extend(merged_states([p[4] for p in parts], merge, layers))
    return gate_grad, map_grads, scale, maps


def merged_states(kept: list[list], merge: Callable[[list, str], torch.Tensor], layers: int) -> list:
    """The groups' ``(values, contexts, logit summary, blocks)`` merged (each None or empty where a group lacks it)."""
    values, contexts, summaries, recorders = zip(*kept)
    merged_values = None if any(v is None for v in values) else merge(list(values), "states")
    merged_contexts = None if any(c is None for c in contexts) else merge(list(contexts), "states")
    names = set(summaries[0]) if all(set(s) == set(summaries[0]) for s in summaries) else set()
    summary = {name: merge([s[name] for s in summaries], "rows") for name in sorted(names)}
    blocks = None
    if all(r is not None and r.complete for r in recorders):
        residuals = merge([r.residuals for r in recorders], "states")
        blocks = MergedBlocks(layers, residuals, merge([r.mixed for r in recorders], "states"))
    return [merged_values, merged_contexts, summary, blocks]
