"""Strict JSON for numbers: NaN and infinities become null, numpy scalars and arrays become Python values.

JSON has no NaN or infinity (``json.dumps(..., allow_nan=False)`` refuses them and browsers cannot parse them), and
an undefined statistic is NaN here, so every file bertwatch writes goes through these two functions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["finite_or_none", "jsonable"]


def finite_or_none(value: Any, digits: int | None = None) -> float | None:
    """``float(value)``, or None when it is None, NaN or infinite; rounded to ``digits`` decimals if given."""
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return round(value, digits) if digits is not None else value


def jsonable(obj: Any, digits: int | None = None) -> Any:
    """``obj`` with dict keys as strings, tuples and arrays as lists, and floats through :func:`finite_or_none`."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(x, digits) for x in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), digits)
    if isinstance(obj, (np.floating, float)):
        return finite_or_none(obj, digits)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj
