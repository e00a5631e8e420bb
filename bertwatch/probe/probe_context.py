"""What a training run gives the probe pass, gathered once at ``on_train_begin``: ``ProbeContext``.

The encoder (held weakly), the probe set and its units on the model's device (``callbacks.probe_units``), the
tokenizer, the device and the training's mixed precision, the loss of the gradient statistics, the drift reference,
the event writer and the trackers (world process zero only), and the Trainer's arguments and state. The watched run
builds it with :func:`build_probe_context` and hands it to the measurements (``callbacks.measurements``), the riders
and the callbacks' setup checks; nothing in it changes during the run except the references the passes take
(the drift reference, the outlier statistics' top dimensions), which the watched run keeps from their results.
"""

from __future__ import annotations

import contextlib
import os
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from bertwatch.callbacks._context import (
    TrainerContext,
    config_value,
    mixed_precision,
    tensorboard_run_dir,
    tokenizer_of,
)
from bertwatch.callbacks._safe import BertWatchWarning, SetupError
from bertwatch.callbacks.probe_set import ProbeSet, ReferenceCache, build_probe_set, text_examples
from bertwatch.callbacks.probe_units import ProbeUnit, plan_units
from bertwatch.callbacks.reference import DriftReference, check_reference_model
from bertwatch.callbacks.tracking import is_tracker
from bertwatch.callbacks.trainer_loss import GradientLoss, gradient_loss
from bertwatch.heads.capture import model_shape
from bertwatch.heads.sharding import ShardingError, check_sharding
from bertwatch.heads.unwrap import Unwrapped, select_inputs, unwrap
from bertwatch.options.settings import ProbeSettings

__all__ = ["ProbeContext", "autocast_dtype", "build_probe_context", "mixed_precision"]


def autocast_dtype(args: Any) -> torch.dtype | None:
    """The training's mixed-precision dtype from its ``TrainingArguments`` (``bf16``, ``fp16``), or None."""
    if args.bf16:
        return torch.bfloat16
    if args.fp16:
        return torch.float16
    return None


@dataclass(frozen=True, eq=False)
class ProbeContext:
    """One training run as the probe pass sees it (module doc). Built by :func:`build_probe_context`.

    ``event`` holds the keyword arguments of the Trainer's ``on_train_begin`` other than ``args``, ``state`` and
    ``control`` (handed on to the trackers); ``resumed``: the run started from a checkpoint (global step > 0);
    ``probe_source``: where the probe examples come from, in words ("the eval set", "probe_texts", ...).
    ``writer`` and ``run_dir`` are None and ``trackers`` empty on every process but world process zero.
    """

    encoder_ref: Callable[[], torch.nn.Module | None]
    probe: ProbeSet
    units: tuple[ProbeUnit, ...]
    probe_source: str
    tokenizer: Any
    device: torch.device
    autocast_dtype: torch.dtype | None
    layers: int
    heads: int
    settings: ProbeSettings
    loss: GradientLoss
    reference: DriftReference
    args: Any
    state: Any
    event: Mapping[str, Any]
    world_zero: bool
    resumed: bool
    writer: Any = None
    run_dir: str | None = None
    trackers: tuple[Any, ...] = ()
    #: What the first pass measuring the activation outliers took as their reference: ``{"top_dims": [layers, 3]}``
    #: (long, on the device).
    outlier_reference: dict[str, Any] = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        """The encoder's folder or Hub name (``config._name_or_path``), else its class name."""
        encoder = self.encoder
        name = config_value(encoder, "_name_or_path", "") or ""
        return str(name) or type(encoder).__name__

    @property
    def encoder(self) -> torch.nn.Module | None:
        """The transformers model inside the Trainer's model (``bertwatch.heads.unwrap``), as trained."""
        return self.encoder_ref()

    def autocast(self) -> contextlib.AbstractContextManager:
        """The training's mixed precision, for every pass bertwatch makes through the model (the statistics are
        taken in float32 afterwards)."""
        return mixed_precision(self.device, self.autocast_dtype)

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(self.args.label_names or ())

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The entries of a probe batch the encoder is called with (labels left out)."""
        return select_inputs(self.encoder, batch, self.label_names)


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
            else "bertwatch cannot see the Trainer's eval_dataset before its first evaluation (the callback was "
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
        reference loaded when resuming, and on world process zero the event writer opened in the Trainer's
        TensorBoard run.

    Raises:
        SetupError: a model whose weights are sharded in a way the pass cannot follow, a probe set that cannot
            be built (no tokenizer, no examples), a ``reference_model`` that cannot be loaded or an event folder
            that cannot be written, with what to do. A loss the gradient statistics cannot take is
            not refused here but described in ``loss.problem``, for the callbacks that want gradients.
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
    writer, run_dir = None, None
    if world_zero:
        from bertwatch.tb.summary import SummaryWriter

        run_dir = tensorboard_run_dir(args, context, settings.logging_dir)
        try:
            writer = SummaryWriter(run_dir)
        except OSError as err:
            raise SetupError(
                f"bertwatch cannot write its event file in {run_dir!r} ({type(err).__name__}: {err.strerror or err}); "
                "pass logging_dir= a folder you can write to, or make that one writable"
            ) from err
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
        args=args,
        state=state,
        event={k: v for k, v in event.items() if k not in ("args", "state", "control")},
        world_zero=world_zero,
        resumed=resumed,
        writer=writer,
        run_dir=run_dir,
        trackers=tuple(cb for cb in context.callbacks() if is_tracker(cb)) if world_zero else (),
    )
