"""A watched run's two sides gathered from the Trainer at ``on_train_begin``: ``build_probe_context`` (what the
probe pass needs) and ``open_trainer_side`` (what stays with the run: the Trainer's arguments and state, the event
writer and the trackers).

What the Trainer gives is read here (``callbacks._context``): the probe examples (``probe_texts=``,
``probe_dataset=``, else the eval set, else the training set), the tokenizer and collator, the loss the gradient
statistics take (``callbacks.trainer_loss``), the TensorBoard run and the trackers; what the probe pass then
needs is built below it (``probe.probe_set``, ``probe.probe_units``, ``probe.reference``) into a
``probe.probe_context.ProbeContext``, which holds nothing of the Trainer.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from bertwatch.callbacks._context import TrainerContext, tensorboard_run_dir, tokenizer_of
from bertwatch.callbacks.tracking import is_tracker
from bertwatch.callbacks.trainer_loss import gradient_loss
from bertwatch.core.warnings import BertWatchWarning, SetupError
from bertwatch.heads.capture import model_shape
from bertwatch.heads.sharding import ShardingError, check_sharding
from bertwatch.heads.unwrap import Unwrapped, select_inputs, unwrap
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.adapt import autocast_dtype
from bertwatch.probe.probe_context import ProbeContext
from bertwatch.probe.probe_set import ProbeSet, ReferenceCache, build_probe_set, text_examples
from bertwatch.probe.probe_units import plan_units
from bertwatch.probe.reference import DriftReference, check_reference_model

__all__ = ["TrainerSide", "build_probe_context", "open_trainer_side"]


@dataclass(frozen=True, eq=False)
class TrainerSide:
    """What a watched run holds of the Trainer (``callbacks.watched_run``): its ``args`` and ``state``, the keyword
    arguments of its ``on_train_begin`` other than ``args``, ``state`` and ``control`` (``event``, handed on to the
    trackers), whether this is world process zero (``world_zero``) and whether the run started from a checkpoint
    (``resumed``: global step > 0); on world process zero the event ``writer`` opened in ``run_dir`` and the
    ``trackers`` (None, None and empty elsewhere)."""

    args: Any
    state: Any
    event: Mapping[str, Any]
    world_zero: bool
    resumed: bool
    writer: Any = None
    run_dir: str | None = None
    trackers: tuple[Any, ...] = ()


def _tokenizer(settings: ProbeSettings, event: Mapping[str, Any], unwrapped: Unwrapped) -> Any:
    """``tokenizer=``, else the Trainer's processing class (its tokenizer for a processor), else the wrapper's."""
    if settings.tokenizer is not None:
        return settings.tokenizer
    processing = event.get("processing_class")
    found = tokenizer_of(processing)
    return found if found is not None else unwrapped.tokenizer


def _probe_dataset(settings: ProbeSettings, context: TrainerContext) -> tuple[Any, str]:
    """``probe_dataset=``, else the Trainer's eval set, else (with a warning) its training set; with where it is
    from, in words."""
    if settings.dataset is not None:
        return settings.dataset, "probe_dataset"
    if context.eval_dataset is not None:
        return context.eval_dataset, "the eval set"
    train = context.train_dataset
    if train is not None:
        why = (
            "the Trainer has no eval_dataset"
            if context.bound
            else "the Trainer's eval_dataset cannot be seen before its first evaluation (the callback was "
            "only placed in callbacks=[...]; attach it with bertwatch.watch(trainer) to use the eval set)"
        )
        warnings.warn(
            f"bertwatch: {why}, so the probe set is sampled from the training set; pass probe_texts= or "
            "probe_dataset= to choose it",
            BertWatchWarning,
            stacklevel=2,
        )
    return train, "the training set"


def _probe(
    model: torch.nn.Module,
    settings: ProbeSettings,
    args: Any,
    event: Mapping[str, Any],
    context: TrainerContext,
    unwrapped: Unwrapped,
) -> tuple[ProbeSet, Any, str]:
    """The probe set, its tokenizer and where it is from; every batch is checked to hold only inputs the encoder
    takes."""
    tokenizer = _tokenizer(settings, event, unwrapped)
    texts, dataset, source = settings.texts, None, "probe_texts"
    if texts is None:
        dataset, source = _probe_dataset(settings, context)
        if unwrapped.tokenizer is not None and settings.dataset is None:  # sentence-transformers: raw text columns
            texts, dataset = text_examples(dataset, settings.num_examples, settings.seed), None
    label_names = args.label_names
    probe = build_probe_set(
        tokenizer,
        texts=texts,
        dataset=dataset,
        collator=settings.collator if settings.collator is not None else context.data_collator,
        model=model,
        num_examples=settings.num_examples,
        seed=settings.seed,
        batch_size=settings.batch_size,
        max_length=settings.max_length,
        remove_unused_columns=bool(args.remove_unused_columns),
        label_names=label_names,
    )
    for batch in probe.batches:
        select_inputs(unwrapped.model, batch, label_names or ())
    return probe, tokenizer, source


def build_probe_context(
    model: torch.nn.Module,
    settings: ProbeSettings,
    args: Any,
    state: Any,
    event: Mapping[str, Any],
    context: TrainerContext,
) -> ProbeContext:
    """Gather what the probe pass needs for the run that ``args`` and ``state`` describe.

    Args:
        model: the Trainer's model (wrapped or not; ``bertwatch.heads.unwrap`` finds the encoder).
        settings: the probe settings of the callbacks that share this pass.
        args: the Trainer's ``TrainingArguments`` (``output_dir``, precision, label names).
        state: the Trainer's ``TrainerState`` (global step, world process zero).
        event: the keyword arguments of the Trainer's ``on_train_begin`` (``processing_class``, loaders, ...).
        context: what is known of the Trainer (``callbacks._context``): datasets, collator, callbacks.

    Returns:
        The run's ``ProbeContext``; the probe set is collated and its units put on the model's device, the
        reference loaded when resuming.

    Raises:
        SetupError: a model whose weights are sharded in a way the pass cannot follow, a probe set that cannot
            be built (no tokenizer, no examples) or a ``reference_model`` that cannot be loaded, with what to do. A
            loss the gradient statistics cannot take is not refused here but described in ``loss.problem``, for the
            callbacks that want gradients.
    """
    shape = model_shape(model)
    check_reference_model(settings.reference_model)
    try:
        check_sharding(model)
    except ShardingError as err:
        raise SetupError(str(err)) from err
    unwrapped = unwrap(model)
    device = next(unwrapped.model.parameters()).device
    probe, tokenizer, source = _probe(model, settings, args, event, context, unwrapped)
    loss = gradient_loss(settings.loss_fn, context.trainer, args, unwrapped.model)
    world_zero = bool(state.is_world_process_zero)
    cache = ReferenceCache(os.path.join(args.output_dir, "bertwatch", "reference.pt"))
    reference = DriftReference(cache, probe, shape, device, save=settings.cache_reference and world_zero)
    resumed = int(state.global_step) > 0
    if resumed:
        reference.resume(int(state.global_step), settings.reference_model is not None, unwrapped.model,
                         autocast_dtype(args), tuple(args.label_names or ()))  # fmt: skip
    return ProbeContext(
        encoder_ref=weakref.ref(unwrapped.model),
        probe=probe,
        units=plan_units(probe, unwrapped.model, device, *shape),
        probe_source=source,
        tokenizer=tokenizer,
        device=device,
        autocast_dtype=autocast_dtype(args),
        layers=shape[0],
        heads=shape[1],
        settings=settings,
        loss=loss,
        reference=reference,
        label_names=tuple(args.label_names or ()),
    )


def open_trainer_side(
    settings: ProbeSettings, args: Any, state: Any, event: Mapping[str, Any], context: TrainerContext
) -> TrainerSide:
    """The Trainer's side of the run that ``args`` and ``state`` describe; on world process zero the event writer
    opened in the Trainer's TensorBoard run (``logging_dir=`` else ``callbacks._context.tensorboard_run_dir``) and the
    Trainer's trackers. Raises ``SetupError`` for an event folder that cannot be written, with what to do."""
    world_zero = bool(state.is_world_process_zero)
    writer, run_dir = None, None
    if world_zero:
        from bertwatch.tb.writer.summary import SummaryWriter

        run_dir = tensorboard_run_dir(args, context, settings.logging_dir)
        try:
            writer = SummaryWriter(run_dir)
        except OSError as err:
            raise SetupError(
                f"bertwatch cannot write its event file in {run_dir!r} ({type(err).__name__}: {err.strerror or err}); "
                "pass logging_dir= a folder you can write to, or make that one writable"
            ) from err
    return TrainerSide(
        args=args,
        state=state,
        event={k: v for k, v in event.items() if k not in ("args", "state", "control")},
        world_zero=world_zero,
        resumed=int(state.global_step) > 0,
        writer=writer,
        run_dir=run_dir,
        trackers=tuple(cb for cb in context.callbacks() if is_tracker(cb)) if world_zero else (),
    )
