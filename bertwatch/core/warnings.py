"""The one warning category of bertwatch, torch-free so that every layer can raise it, and ``warn``, which points
a warning at the user's own line.

A stability alert or a failing verdict is printed as a ``bertwatch:`` line (``callbacks.announce``) and also
warned as a ``BertWatchAlert``, a ``BertWatchWarning`` that is not shown unless a filter asks for it (as Python
hides ``DeprecationWarning``): ``warnings.simplefilter("always", BertWatchAlert)`` shows them as warnings,
``"error"`` raises them, ``warnings.catch_warnings(record=True)`` with ``"always"`` (or ``pytest.warns``)
records them.
"""

from __future__ import annotations

import os
import sys
import warnings as _warnings

__all__ = ["BertWatchAlert", "BertWatchWarning", "cut_message", "warn"]


class BertWatchWarning(UserWarning):
    """Something bertwatch measures is incomplete or stopped (a monitor failed, examples cannot be scored as given);
    the training run and the other measurements go on."""


class BertWatchAlert(BertWatchWarning):
    """A new stability alert or a failing verdict, already printed as a ``bertwatch:`` line: hidden unless a
    warnings filter shows it (module docstring)."""


#: The filter that hides a ``BertWatchAlert``, last in ``warnings.filters``: any filter of the user's comes first.
_HIDDEN = ("ignore", None, BertWatchAlert, None, 0)

#: The packages whose frames stand between a Trainer event and the user's code (``trainer.train()``).
_CALLERS = ("bertwatch", "transformers", "accelerate", "torch")


def _library_dirs() -> tuple[str, ...]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = [os.path.dirname(os.path.abspath(m.__file__)) for n in _CALLERS[1:] if (m := sys.modules.get(n))]
    return tuple(os.path.join(d, "") for d in (here, *found) if d)


def warn(message: str, category: type[Warning] = BertWatchWarning) -> None:
    """``warnings.warn(message, category)`` at the first frame outside bertwatch and the libraries that call it
    (transformers, accelerate, torch): the user's ``trainer.train()`` line, whatever the depth of the call (the
    outermost frame when every one is a library's). A ``BertWatchAlert`` is hidden by a filter placed last, so
    that any filter of the user's decides first (placed here, not at import: ``warnings.catch_warnings`` and
    ``resetwarnings`` drop filters added meanwhile).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn("bertwatch: an example")
        >>> str(caught[0].message), caught[0].filename.endswith("warnings.py")
        ('bertwatch: an example', False)
    """
    if issubclass(category, BertWatchAlert) and _HIDDEN not in _warnings.filters:  # again after a reset
        _warnings.filterwarnings("ignore", category=BertWatchAlert, append=True)
    libraries = _library_dirs()
    frame, level = sys._getframe(1), 2
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(libraries):
        frame, level = frame.f_back, level + 1
    _warnings.warn(message, category, stacklevel=level)


def cut_message(count: int, total: int, what: str, length: int, limit: str, recorded: str, remedy: str) -> str:
    """The one setup warning of examples cut to the length bertwatch measures: how many, to what length, where the
    length is recorded and what to do.

    Args:
        count: examples longer than ``length`` tokens (cut to their first ``length``).
        total: examples in the set.
        what: what the examples are (``"probe examples"``, ``"evaluation examples"``).
        length: the length measured, in tokens with the special tokens.
        limit: where that length comes from (``"probe_max_length"``, ``"the model's maximum"``).
        recorded: where the run records the length (and the count).
        remedy: how to measure them whole.

    Example:
        >>> cut_message(2, 5, "probe examples", 16, "probe_max_length", "the run records it", "raise it")[:46]
        'bertwatch: 2 of 5 probe examples are longer th'
    """
    return (
        f"bertwatch: {count} of {total} {what} are longer than {length} tokens ({limit}) and are measured on their "
        f"first {length} tokens only; {recorded}. To measure them whole, {remedy}."
    )
