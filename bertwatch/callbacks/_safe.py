"""Error containment for Trainer events: a failure inside bertwatch costs one warning, never the training run."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from bertwatch.callbacks._context import TrainerLink
from bertwatch.core.warnings import BertWatchWarning, SetupError

__all__ = [
    "RAISE_ERRORS",
    "BertWatchWarning",
    "OwnCallback",
    "SetupError",
    "Stoppable",
    "contained",
    "raising_errors",
]

F = TypeVar("F", bound=Callable[..., Any])


#: Whether a callback built while this is True re-raises its errors instead of containing them. False for every
#: user, and neither an option nor an environment variable: only bertwatch's own tests turn it on, around building
#: a callback (``tests/support/strict.py``), so that a test sees an error instead of a warning.
RAISE_ERRORS = False


def raising_errors() -> bool:
    """Whether a callback built now re-raises its errors (:data:`RAISE_ERRORS`, the tests' switch)."""
    return RAISE_ERRORS


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
    callback's ``strict`` is set (built while :data:`RAISE_ERRORS` was on: the tests' switch).
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


class OwnCallback:
    """What bertwatch's Trainer callbacks share: their errors contained (:func:`contained`; ``strict``: re-raised,
    set by the tests' switch when built), a stop with one warning (:meth:`disable`), the name their messages give
    (``shown_name``: ``"bertwatch"`` when ``bertwatch.watch`` made it, else its class), and the Trainer given with
    :meth:`set_trainer` (weakly held; ``trainer``)."""

    def __init__(self) -> None:
        self.strict = raising_errors()
        self.disabled = False
        self.shown_name = type(self).__name__
        self._link = TrainerLink()

    def set_trainer(self, trainer: Any) -> None:
        """Give the callback its Trainer (weakly held), so it sees the eval set, the collator, ``compute_metrics``
        and the TensorBoard run before any evaluation. ``bertwatch.watch(trainer)`` and ``bertwatch run`` call it."""
        self._link.set(trainer)

    @property
    def trainer(self) -> Any:
        """The Trainer given with :meth:`set_trainer` (None when the callback was only put in ``callbacks=``)."""
        return self._link.trainer

    def disable(self, message: str | None = None) -> None:
        """Stop this callback for the rest of the run (with its one warning)."""
        self.disabled = True
        if message:
            warn_stopped(message)
