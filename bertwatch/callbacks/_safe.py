"""Error containment for Trainer events: a failure inside bertwatch costs one warning, never the training run."""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from bertwatch.core.warnings import BertWatchWarning

__all__ = ["STRICT_VARIABLE", "BertWatchWarning", "SetupError", "Stoppable", "contained", "strict_from_environment"]

F = TypeVar("F", bound=Callable[..., Any])


#: The environment variable of bertwatch's own tests: a callback built while it is "1" re-raises every error
#: instead of containing it (``tests/support/strict.py`` sets it). Not an option for users.
STRICT_VARIABLE = "BERTWATCH_STRICT"


def strict_from_environment() -> bool:
    """Whether a callback built now re-raises its errors (``BERTWATCH_STRICT=1``, the tests' hook)."""
    return os.environ.get(STRICT_VARIABLE) == "1"


class SetupError(ValueError):
    """bertwatch was configured in a way it cannot work with; raised at ``on_train_begin``, never contained."""


def _always_raised() -> tuple[type[BaseException], ...]:
    from bertwatch.heads.capture import UnsupportedModelError

    return (SetupError, UnsupportedModelError)


class Stoppable(Protocol):
    """What ``contained`` asks of a callback: whether it is stopped, whether errors re-raise, how it stops, and how
    its messages name it (``"bertwatch"`` when ``bertwatch.watch`` made it, else its class)."""

    disabled: bool
    strict: bool
    shown_name: str

    def disable(self, message: str | None = None) -> None: ...


def contained(event: str) -> Callable[[F], F]:
    """Wrap a callback event: skip it once the callback is disabled; on an error warn once and disable.

    Setup errors (``SetupError``, ``UnsupportedModelError``) always propagate, and so does everything when the
    callback's ``strict`` is set (built with ``BERTWATCH_STRICT=1``: the tests' hook).
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Stoppable, *args: Any, **kwargs: Any) -> Any:
            if self.disabled:
                return None
            try:
                return fn(self, *args, **kwargs)
            except _always_raised():
                raise
            except Exception as err:
                if self.strict:
                    raise
                name = "bertwatch" if self.shown_name == "bertwatch" else f"bertwatch: {self.shown_name}"
                self.disable(
                    f"{name} stopped after an error in {event} ({type(err).__name__}: {err}); training continues "
                    "without it."
                )
                return None

        return wrapper  # type: ignore[return-value]

    return decorate


def warn_stopped(message: str) -> None:
    """Emit the one warning of a stopped monitor."""
    warnings.warn(message, BertWatchWarning, stacklevel=4)
