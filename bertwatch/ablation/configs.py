"""What one sweep evaluates: head masks (``HeadMask``), the standard configurations, the pruning masks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadMask:
    """One set of disabled heads: ``mask`` is bool ``[layers, heads]``, True = disabled."""

    id: str
    mask: np.ndarray

    @property
    def start_layer(self) -> int:
        """The lowest layer with a disabled head (``layers`` for the baseline): everything below is unchanged."""
        rows = np.flatnonzero(self.mask.any(axis=1))
        return int(rows[0]) if rows.size else int(self.mask.shape[0])

    @property
    def key(self) -> str:
        """A hash of the id and the mask, so a resumed sweep never mixes up configurations."""
        digest = hashlib.sha1(self.id.encode())
        digest.update(np.ascontiguousarray(self.mask, dtype=np.bool_).tobytes())
        digest.update(str(self.mask.shape).encode())
        return digest.hexdigest()[:16]


def sweep_configs(num_layers: int, num_heads: int, keep_only: bool = True) -> list[HeadMask]:
    """The baseline, every single head (``head:l:h``), every layer (``layer:l``) and, with ``keep_only``, every
    "only head h of layer l left on" (``keep:l:h``)."""
    shape = (num_layers, num_heads)
    configs = [HeadMask("baseline", np.zeros(shape, dtype=bool))]
    for l in range(num_layers):
        for h in range(num_heads):
            mask = np.zeros(shape, dtype=bool)
            mask[l, h] = True
            configs.append(HeadMask(f"head:{l}:{h}", mask))
    for l in range(num_layers):
        mask = np.zeros(shape, dtype=bool)
        mask[l] = True
        configs.append(HeadMask(f"layer:{l}", mask))
    if keep_only and num_heads > 1:
        for l in range(num_layers):
            for h in range(num_heads):
                mask = np.zeros(shape, dtype=bool)
                mask[l] = True
                mask[l, h] = False
                configs.append(HeadMask(f"keep:{l}:{h}", mask))
    return configs


def pruning_masks(importance: np.ndarray, step: float = 0.1) -> list[np.ndarray]:
    """Cumulative pruning masks: each step disables ``max(1, int(step * remaining))`` more heads, least important
    first (one global ranking, ascending; ties by position), until no head is left."""
    importance = np.asarray(importance, dtype=np.float64)
    order = np.argsort(np.nan_to_num(importance, nan=np.inf).ravel(), kind="stable")
    return order_masks(order, importance.shape, step)


def step_sizes(total: int, step: float = 0.1) -> list[int]:
    """Heads disabled after each pruning step, ``[steps]``: ``max(1, int(step * remaining))`` more each step."""
    if not 0 < step <= 1:
        raise ValueError(f"the pruning step must be in (0, 1], got {step}")
    counts, pruned = [], 0
    while pruned < total:
        pruned += max(1, int(step * (total - pruned)))
        counts.append(pruned)
    return counts


def order_masks(order: np.ndarray, shape: tuple[int, int], step: float = 0.1) -> list[np.ndarray]:
    """Cumulative masks ``[layers, heads]`` that disable the heads of ``order`` (flat indices ``[layers * heads]``,
    first pruned first) at the counts of :func:`step_sizes`."""
    order = np.asarray(order).ravel()
    masks = []
    for pruned in step_sizes(order.size, step):
        mask = np.zeros(order.size, dtype=bool)
        mask[order[:pruned]] = True
        masks.append(mask.reshape(shape))
    return masks


def random_orders(total: int, count: int, seed: int) -> list[np.ndarray]:
    """``count`` random pruning orders of ``total`` heads: order r is ``default_rng([seed, r]).permutation(total)``
    (each reproducible on its own, whatever ``count`` is)."""
    return [np.random.default_rng([seed, r]).permutation(total) for r in range(count)]
