"""HuggingFace ``Trainer`` callbacks that measure every attention head while the model fine-tunes.

``bertwatch.watch(trainer)`` (or ``bertwatch run script.py``) is the whole integration; the single-purpose callbacks
(``AttentionDriftCallback``, ``SpecialTokenMassCallback``, ``EntropyCallback``, ``GradientImportanceCallback``)
can be used alone or together, and share one probe pass; ``WatchSettings`` holds every option in one checked value
(the advanced ones in ``ProbeOptions``, ``AlertSettings``, ``VerdictSettings``, ``AblationOptions`` and
``ExpertOptions``).
``prune_failing(trainer)`` prunes a sweep's trial whose verdict is failing (``callbacks.trial_pruning``).
``AblationCallback`` lives in ``bertwatch.callbacks.ablate_on_end`` and is loaded on first use. See ``docs/callbacks.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bertwatch.callbacks._safe import BertWatchWarning, SetupError
from bertwatch.callbacks.attach import watch, watching_trainers
from bertwatch.callbacks.trial_pruning import PruneFailing, prune_failing
from bertwatch.callbacks.watch import (
    AttentionDriftCallback,
    BertWatchCallback,
    EntropyCallback,
    GradientImportanceCallback,
    SpecialTokenMassCallback,
)
from bertwatch.core.warnings import BertWatchAlert
from bertwatch.options.groups import WordClassProbe
from bertwatch.options.settings import (
    AblationOptions,
    AlertSettings,
    ExpertOptions,
    ProbeOptions,
    VerdictSettings,
    WatchSettings,
)

__all__ = [
    "AblationCallback",
    "AblationOptions",
    "AlertSettings",
    "AttentionDriftCallback",
    "BertWatchCallback",
    "BertWatchAlert",
    "BertWatchWarning",
    "EntropyCallback",
    "ExpertOptions",
    "GradientImportanceCallback",
    "ProbeOptions",
    "PruneFailing",
    "SetupError",
    "SpecialTokenMassCallback",
    "VerdictSettings",
    "WatchSettings",
    "WordClassProbe",
    "prune_failing",
    "watch",
    "watching_trainers",
]

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.callbacks.ablate_on_end import AblationCallback


def __getattr__(name: str) -> Any:
    if name == "AblationCallback":
        value = importlib.import_module("bertwatch.callbacks.ablate_on_end").AblationCallback
        globals()[name] = value
        return value
    raise AttributeError(f"module 'bertwatch.callbacks' has no attribute {name!r}")
