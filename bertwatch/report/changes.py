"""What changed in the heads over a run, as the report states it: each statistic's change per head from its first to
its last logged step with float32 rounding noise shown as no change, the heads that changed most, the statistics
with no values, and the family whose change is largest. Pure functions of the grids ``read_run`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from bertwatch.core.stat_names import DRIFT_NAMES, PROPORTION_NAMES, STAT_GROUPS

__all__ = [
    "ROUNDING",
    "HeadChange",
    "biggest_changes",
    "empty_stats",
    "family_leaders",
    "grid_change",
    "reference_value",
    "settled",
]

#: A few float32 roundings, relative to the values involved: a difference below this share of them is noise (the
#: statistics are float32 means of float32 sums, each a few roundings away from the exact value).
ROUNDING = 8 * float(np.finfo(np.float32).eps)

#: Statistics made of probabilities (shares, drift): their values involved are the probabilities themselves, so
#: their rounding is at least that of 1 even where the value is near 0 (a JS divergence of 1e-9 is noise).
_UNIT_SCALE = frozenset(PROPORTION_NAMES) | frozenset(DRIFT_NAMES)


class HeadChange(NamedTuple):
    """One head's change of one statistic between the first and the last logged step."""

    layer: int
    head: int
    first: float
    last: float
    delta: float


def reference_value(stat: str) -> float | None:
    """The value meaning "unchanged from the pretrained model" of a drift statistic (1 for cosine similarity, 0 for
    a divergence); None for the others.

    Example:
        >>> reference_value("drift_cosine"), reference_value("entropy")
        (1.0, None)
    """
    return {"drift_cosine": 1.0, "drift_js": 0.0}.get(stat)


def _tolerance(stat: str, *grids: np.ndarray) -> np.ndarray:
    """Per cell, :data:`ROUNDING` times the largest magnitude among the values involved (1 at least for shares)."""
    scale = np.max(np.abs(np.stack([np.nan_to_num(g) for g in grids])), axis=0)
    if stat in _UNIT_SCALE:
        scale = np.maximum(scale, 1.0)
    return ROUNDING * scale


def settled(stat: str, grid: Any, reference: float) -> np.ndarray:
    """``grid`` (float64) with every value within float32 rounding of ``reference`` set to ``reference`` exactly:
    a drift of 1e-9 from the pretrained model reads as none.

    Example:
        >>> settled("drift_js", [[1e-9, 0.2]], 0.0).tolist()
        [[0.0, 0.2]]
    """
    values = np.asarray(grid, dtype=np.float64)
    near = np.abs(values - reference) <= _tolerance(stat, values, np.full_like(values, reference))
    return np.where(near, reference, values)


def grid_change(stat: str, first: Any, last: Any) -> np.ndarray:
    """``last − first`` per head in float64, 0 where the difference is within float32 rounding of the two values.

    Example:
        >>> grid_change("drift_cosine", [[0.99999994, 0.9]], [[1.0, 0.7]]).round(6).tolist()
        [[0.0, -0.2]]
    """
    a, b = np.asarray(first, dtype=np.float64), np.asarray(last, dtype=np.float64)
    delta = b - a
    return np.where(np.abs(delta) <= _tolerance(stat, a, b), 0.0, delta)


def biggest_changes(stat: str, entry: Mapping[str, Any], count: int = 3) -> list[HeadChange]:
    """The ``count`` heads whose ``stat`` changed most from the first to the last logged step (largest ``|Δ|``
    first, ties by layer then head); heads without a value or with no change beyond rounding are left out. A drift
    statistic's values within rounding of its unchanged value are taken as that value (:func:`settled`).

    Args:
        stat: the statistic's name (sets its rounding rule).
        entry: its grids as ``read_run`` gives them, ``{"first": (step, grid), "last": (step, grid), ...}``.
        count: how many heads at most.

    Returns:
        A list of :class:`HeadChange`, empty when nothing changed.
    """
    first = np.asarray(entry["first"][1], dtype=np.float64)
    last = np.asarray(entry["last"][1], dtype=np.float64)
    reference = reference_value(stat)
    if reference is not None:  # a drift within rounding of "unchanged" reads as unchanged
        first, last = settled(stat, first, reference), settled(stat, last, reference)
    delta = grid_change(stat, first, last)
    cells = [(l, h) for l, h in np.ndindex(delta.shape) if np.isfinite(delta[l, h]) and delta[l, h] != 0.0]
    cells.sort(key=lambda c: (-abs(delta[c]), c))
    return [HeadChange(l, h, float(first[l, h]), float(last[l, h]), float(delta[l, h])) for l, h in cells[:count]]


def empty_stats(grids: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The statistics without a single value at any logged step (all NaN: e.g. ``intra_segment_mass`` on single
    sentences), sorted.

    Example:
        >>> empty_stats({"a": {"first": (0, [[np.nan]]), "last": (5, [[np.nan]])}, "b": {"first": (0, [[1.0]]),
        ...     "last": (5, [[np.nan]])}})
        ['a']
    """
    out = []
    for stat, entry in grids.items():
        stacked = entry.get("values")
        arrays = [stacked] if stacked is not None else [entry["first"][1], entry["last"][1]]
        if not any(np.isfinite(np.asarray(a, dtype=np.float64)).any() for a in arrays):
            out.append(stat)
    return sorted(out)


def _relative(stat: str, entry: Mapping[str, Any], change: HeadChange) -> float:
    """``|Δ|`` of a head over the statistic's magnitude (the largest value of its first and last grids), so that
    statistics of different units can be compared within a family."""
    both = np.abs(np.stack([np.asarray(entry[k][1], dtype=np.float64) for k in ("first", "last")]))
    scale = float(np.nanmax(both)) if np.isfinite(both).any() else 0.0
    return abs(change.delta) / scale if scale > 0 else 0.0


def family_leaders(grids: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, list[HeadChange]]]:
    """Per family (the plugin's menu groups, in menu order; the drift family left out, the report leads with it),
    the statistic whose largest change is the largest relative to its own magnitude, with its heads that changed
    most: ``[(family, stat, changes)]``. Families in which nothing changed beyond rounding are left out.

    Args:
        grids: ``read_run``'s training grids, ``{stat: {"first": (step, grid), "last": (step, grid), ...}}``.

    Returns:
        A list of ``(family title, statistic, biggest_changes(...))``.
    """
    grouped = [(title, names) for title, names in STAT_GROUPS if names != DRIFT_NAMES]
    known = {n for _, names in STAT_GROUPS for n in names}
    grouped.append(("Other", tuple(sorted(s for s in grids if s not in known))))
    out = []
    for title, names in grouped:
        best: tuple[float, str, list[HeadChange]] | None = None
        for stat in names:
            if stat not in grids:
                continue
            changes = biggest_changes(stat, grids[stat])
            if changes:
                size = _relative(stat, grids[stat], changes[0])
                if best is None or size > best[0]:
                    best = (size, stat, changes)
        if best is not None:
            out.append((title, best[1], best[2]))
    return out
