"""Head labels from statistic grids: Clark et al.'s behaviour labels and Kovaleva et al.'s pattern classes.

Thin tensor-friendly wrappers over the rules of ``bertwatch.core.rules`` (their one home): grids are tensors or
arrays ``[layers, heads]`` or ``[..., layers, heads]``; results are nested lists of the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from bertwatch.core import rules
from bertwatch.heads.roles import TokenRoles

__all__ = ["behaviour_label_lists", "grid_pattern_shares", "pattern_classes", "uniform_baselines"]


def as_array(grid: object) -> np.ndarray:
    """A grid (tensor or array) as a CPU numpy array, keeping float precision (float32 stays float32)."""
    if isinstance(grid, torch.Tensor):
        grid = grid.detach().cpu()
        return (grid if grid.is_floating_point() else grid.float()).numpy()
    return np.asarray(grid)


def behaviour_label_lists(grids: Mapping[str, object]) -> list:
    """Clark's head labels as nested lists ``[layers][heads]`` ("" = none) from tensor or array grids
    ``[layers, heads]`` (or ``[..., layers, heads]``): ``core.rules.behaviour_labels`` (numpy in, object array with
    None out) for callers holding tensors, every rule's grid required.

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

    The rules and thresholds are ``core.rules.pattern_codes``'s; pass ``uniform`` (:func:`uniform_baselines`
    of the same inputs) to judge each head against a uniform head, which removes the short-input bias toward
    "vertical+diagonal". Nested lists of the input's shape.
    """
    arrays = {k: as_array(v) for k, v in stats.items() if k in rules.PATTERN_STATS}
    if uniform is not None:
        uniform = {k: as_array(v) for k, v in uniform.items()}
    codes = rules.pattern_codes(arrays, uniform=uniform, thresholds=thresholds)
    return np.asarray(rules.PATTERN_CLASSES, dtype=object)[codes].tolist()


def uniform_baselines(roles: TokenRoles | Sequence[TokenRoles]) -> dict[str, float]:
    """What a head attending uniformly to the real tokens scores, as the mean over all examples of the batches:
    ``{"vertical": cls_mass + sep_mass, "diagonal": prev + next + self}``.

    Per example with n real tokens and p adjacent real pairs: v = (#[CLS] + #[SEP]) / n, d = 1/n + 2p/n².
    """
    batches = [roles] if isinstance(roles, TokenRoles) else list(roles)
    vertical, diagonal = [], []
    for r in batches:
        real = r.real.bool().cpu()
        n = real.sum(-1).double()
        special = ((r.cls.bool().cpu() | r.sep.bool().cpu()) & real).sum(-1).double()
        pairs = (real[:, 1:] & real[:, :-1]).sum(-1).double()
        keep = n > 0
        vertical.append((special / n)[keep])
        diagonal.append((1.0 / n + 2.0 * pairs / n**2)[keep])
    return {"vertical": float(torch.cat(vertical).mean()), "diagonal": float(torch.cat(diagonal).mean())}


def grid_pattern_shares(grids: Mapping[str, object], uniform: Mapping[str, float] | None = None) -> dict[str, float]:
    """Share of heads in each of Kovaleva's classes, ``{class: share}``, from tensor or array grids ``[layers, heads]``
    (classified here; ``core.rules.pattern_shares`` counts class codes already computed)."""
    arrays = {k: as_array(v) for k, v in grids.items() if k in rules.PATTERN_STATS}
    return rules.pattern_shares(rules.pattern_codes(arrays, uniform=uniform))
