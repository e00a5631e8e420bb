"""Head-labelling rules, in one place: Clark et al.'s behaviour labels and bertwatch's rules for Kovaleva et al.'s
pattern classes. Used by the statistics (``bertwatch.heads.maps.stats``), the TensorBoard plugin (served at ``/labels``,
which the frontend builds its legend from) and the report. Torch-free: grids are numpy arrays ``[..., layers, heads]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "BEHAVIOUR_RULES",
    "LabelRule",
    "PATTERN_CLASSES",
    "PATTERN_REQUIRED",
    "PATTERN_STATS",
    "PATTERN_THRESHOLDS",
    "PatternThresholds",
    "behaviour_labels",
    "pattern_codes",
    "pattern_shares",
    "rules_json",
]


@dataclass(frozen=True)
class LabelRule:
    """A head gets ``label`` when its ``stat`` grid is strictly above ``threshold`` (NaN never labels)."""

    stat: str
    label: str
    threshold: float
    glyph: str
    text: str


#: Clark et al. (2019)'s behaviour labels, in precedence order: a later rule overrides an earlier one.
BEHAVIOUR_RULES: tuple[LabelRule, ...] = (
    LabelRule("next", "next", 0.5, "→", "next token > 0.5"),
    LabelRule("prev", "prev", 0.5, "←", "previous token > 0.5"),
    LabelRule("entropy", "broad", 3.8, "B", "broad: entropy > 3.8 nats"),
    LabelRule("cls_mass", "cls", 0.6, "C", "[CLS] mass > 0.6"),
    LabelRule("sep_mass", "sep", 0.6, "S", "[SEP] mass > 0.6"),
    LabelRule("punct_mass", "punct", 0.6, "P", ". and , mass > 0.6"),
)

#: Kovaleva et al. (2019)'s five classes; the index is the class code of :func:`pattern_codes`.
PATTERN_CLASSES: tuple[str, ...] = ("heterogeneous", "vertical", "diagonal", "vertical+diagonal", "block")
#: The grids the pattern rules read (``intra_segment_mass`` may be absent: no "block" then).
PATTERN_STATS: tuple[str, ...] = ("cls_mass", "sep_mass", "prev", "next", "self", "intra_segment_mass")
#: Those the pattern rules cannot do without.
PATTERN_REQUIRED: tuple[str, ...] = PATTERN_STATS[:5]


@dataclass(frozen=True)
class PatternThresholds:
    """Thresholds of the pattern rules (bertwatch's choice: Kovaleva's CNN and annotations were never released).

    v = cls_mass + sep_mass, d = prev + next + self. Each is first taken as its excess over a uniform head
    of the same inputs, (x − u) / (1 − u), when the uniform baselines are given (see :func:`pattern_codes`).
    """

    vertical: float = 0.5
    diagonal: float = 0.5
    mixed: float = 0.25
    block: float = 0.8


#: The thresholds used unless a caller passes others.
PATTERN_THRESHOLDS = PatternThresholds()


def _compare_above(grid: np.ndarray, threshold: float) -> np.ndarray:
    """``grid > threshold`` at the grid's own float precision (a float32 0.6 is not "> 0.6"); NaN is False."""
    grid = np.asarray(grid)
    limit = np.asarray(threshold, dtype=grid.dtype if grid.dtype.kind == "f" else np.float64)
    with np.errstate(invalid="ignore"):
        return grid > limit


def behaviour_labels(grids: Mapping[str, object], *, strict: bool = False) -> np.ndarray:
    """Labels (``object`` array of str, None for no label) from grids ``[..., layers, heads]``, per BEHAVIOUR_RULES.

    A missing grid is skipped, or raises KeyError when ``strict``.
    """
    arrays = {}
    for rule in BEHAVIOUR_RULES:
        if rule.stat in grids:
            arrays[rule.stat] = np.asarray(grids[rule.stat])
        elif strict:
            raise KeyError(f"behaviour labels need the statistic {rule.stat!r}")
    if not arrays:
        raise KeyError(f"behaviour labels need at least one of {[r.stat for r in BEHAVIOUR_RULES]}")
    shape = next(iter(arrays.values())).shape
    labels = np.full(shape, None, dtype=object)
    for rule in BEHAVIOUR_RULES:
        grid = arrays.get(rule.stat)
        if grid is None or grid.shape != shape:
            continue
        labels[_compare_above(grid, rule.threshold)] = rule.label
    return labels


def _excess(value: np.ndarray, uniform: object) -> np.ndarray:
    """(x − u) / (1 − u): 0 for a uniform head, 1 for a head all on those keys."""
    if uniform is None:
        return value
    u = np.asarray(uniform, dtype=np.float64)
    return (value - u) / np.maximum(1.0 - u, 1e-12)


def pattern_codes(
    grids: Mapping[str, object],
    *,
    uniform: Mapping[str, object] | None = None,
    thresholds: PatternThresholds = PATTERN_THRESHOLDS,
) -> np.ndarray:
    """Kovaleva's class codes (index into PATTERN_CLASSES), int64 of the grids' shape ``[..., layers, heads]``.

    With v, d the vertical and diagonal evidence (see PatternThresholds): "vertical+diagonal" if v ≥ mixed and
    d ≥ mixed, else "vertical" if v ≥ vertical, else "diagonal" if d ≥ diagonal, else "block" if
    intra_segment_mass ≥ block (pair inputs only), else "heterogeneous".

    ``uniform`` holds a uniform head's v and d on the same inputs (``{"vertical": u_v, "diagonal": u_d}``,
    scalars or broadcastable arrays, e.g. from ``bertwatch.heads.maps.patterns.uniform_baselines``). Without it,
    short inputs push heads toward "vertical+diagonal": a uniform head on n tokens has v = 2/n and d ≈ 3/n,
    both ≥ 0.25 for n ≤ 8.
    """
    missing = [s for s in PATTERN_REQUIRED if s not in grids]
    if missing:
        raise KeyError(f"pattern classes need the statistics {missing}")
    f = {name: np.asarray(grids[name], dtype=np.float64) for name in PATTERN_STATS if name in grids}
    uniform = uniform or {}
    v = _excess(f["cls_mass"] + f["sep_mass"], uniform.get("vertical"))
    d = _excess(f["prev"] + f["next"] + f["self"], uniform.get("diagonal"))
    t = thresholds
    codes = np.zeros(np.broadcast_shapes(v.shape, d.shape), dtype=np.int64)
    if "intra_segment_mass" in f:
        codes[np.broadcast_to(f["intra_segment_mass"] >= t.block, codes.shape)] = 4
    codes[np.broadcast_to(d >= t.diagonal, codes.shape)] = 2
    codes[np.broadcast_to(v >= t.vertical, codes.shape)] = 1
    codes[np.broadcast_to((v >= t.mixed) & (d >= t.mixed), codes.shape)] = 3
    return codes


def pattern_shares(codes: np.ndarray) -> dict[str, float]:
    """Share of heads in each class, ``{class: share}`` over all heads of a ``[layers, heads]`` code grid."""
    codes = np.asarray(codes).ravel()
    counts = np.bincount(codes, minlength=len(PATTERN_CLASSES))
    return {name: float(counts[k] / max(codes.size, 1)) for k, name in enumerate(PATTERN_CLASSES)}


def rules_json() -> dict:
    """Every rule as plain JSON, for the plugin's ``/labels`` and the report."""
    return {
        "behaviour": [asdict(rule) for rule in BEHAVIOUR_RULES],
        "patterns": {"classes": list(PATTERN_CLASSES), "stats": list(PATTERN_STATS), **asdict(PATTERN_THRESHOLDS)},
    }
