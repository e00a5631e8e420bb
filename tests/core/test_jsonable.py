"""core.jsonable: every JSON file bertwatch writes is strict (no NaN, no infinity) and keeps finite values exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bertwatch.core.jsonable import finite_or_none, jsonable

pytestmark = pytest.mark.fast


def test_undefined_numbers_become_null_and_finite_ones_stay_exact():
    doc = {
        1: np.array([[0.1, np.nan], [np.inf, -np.inf]], dtype=np.float32),
        "t": (np.float64(2.5), np.int64(3), np.bool_(True), None, "x", float("nan")),
    }
    out = jsonable(doc)
    text = json.dumps(out, allow_nan=False)  # would raise on NaN or infinity
    assert json.loads(text) == {
        "1": [[float(np.float32(0.1)), None], [None, None]],
        "t": [2.5, 3, True, None, "x", None],
    }
    assert type(out["t"][1]) is int and type(out["t"][2]) is bool


def test_rounding_is_optional_and_only_touches_floats():
    assert jsonable({"a": [1 / 3, 7]}, digits=6) == {"a": [0.333333, 7]}
    assert finite_or_none(1 / 3) == 1 / 3
    assert finite_or_none(None) is None and finite_or_none(math.nan) is None and finite_or_none("2") == 2.0
