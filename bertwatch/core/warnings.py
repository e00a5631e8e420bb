"""The one warning category of bertwatch and its setup error, torch-free so that every layer can raise them.

A stability alert or a failing verdict is printed as a ``bertwatch:`` line (``callbacks.announce``), with no file
prefix, and also warned as a ``BertWatchAlert``, a ``BertWatchWarning`` that is not shown unless a filter asks for
it (as Python hides ``DeprecationWarning``), so it is not said twice: ``warnings.simplefilter("always",
BertWatchAlert)`` shows them as warnings, ``"error"`` raises them, ``pytest.warns(BertWatchWarning)`` records them.
"""

from __future__ import annotations

import warnings

__all__ = ["BertWatchAlert", "BertWatchWarning", "SetupError", "cut_message", "warn_alert"]


class BertWatchWarning(UserWarning):
    """Something bertwatch measures is incomplete or stopped (a monitor failed, examples cannot be scored as given);
    the training run and the other measurements go on."""


class SetupError(ValueError):
    """bertwatch was configured in a way it cannot work with; raised before the first training step (the callbacks'
    ``on_train_begin``), never contained."""


class BertWatchAlert(BertWatchWarning):
    """A new stability alert or a failing verdict, already printed as a ``bertwatch:`` line: hidden unless a
    warnings filter shows it (module docstring)."""


#: The filter that hides a ``BertWatchAlert``, last in ``warnings.filters``: any filter of the user's comes first.
_HIDDEN = ("ignore", None, BertWatchAlert, None, 0)


def warn_alert(message: str, stacklevel: int = 2) -> None:
    """Warn ``message`` as a ``BertWatchAlert`` (``stacklevel`` as for ``warnings.warn``, from the caller), hidden
    by a filter placed last, so that any filter of the user's decides first; placed at each call, not at import,
    because ``warnings.catch_warnings`` and ``warnings.resetwarnings`` drop filters added meanwhile.

    Example:
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warn_alert("bertwatch: 1 head in alert since step 10: ...")
        >>> caught
        []
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always", BertWatchWarning)
        ...     warn_alert("bertwatch: 1 head in alert since step 10: ...")
        >>> caught[0].category.__name__
        'BertWatchAlert'
    """
    if _HIDDEN not in warnings.filters:
        warnings.filterwarnings("ignore", category=BertWatchAlert, append=True)
    warnings.warn(message, BertWatchAlert, stacklevel=stacklevel + 1)


def cut_message(count: int, total: int, what: str, length: int, limit: str, recorded: str, remedy: str) -> str:
    """The one setup warning of examples cut to the length bertwatch measures: how many, to what length, where the
    length is recorded and what to do.

    Args:
        count: examples longer than ``length`` tokens (cut to their first ``length``).
        total: examples in the set.
        what: what the examples are (``"probe examples"``, ``"evaluation examples"``).
        length: the length measured, in tokens with the special tokens.
        limit: where that length comes from (``"ProbeOptions(max_length=...)"``, ``"the model's maximum"``).
        recorded: where the run records the length (and the count).
        remedy: how to measure them whole.

    Example:
        >>> cut_message(2, 5, "probe examples", 16, "max_length", "the run records it", "raise it")[:46]
        'bertwatch: 2 of 5 probe examples are longer th'
    """
    return (
        f"bertwatch: {count} of {total} {what} are longer than {length} tokens ({limit}) and are measured on their "
        f"first {length} tokens only; {recorded}. To measure them whole, {remedy}."
    )
