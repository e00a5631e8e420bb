"""The fast tier (``pytest -m fast``, ``make test-fast``): the same oracles on fewer cases."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


def fast_subset(values: Iterable[Any], fast: Iterable[Any]) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``, those in ``fast`` marked ``fast`` (the rest run in ``make test``).

    Example:
        >>> [getattr(v, "marks", ()) != () for v in fast_subset(["bert", "albert"], ["bert"])]
        [True, False]
    """
    chosen = list(fast)
    return [pytest.param(v, marks=pytest.mark.fast) if v in chosen else v for v in values]
