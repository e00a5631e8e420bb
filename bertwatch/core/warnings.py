"""The one warning category of bertwatch, torch-free so that every layer can raise it."""

from __future__ import annotations

__all__ = ["BertWatchWarning"]


class BertWatchWarning(UserWarning):
    """Something bertwatch measures is incomplete or stopped (a monitor failed, examples cannot be scored as given);
    the training run and the other measurements go on."""
