"""Attaching bertwatch to Trainers: ``watch(trainer)`` for one, ``watching_trainers()`` for every one a script makes.

Both give each bertwatch callback its Trainer (``set_trainer``), so it sees the eval set, the collator, the
``compute_metrics`` and the other callbacks (TensorBoard run, trackers) without looking anywhere else.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from bertwatch.callbacks.watch import BertWatchCallback, WatchCallback
from bertwatch.options.settings import callback_settings

__all__ = ["watch", "watching_trainers"]


def _bertwatch_callbacks(trainer: Any) -> list[Any]:
    """The bertwatch callbacks (monitors and ``AblationCallback``) among ``trainer``'s callbacks, in order."""
    from transformers import Trainer

    from bertwatch.callbacks.ablate_on_end import AblationCallback

    if not isinstance(trainer, Trainer):
        raise TypeError(f"bertwatch.watch expects a transformers Trainer, got {type(trainer).__name__}")
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, (WatchCallback, AblationCallback))]


def watch(trainer: Any, **settings: Any) -> WatchCallback:
    """Attach bertwatch to an existing ``Trainer`` (subclasses included) and return its bertwatch callback.

    Adds ``BertWatchCallback(**settings)`` unless the Trainer already has a bertwatch monitor (``BertWatchCallback``
    or a single-purpose one, which is then returned, a ``BertWatchCallback`` first), and gives every bertwatch
    callback it has the Trainer, so they see its eval set, collator and trackers before the first evaluation.
    Idempotent: a second call returns the same callback. Call it before ``trainer.train()``.

    Args:
        trainer: a ``transformers.Trainer`` or a subclass (TRL's, sentence-transformers', your own).
        **settings: ``BertWatchCallback``'s keyword arguments: the fields of
            :class:`~bertwatch.options.settings.WatchSettings` (``every_n_steps=20``, ``ablate_on_end=True``,
            ``probing=ProbeOptions(max_length=256)``, ...), or ``settings=WatchSettings(...)`` itself.

    Returns:
        The Trainer's bertwatch callback (a ``WatchCallback``): its ``history`` holds the grids measured.

    Raises:
        TypeError: ``trainer`` is not a Trainer, or an option name is unknown (the message lists the valid ones).
        ValueError: an option is out of its range, or ``settings`` are given for a Trainer that already has a
            bertwatch monitor (whose settings they cannot change).

    Example:
        >>> import tempfile
        >>> import transformers as T
        >>> from bertwatch import watch
        >>> config = T.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
        ...                       intermediate_size=16)
        >>> args = T.TrainingArguments(tempfile.mkdtemp(), report_to=[])
        >>> trainer = T.Trainer(model=T.BertForSequenceClassification(config), args=args)
        >>> callback = watch(trainer, every_n_steps=20)
        >>> type(callback).__name__, callback.settings.every_n_steps
        ('BertWatchCallback', 20)
        >>> watch(trainer) is callback
        True
    """
    monitors = [cb for cb in _bertwatch_callbacks(trainer) if isinstance(cb, WatchCallback)]
    if monitors and settings:
        raise ValueError(
            f"this Trainer already has a {type(monitors[0]).__name__}; watch(trainer, ...) cannot change its settings"
        )
    if monitors:
        callback = next((cb for cb in monitors if isinstance(cb, BertWatchCallback)), monitors[0])
    else:
        given = callback_settings(
            "bertwatch.watch", BertWatchCallback.options, settings.pop("settings", None), settings
        )
        callback = BertWatchCallback(settings=given)
        callback.shown_name = "bertwatch"  # the user named no class: the lines and warnings say "bertwatch"
        trainer.add_callback(callback)
    for cb in _bertwatch_callbacks(trainer):
        cb.set_trainer(trainer)
    return callback


@contextlib.contextmanager
def watching_trainers(**settings: Any) -> Iterator[list[WatchCallback]]:
    """Within the block, every ``transformers.Trainer`` built (subclasses included) gets :func:`watch` with
    ``settings``; yields the list of callbacks attached so far. ``Trainer.__init__`` is restored on exit, error
    or not. ``settings`` are checked before the block runs.
    """
    from transformers import Trainer

    given = callback_settings("watching_trainers", BertWatchCallback.options, settings.pop("settings", None), settings)
    original = Trainer.__dict__["__init__"]
    attached: list[WatchCallback] = []

    @functools.wraps(original)
    def init_and_watch(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        has_one = any(isinstance(cb, WatchCallback) for cb in _bertwatch_callbacks(self))
        attached.append(watch(self) if has_one else watch(self, settings=given))

    Trainer.__init__ = init_and_watch
    try:
        yield attached
    finally:
        Trainer.__init__ = original
