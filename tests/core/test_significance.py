"""The Benjamini-Hochberg correction (``core.significance``) against the textbook definition computed here in plain
Python: q_(i) = min over j >= i of p_(j) m / j, capped at 1, over the m finite p-values; NaN stays NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bertwatch.core.significance import ABLATION_FIELDS, benjamini_hochberg

pytestmark = pytest.mark.fast


def plain_bh(p: list[float]) -> list[float]:
    finite = [i for i, v in enumerate(p) if not math.isnan(v)]
    m = len(finite)
    ranked = sorted(finite, key=lambda i: (p[i], i))
    q = [math.nan] * len(p)
    for rank, i in enumerate(ranked, 1):
        q[i] = min(1.0, min(p[ranked[j - 1]] * m / j for j in range(rank, m + 1)))
    return q


def test_a_worked_example() -> None:
    p = [0.01, 0.04, 0.03, 0.5]  # sorted 0.01, 0.03, 0.04, 0.5 -> 0.04, 0.0533, 0.0533, 0.5
    np.testing.assert_allclose(benjamini_hochberg(np.array(p)), [0.04, 0.16 / 3, 0.16 / 3, 0.5])


@given(
    st.lists(
        st.one_of(st.floats(0.0, 1.0), st.just(math.nan), st.sampled_from([0.0, 0.05, 1.0])), min_size=0, max_size=30
    )
)
def test_equals_the_textbook_definition_with_nans_and_ties(p: list[float]) -> None:
    q = benjamini_hochberg(np.array(p, dtype=float))
    expected = plain_bh(p)
    assert q.shape == (len(p),)
    for got, want in zip(q.tolist(), expected, strict=True):
        assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=1e-15)
    finite = [v for v in q.tolist() if not math.isnan(v)]
    assert all(0 <= v <= 1 for v in finite)
    assert all(qv >= pv for qv, pv in zip(q.tolist(), p) if not math.isnan(pv))  # never below the raw p


def test_all_nan_stays_nan_and_the_cell_fields_are_in_table_order() -> None:
    assert np.isnan(benjamini_hochberg(np.array([math.nan, math.nan]))).all()
    assert ABLATION_FIELDS == ("value", "delta", "ci_low", "ci_high", "p")
