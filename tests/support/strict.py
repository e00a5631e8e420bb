"""Build a bertwatch callback that re-raises its errors instead of containing them, as the tests want."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

from bertwatch.callbacks import _safe


def strict(make: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``make(*args, **options)`` (a bertwatch callback, or ``bertwatch.watch``) built with ``_safe.RAISE_ERRORS``
    on: the callback (and the ablation callback it makes) re-raises every error, so a test sees it instead of a
    warning. The switch is bertwatch's only for its tests: the library reads no environment variable for it."""
    with mock.patch.object(_safe, "RAISE_ERRORS", True):
        return make(*args, **options)
