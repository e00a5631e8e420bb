"""``AblationCallback``: the ablation sweep on the evaluation set when training ends."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from bertwatch.ablation.settings import AblationSettings
from bertwatch.ablation.sweep import ablate
from bertwatch.ablation.task_types import check_task_head, sweep_examples
from bertwatch.callbacks._context import TrainerContext, tensorboard_run_dir, tokenizer_of
from bertwatch.callbacks._safe import OwnCallback, SetupError, contained
from bertwatch.callbacks.tracking import NotATracker
from bertwatch.core.modes import check_mode
from bertwatch.report.result import AblationResult
from bertwatch.report.run_report import pointer_page, report_path, write_run_report

__all__ = ["AblationCallback"]


def _trainer_ablation_kwargs(
    args: Any,
    *,
    compute_metrics: Callable | None = None,
    processing_class: Any = None,
    step: int | None = None,
) -> dict[str, Any]:
    """The :func:`ablate` keyword arguments a Trainer implies: its eval batch size, its ``compute_metrics`` and
    ``metric_for_best_model`` / ``greater_is_better`` (only with ``compute_metrics``: the metric is its key),
    its tokenizer and the step. The one place these are read from a Trainer; explicit settings override them.
    """
    kwargs: dict[str, Any] = {"batch_size": int(args.per_device_eval_batch_size)}
    if compute_metrics is not None:
        kwargs["compute_metrics"] = compute_metrics
        if args.metric_for_best_model:
            kwargs["metric"] = args.metric_for_best_model
            if args.greater_is_better is not None:
                kwargs["greater_is_better"] = bool(args.greater_is_better)
    if processing_class is not None:
        kwargs["tokenizer"] = tokenizer_of(processing_class)
    if step is not None:
        kwargs["step"] = int(step)
    return kwargs


def _first_examples(dataset: Any, count: int) -> list[Any] | None:
    """The first ``count`` examples of an indexable dataset (None for a stream, which is not read twice)."""
    if isinstance(dataset, dict):
        dataset = next(iter(dataset.values()))
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        return None
    return [dataset[i] for i in range(min(count, len(dataset)))]


class AblationCallback(OwnCallback, NotATracker, TrainerCallback):
    """Runs the ablation sweep on the evaluation set when training ends.

    Summaries go to the Trainer's TensorBoard run (``bertwatch/ablation/{mode}/...``); JSON and CSV to
    ``<output_dir>/bertwatch_ablation/`` (one sub-folder per mode when there are several); the report to
    ``<output_dir>/report.html``, the page ``bertwatch report <output_dir>`` writes (the ablation beside the
    training statistics), with a ``report.html`` in the ablation folder that points to it. ``eval_dataset``,
    ``compute_metrics`` and ``task`` default to the Trainer's; other keyword arguments go to :func:`ablate`.
    The Trainer's eval set and ``compute_metrics`` are known when the callback is attached with
    ``bertwatch.watch(trainer)`` or ``set_trainer(trainer)``; from ``callbacks=[...]`` alone it sees the eval set
    only if the Trainer evaluated during training. What the sweep would refuse (a head or task it cannot score,
    settings it does not know, examples in a layout it cannot read) is refused at ``on_train_begin`` with
    ``SetupError`` (:meth:`check`); a failure of the sweep itself costs one warning, not the run.
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
            check_mode(mode)
        self.eval_dataset = eval_dataset
        self.compute_metrics = compute_metrics
        self.task = task
        self.out_dir = out_dir
        self.logdir = logdir
        self.ablate_kwargs = ablate_kwargs
        self.results: dict[str, AblationResult] = {}
        super().__init__()

    def eval_set(self, context: TrainerContext) -> Any:
        """The evaluation set to disable heads on: the explicit one, else the Trainer's (None if unknown)."""
        return self.eval_dataset if self.eval_dataset is not None else context.eval_dataset

    @contained("on_train_begin")
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.check(args, state, self._link.context(kwargs))

    def sweep_kwargs(self, args: Any, state: Any, context: TrainerContext, **overrides: Any) -> dict[str, Any]:
        """The :func:`ablate` keyword arguments of this run: the Trainer's (:func:`_trainer_ablation_kwargs`), then
        ``overrides``, then the callback's own."""
        compute = self.compute_metrics if self.compute_metrics is not None else context.compute_metrics
        kwargs = _trainer_ablation_kwargs(
            args, compute_metrics=compute, processing_class=context.processing_class, step=state.global_step
        )
        kwargs.update({**overrides, **self.ablate_kwargs})
        return kwargs

    def check(self, args: Any, state: Any, context: TrainerContext, **overrides: Any) -> None:
        """Refuse now (``SetupError``, with what to do) what the sweep would refuse at the end of training: no
        evaluation set, unknown settings, a head or task it cannot score, labels that do not fit the head, or
        examples it cannot read (the first few are prepared as the sweep will prepare them all)."""
        dataset = self.eval_set(context)
        if dataset is None and (context.bound or args.eval_strategy == "no"):
            raise SetupError(
                "the ablation needs an evaluation set to disable heads on: give the Trainer an eval_dataset and "
                "attach bertwatch with bertwatch.watch(trainer), or pass the examples as eval_dataset= "
                "(ablation_kwargs={'eval_dataset': ...} for BertWatchCallback)"
            )
        model = context.model
        kwargs = self.sweep_kwargs(args, state, context, **overrides)
        tokenizer, base = kwargs.pop("tokenizer", None), kwargs.pop("settings", None)
        for name in ("compute_metrics", "loss_fn"):
            kwargs.pop(name, None)
        if self.task is not None:
            kwargs["task"] = self.task
        rows = None if dataset is None else _first_examples(dataset, 4)  # None: seen once the Trainer evaluates
        try:
            resolved = AblationSettings.resolve(base, **kwargs)
            if rows is None:
                check_task_head(model, resolved.task)
            else:
                sweep_examples(model, rows, tokenizer, resolved)
        except (ValueError, TypeError) as err:
            raise SetupError(
                f"the ablation at the end of training cannot run on this model and evaluation set: {err}. Pass "
                "examples it can score as eval_dataset= (ablation_kwargs={'eval_dataset': ...} for "
                "BertWatchCallback; docs/ablation.md lists the layout of each task type), or drop the ablation"
            ) from err

    @contained("on_train_end")
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        context = self._link.context(kwargs)
        run_dir = tensorboard_run_dir(args, context, self.logdir) if state.is_world_process_zero else None
        self.run(args, state, context, writer=run_dir)

    def folder(self, args: Any, mode: str) -> Path:
        """The folder of ``mode``'s files (``report.html``, ``ablation.json``, ``ablation.csv``): ``out_dir``, or
        ``<output_dir>/bertwatch_ablation``, with a subfolder per mode when several run."""
        root = Path(self.out_dir) if self.out_dir is not None else Path(args.output_dir) / "bertwatch_ablation"
        return root if len(self.modes) == 1 else root / mode

    def run(
        self, args: Any, state: Any, context: TrainerContext, writer: Any = None, **overrides: Any
    ) -> dict[str, AblationResult]:
        """Ablate the model of ``context`` once per mode; ``writer`` is a run directory or an open SummaryWriter."""
        dataset = self.eval_set(context)
        if dataset is None:
            raise ValueError(
                "AblationCallback needs an evaluation set: give the Trainer an eval_dataset and attach bertwatch with "
                "bertwatch.watch(trainer), or pass AblationCallback(eval_dataset=...)"
            )
        kwargs = self.sweep_kwargs(args, state, context, **overrides)
        model = context.model
        for mode in self.modes:
            self.results[mode] = ablate(
                model, dataset, task=self.task, mode=mode, out_dir=self.folder(args, mode), writer=writer, **kwargs
            )
        if state.is_world_process_zero:
            self.write_report(args, writer)
        return self.results

    def report(self, args: Any) -> Path:
        """Where the run's report is: ``<output_dir>/report.html``, as ``bertwatch report <output_dir>`` writes it."""
        return report_path(args.output_dir)

    def write_report(self, args: Any, writer: Any = None) -> None:
        """The run's report (:meth:`report`) from everything under the output folder and this sweep's results;
        each mode folder's own report.html then points to it."""
        flush = getattr(writer, "flush", None)  # writer is None where the run has no TensorBoard writer
        if callable(flush):
            flush()  # the summaries written so far are read back from the event files
        path = self.report(args)
        write_run_report(args.output_dir, path, results=list(self.results.values()))
        for mode in self.results:
            folder_report = self.folder(args, mode) / "report.html"
            if folder_report.resolve() != path.resolve():
                pointer_page(folder_report, path)
