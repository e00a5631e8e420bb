"""Build a bertwatch callback that re-raises its errors instead of containing them, as the tests want."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from unittest import mock

from bertwatch.callbacks._safe import STRICT_VARIABLE


def strict(make: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``make(*args, **options)`` (a bertwatch callback, or ``bertwatch.watch``) built with ``BERTWATCH_STRICT=1``:
    the callback re-raises every error, so a test sees it instead of a warning."""
    with mock.patch.dict(os.environ, {STRICT_VARIABLE: "1"}):
        return make(*args, **options)
