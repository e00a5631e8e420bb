"""Significance shared by the sweep, the report and the plugin: the fields of an ablation cell and the
Benjamini-Hochberg correction over many cells."""

from __future__ import annotations

import numpy as np

#: The fields of one ablation cell, in the order of the last axis of the ablation tables.
ABLATION_FIELDS = ("value", "delta", "ci_low", "ci_high", "p")


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values) of a flat array; NaNs stay NaN and are not counted."""
    p = np.asarray(p, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    if finite.size == 0:
        return q
    order = finite[np.argsort(p[finite], kind="stable")]
    m = finite.size
    ranked = p[order] * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    q[order] = np.minimum(ranked, 1.0)
    return q
