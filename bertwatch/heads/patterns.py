"""Head labels from statistic grids: Clark et al.'s behaviour labels and Kovaleva et al.'s pattern classes.

Thin tensor-friendly wrappers over the rules of ``bertwatch.core.rules`` (their one home): grids are tensors or
arrays ``[layers, heads]`` or ``[..., layers, heads]``; results are nested lists of the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from bertwatch.core import rules

__all__ = ["behaviour_labels", "pattern_classes"]


def as_array(grid: object) -> np.ndarray:
    """A grid (tensor or array) as a CPU numpy array, keeping float precision (float32 stays float32)."""
    if isinstance(grid, torch.Tensor):
        grid = grid.detach().cpu()
        return (grid if grid.is_floating_point() else grid.float()).numpy()
    return np.asarray(grid)


def behaviour_labels(grids: Mapping[str, object]) -> list:
    """Clark's head labels ``[layers][heads]`` from grids ``[layers, heads]`` (or ``[..., layers, heads]``).

    Rules (``core.rules.BEHAVIOUR_RULES``) in Clark's order, the later winning: next > 0.5, prev > 0.5,
    entropy > 3.8 nats ("broad"), cls_mass, sep_mass, punct_mass > 0.6; labels "next", "prev", "broad", "cls",
    "sep", "punct" or "". Every rule's grid is required (KeyError otherwise).
    """
    labels = rules.behaviour_labels({k: as_array(v) for k, v in grids.items()}, strict=True)
    return np.where(labels == None, "", labels).tolist()  # noqa: E711 (elementwise)


def pattern_classes(
    stats: Mapping[str, object],
    *,
    uniform: Mapping[str, object] | None = None,
    thresholds: rules.PatternThresholds = rules.PATTERN_THRESHOLDS,
) -> list:
    """Kovaleva's five pattern classes by rule, from grids ``[layers, heads]`` or per-example ``[batch, layers, heads]``.

    The rules and thresholds are ``core.rules.pattern_codes``'s; pass ``uniform`` (``stats.uniform_baselines``
    of the same inputs) to judge each head against a uniform head, which removes the short-input bias toward
    "vertical+diagonal". Nested lists of the input's shape.
    """
    arrays = {k: as_array(v) for k, v in stats.items() if k in rules.PATTERN_STATS}
    if uniform is not None:
        uniform = {k: as_array(v) for k, v in uniform.items()}
    codes = rules.pattern_codes(arrays, uniform=uniform, thresholds=thresholds)
    return np.asarray(rules.PATTERN_CLASSES, dtype=object)[codes].tolist()
