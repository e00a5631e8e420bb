"""The one warning category of bertwatch, torch-free so that every layer can raise it."""

from __future__ import annotations

__all__ = ["BertWatchWarning", "cut_message"]


class BertWatchWarning(UserWarning):
    """Something bertwatch measures is incomplete or stopped (a monitor failed, examples cannot be scored as given);
    the training run and the other measurements go on."""


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
