"""What a callback can learn about the Trainer that calls it: datasets, collator, tokenizer, TensorBoard run dir.

Two sources, no guessing: the Trainer itself when the callback was given it (``bertwatch.watch(trainer)``,
``bertwatch run`` or ``callback.set_trainer(trainer)``, as transformers' own ``JITCheckpointCallback`` is), and
the keyword arguments every Trainer event carries (``model``, ``processing_class``, ``train_dataloader``,
``eval_dataloader``, ...). A callback only placed in ``callbacks=[...]`` sees the second source alone: the eval set
once the Trainer has evaluated, and not the ``TensorBoardCallback``. Every lookup has an explicit argument that
overrides it.

What differs between Trainer versions is adapted here (:func:`tokenizer_of`; a tokenizer's or a config's attribute
that may be missing: ``probe.adapt``); everywhere else the Trainer's arguments, state and attributes are read
directly.
"""

from __future__ import annotations

import math
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TrainerContext",
    "TrainerLink",
    "evaluation_steps",
    "tensorboard_run_dir",
    "tokenizer_of",
]


def tokenizer_of(processing_class: Any) -> Any:
    """The tokenizer of a Trainer's ``processing_class``: a processor's ``tokenizer`` (a multimodal processor holds
    one), else the processing class itself (a tokenizer, or None)."""
    return getattr(processing_class, "tokenizer", processing_class)  # a tokenizer has no .tokenizer; a processor has


def _first(dataset: Any) -> Any:
    if isinstance(dataset, dict):
        return next(iter(dataset.values()), None)
    return dataset


@dataclass
class TrainerContext:
    """The Trainer (when the callback was given it), its CallbackHandler and the arguments of the current event."""

    trainer: Any = None
    handler: Any = None
    event: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bound(self) -> bool:
        """Whether the Trainer itself is known (so its eval set and callbacks are, before any evaluation)."""
        return self.trainer is not None

    def _loader(self, name: str) -> Any:
        return self.event.get(name)

    def _dataset(self, from_trainer: Any, loader: str) -> Any:
        """``from_trainer`` when the Trainer has it, else the dataset of the event's ``loader`` (None without one)."""
        if from_trainer is not None:
            return from_trainer
        found = self._loader(loader)
        return None if found is None else found.dataset

    @property
    def eval_dataset(self) -> Any:
        return self._dataset(None if self.trainer is None else _first(self.trainer.eval_dataset), "eval_dataloader")

    @property
    def train_dataset(self) -> Any:
        return self._dataset(None if self.trainer is None else self.trainer.train_dataset, "train_dataloader")

    @property
    def data_collator(self) -> Any:
        if self.trainer is not None and self.trainer.data_collator is not None:
            return self.trainer.data_collator
        loader = self._loader("train_dataloader") or self._loader("eval_dataloader")
        return None if loader is None else loader.collate_fn

    @property
    def compute_metrics(self) -> Any:
        return None if self.trainer is None else self.trainer.compute_metrics

    @property
    def model(self) -> Any:
        """The event's model, else the Trainer's (None when neither is known)."""
        value = self.event.get("model")
        return value if value is not None or self.trainer is None else self.trainer.model

    @property
    def processing_class(self) -> Any:
        value = self.event.get("processing_class")
        return value if value is not None or self.trainer is None else self.trainer.processing_class

    def callbacks(self) -> list[Any]:
        handler = self.handler
        if handler is None and self.trainer is not None:
            handler = self.trainer.callback_handler
        return [] if handler is None else list(handler.callbacks)


class TrainerLink:
    """A weak link from a callback to the Trainer it was given; ``context(kwargs)`` combines it with an event's."""

    def __init__(self) -> None:
        self._trainer: Any = None

    def set(self, trainer: Any) -> None:
        self._trainer = None if trainer is None else weakref.ref(trainer)

    @property
    def trainer(self) -> Any:
        return None if self._trainer is None else self._trainer()

    # a Trainer is pickled with its callbacks where a search runs its trials in other processes (Ray Tune): the
    # link travels as the Trainer itself (pickle's memo keeps it the same object) and is weak again on arrival
    def __getstate__(self) -> dict[str, Any]:
        return {"trainer": self.trainer}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.set(state.get("trainer"))

    def context(self, event: Mapping[str, Any] | None = None) -> TrainerContext:
        return TrainerContext(trainer=self.trainer, event=dict(event or {}))


def evaluation_steps(args: Any, state: Any) -> tuple[int, ...]:
    """The steps the Trainer will evaluate at in this training, from its ``eval_strategy`` ("steps": every
    ``eval_steps``, a fraction of ``max_steps`` when below 1, from ``eval_delay`` on, and the last step, as
    transformers' ``DefaultFlowCallback`` evaluates at the end; "epoch": at each epoch's end; "no": none); empty
    when the run's length is unknown."""
    strategy = args.eval_strategy  # an IntervalStrategy, which equals its string
    steps = int(state.max_steps or 0)
    if steps <= 0:
        return ()
    if strategy == "epoch":
        epochs = max(1, math.ceil(float(state.num_train_epochs or 1)))
        return tuple(sorted({min(steps, round(k * steps / epochs)) for k in range(1, epochs + 1)}))
    every = args.eval_steps or args.logging_steps or 0
    if strategy != "steps" or every <= 0:
        return ()
    every = math.ceil(every * steps) if every < 1 else int(every)
    delay = args.eval_delay or 0
    return tuple(s for s in sorted({*range(every, steps + 1, every), steps}) if s >= delay)


def _writer_dir(writer: Any) -> Any:
    """Where a TensorBoard writer writes: ``log_dir`` (torch's ``SummaryWriter``) or ``logdir`` (tensorboardX's)."""
    return getattr(writer, "log_dir", None) or getattr(writer, "logdir", None)  # each writer class has one of them


def tensorboard_run_dir(args: Any, context: TrainerContext, explicit: str | os.PathLike | None = None) -> str:
    """The directory the Trainer's TensorBoard scalars go to, so bertwatch's summaries share their run.

    In order: ``explicit``; the ``TensorBoardCallback``'s writer or logging dir (when the Trainer is known);
    ``$TENSORBOARD_LOGGING_DIR``; ``<output_dir>/runs/<date>_<host>`` (transformers' default). When the
    TensorBoardCallback has not picked its directory yet, it is given bertwatch's, so both write into the same run.
    """
    if explicit is not None:
        return os.fspath(explicit)
    from transformers.integrations import TensorBoardCallback
    from transformers.integrations.integration_utils import default_logdir

    tb_callbacks = [cb for cb in context.callbacks() if isinstance(cb, TensorBoardCallback)]
    for cb in tb_callbacks:
        logdir = _writer_dir(cb.tb_writer) if cb.tb_writer is not None else None
        if logdir:
            return os.fspath(logdir)
        if cb.logging_dir:
            return os.fspath(cb.logging_dir)
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    run_dir = os.path.expanduser(env) if env else os.path.join(args.output_dir, default_logdir())
    for cb in tb_callbacks:
        cb.logging_dir = run_dir
    return run_dir
