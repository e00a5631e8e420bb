"""What a callback can learn about the Trainer that calls it: datasets, collator, tokenizer, TensorBoard run dir.

``TrainerCallback`` events receive the model, tokenizer and dataloaders but not the Trainer. For the evaluation
set and the TensorBoard run directory bertwatch looks one step further: the ``CallbackHandler`` and ``Trainer``
that are calling it, found on the call stack. Every lookup has an explicit argument that overrides it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["TrainerContext", "find_context", "tensorboard_run_dir"]


@dataclass
class TrainerContext:
    """The Trainer and its CallbackHandler on the current call stack (either may be None)."""

    trainer: Any = None
    handler: Any = None

    @property
    def eval_dataset(self) -> Any:
        dataset = getattr(self.trainer, "eval_dataset", None)
        if isinstance(dataset, dict):
            dataset = next(iter(dataset.values()), None)
        return dataset

    @property
    def train_dataset(self) -> Any:
        return getattr(self.trainer, "train_dataset", None)

    @property
    def data_collator(self) -> Any:
        return getattr(self.trainer, "data_collator", None)

    @property
    def compute_metrics(self) -> Any:
        return getattr(self.trainer, "compute_metrics", None)

    def callbacks(self) -> list[Any]:
        return list(getattr(self.handler, "callbacks", []) or [])


def find_context(max_depth: int = 24) -> TrainerContext:
    """Walk up the call stack to the ``CallbackHandler`` and ``Trainer`` running this event."""
    from transformers import Trainer
    from transformers.trainer_callback import CallbackHandler

    context = TrainerContext()
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if context.handler is None and isinstance(owner, CallbackHandler):
            context.handler = owner
        elif isinstance(owner, Trainer):
            context.trainer = owner
            break
        frame = frame.f_back
    return context


def tensorboard_run_dir(args: Any, context: TrainerContext, explicit: str | os.PathLike | None = None) -> str:
    """The directory the Trainer's TensorBoard scalars go to, so bertwatch's summaries share their run.

    In order: ``explicit``; the ``TensorBoardCallback``'s writer or logging dir; ``$TENSORBOARD_LOGGING_DIR``;
    ``<output_dir>/runs/<date>_<host>`` (transformers' default). When the TensorBoardCallback has not picked its
    directory yet, it is given bertwatch's, so both write into the same run.
    """
    if explicit is not None:
        return os.fspath(explicit)
    from transformers.integrations import TensorBoardCallback
    from transformers.integrations.integration_utils import default_logdir

    tb_callbacks = [cb for cb in context.callbacks() if isinstance(cb, TensorBoardCallback)]
    for cb in tb_callbacks:
        writer = getattr(cb, "tb_writer", None)
        logdir = getattr(writer, "log_dir", None) if writer is not None else None
        if logdir:
            return os.fspath(logdir)
        if getattr(cb, "logging_dir", None):
            return os.fspath(cb.logging_dir)
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    run_dir = os.path.expanduser(env) if env else os.path.join(args.output_dir, default_logdir())
    for cb in tb_callbacks:
        cb.logging_dir = run_dir
    return run_dir
