"""``AblationCallback``: the ablation sweep on the evaluation set when training ends."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from bertwatch.ablation.configs import MODES
from bertwatch.ablation.sweep import ablate
from bertwatch.heads.sharding import is_sharded
from bertwatch.report.result import AblationResult


def run_ablation_on_trainer(
    trainer_or_model: Any,
    eval_dataset: Any,
    mode: str = "uniform",
    out_dir: str | os.PathLike | None = None,
    writer: Any = None,
    **kwargs: Any,
) -> AblationResult:
    """Run :func:`ablate` with what a ``Trainer`` knows: its model, tokenizer, ``compute_metrics``,
    ``metric_for_best_model``, eval batch size and global step (``kwargs`` override any of them).

    Meant for one process (``BertWatchCallback`` calls it on world process zero), so it does not split the work
    across processes unless ``distributed=True`` is passed and every process calls it; a sharded (FSDP) model
    is always swept by every process together.
    """
    trainer = trainer_or_model if hasattr(trainer_or_model, "model") and hasattr(trainer_or_model, "args") else None
    model = trainer.model if trainer is not None else trainer_or_model
    settings: dict[str, Any] = {}
    if trainer is not None:
        args = trainer.args
        settings["tokenizer"] = getattr(trainer, "processing_class", None)
        settings["compute_metrics"] = getattr(trainer, "compute_metrics", None)
        if getattr(args, "metric_for_best_model", None) and settings["compute_metrics"] is not None:
            settings["metric"] = args.metric_for_best_model
            if getattr(args, "greater_is_better", None) is not None:
                settings["greater_is_better"] = bool(args.greater_is_better)
        settings["batch_size"] = int(getattr(args, "per_device_eval_batch_size", 32) or 32)
        settings["step"] = int(getattr(trainer.state, "global_step", 0))
    settings["distributed"] = is_sharded(model)  # sharded weights: every process must run the sweep together
    settings.update(kwargs)
    if isinstance(eval_dataset, dict):
        eval_dataset = next(iter(eval_dataset.values()))
    tokenizer = settings.pop("tokenizer", None)
    compute_metrics = settings.pop("compute_metrics", None)
    task = settings.pop("task", None)
    return ablate(
        model,
        eval_dataset,
        tokenizer,
        task=task,
        compute_metrics=compute_metrics,
        mode=mode,
        out_dir=out_dir,
        writer=writer,
        **settings,
    )


class AblationCallback(TrainerCallback):
    """Runs the ablation sweep on the evaluation set when training ends.

    Summaries go to the Trainer's TensorBoard run (``bertwatch/ablation/{mode}/...``); the report, JSON and CSV
    to ``<output_dir>/bertwatch_ablation/`` (one sub-folder per mode when there are several). ``eval_dataset``,
    ``compute_metrics`` and ``task`` default to the Trainer's; other keyword arguments go to :func:`ablate`.
    """

    def __init__(
        self,
        modes: str | Sequence[str] = ("uniform",),
        eval_dataset: Any = None,
        compute_metrics: Callable | None = None,
        task: str | None = None,
        out_dir: str | os.PathLike | None = None,
        logdir: str | os.PathLike | None = None,
        **ablate_kwargs: Any,
    ):
        self.modes = (modes,) if isinstance(modes, str) else tuple(modes)
        for mode in self.modes:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
        self.eval_dataset = eval_dataset
        self.compute_metrics = compute_metrics
        self.task = task
        self.out_dir = out_dir
        self.logdir = logdir
        self.ablate_kwargs = ablate_kwargs
        self.results: dict[str, AblationResult] = {}

    def on_train_end(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        processing_class: Any = None,
        eval_dataloader: Any = None,
        **kwargs: Any,
    ) -> None:
        from bertwatch.callbacks._context import find_context, tensorboard_run_dir

        context = find_context()
        dataset = self.eval_dataset if self.eval_dataset is not None else context.eval_dataset
        if dataset is None and eval_dataloader is not None:
            dataset = eval_dataloader.dataset
        if dataset is None:
            raise ValueError(
                "AblationCallback needs an evaluation set: give the Trainer an eval_dataset or pass "
                "AblationCallback(eval_dataset=...)"
            )
        compute = self.compute_metrics if self.compute_metrics is not None else context.compute_metrics
        trainer = context.trainer
        settings: dict[str, Any] = {"batch_size": int(getattr(args, "per_device_eval_batch_size", 32) or 32)}
        if getattr(args, "metric_for_best_model", None) and compute is not None:
            settings["metric"] = args.metric_for_best_model
            if getattr(args, "greater_is_better", None) is not None:
                settings["greater_is_better"] = bool(args.greater_is_better)
        settings.update(self.ablate_kwargs)
        run_dir = tensorboard_run_dir(args, context, self.logdir) if state.is_world_process_zero else None
        out_root = Path(self.out_dir) if self.out_dir is not None else Path(args.output_dir) / "bertwatch_ablation"
        model = model if model is not None else getattr(trainer, "model", None)
        tokenizer = processing_class if processing_class is not None else getattr(trainer, "processing_class", None)
        for mode in self.modes:
            out = out_root if len(self.modes) == 1 else out_root / mode
            self.results[mode] = ablate(
                model,
                dataset,
                tokenizer,
                task=self.task,
                compute_metrics=compute,
                mode=mode,
                out_dir=out,
                writer=run_dir,
                step=int(state.global_step),
                **settings,
            )
