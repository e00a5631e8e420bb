"""Disable heads and layers of a fine-tuned encoder after training and measure, with intervals, what each is worth.

Kovaleva et al. 2019 (``mode="uniform"``: the head attends uniformly to every real token) and Michel et al. 2019
(``mode="zero"``: the head's context is zero). One sweep evaluates the baseline, every single head, every whole
layer, "keep only head h of layer l" (Michel's best-head-per-layer) and the iterative pruning curve; every delta
gets a paired bootstrap interval and p-value (:mod:`bertwatch.ablation.bootstrap`).

It is exact and cheaper than evaluating each configuration on its own:

* a configuration whose lowest disabled layer is ``l`` sees the baseline's hidden states below ``l``; the sweep
  caches the states entering every layer once per batch and runs only layers ``l..L-1`` (the layers below are
  swapped for a module that returns the cached states, so the model's own code builds the mask and runs the
  layers and the classification head);
* several configurations run stacked in one batch, each example with its own ``[layers, heads]`` mask; the
  stacked copies enter their first layer with identical states, so that layer's query/key/value projections
  run once and are tiled;
* for sequence classifiers that read only the first token (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, ERNIE,
  DistilBERT), the last layer's output projection and feed-forward block run on that token only;
* each pruning step starts from the previous step's states at the lowest layer where their masks differ.

Attention itself is never re-implemented: interventions go through :mod:`bertwatch.heads.capture`. Results are
appended to ``partial.jsonl`` as they are found, so an interrupted sweep resumes where it stopped; with several
processes (``accelerate launch`` / ``torchrun``) configurations are split across them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.configs import HeadMask, order_masks, random_orders, sweep_configs
from bertwatch.ablation.estimate import SweepPlan, example_cap, first_examples
from bertwatch.ablation.evaluate import evaluate_configs, progress_bar
from bertwatch.ablation.inputs import EvalData, make_batches
from bertwatch.ablation.orders import head_importance, iterative_masks
from bertwatch.ablation.pruning import baseline_curves, pruning_curve
from bertwatch.ablation.runner import Runner, default_configs_per_batch
from bertwatch.ablation.scoring import (
    Metric,
    constant_comparison,
    make_metric,
    one_example_change,
    parts_metric,
    settle_metric,
)
from bertwatch.ablation.settings import AblationSettings
from bertwatch.ablation.store import Processes, Store
from bertwatch.ablation.task_types import Task, sweep_examples, task_parts
from bertwatch.core.baseline import class_names
from bertwatch.core.families import model_family
from bertwatch.heads.capture import model_shape
from bertwatch.heads.layout import pad_token_id
from bertwatch.heads.task_heads import label_names
from bertwatch.report.html import write_outputs
from bertwatch.report.result import FIELDS, AblationResult

__all__ = ["SweepSetup", "ablate", "prepare_sweep"]


def _run_fingerprint(model: nn.Module, data: EvalData, mode: str, batch_size: int, shard_size: int) -> str:
    digest = hashlib.sha1(f"{mode}|{batch_size}|{shard_size}|{type(model).__name__}".encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        if hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()  # a shard (FSDP2): every process gathers the same whole tensor
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for feature in data.features:
        digest.update(json.dumps(feature, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(data.labels).tobytes())
    return digest.hexdigest()[:20]


def _summary_writer(writer: Any, logdir: str | os.PathLike | None):
    """(the writer to use, whether this call opened it and must close it)."""
    from bertwatch.tb.writer.summary import SummaryWriter

    if writer is None:
        return (SummaryWriter(os.fspath(logdir)), True) if logdir is not None else (None, False)
    if isinstance(writer, SummaryWriter):
        return writer, False
    if isinstance(writer, (str, os.PathLike)):
        return SummaryWriter(os.fspath(writer)), True
    return SummaryWriter.from_torch_writer(writer), True


@dataclass
class SweepSetup:
    """What every step of one sweep shares, checked before any configuration runs: the model and its shape, the
    task, the batched data, the runner, the metric (and where it comes from), the store and the processes."""

    model: nn.Module
    settings: AblationSettings
    task: Task
    num_layers: int
    num_heads: int
    data: EvalData
    runner: Runner
    processes: Processes
    configs_per_batch: int
    metric: Metric
    #: ``compute_metrics``, the task type's own metric, ``glue`` or ``built-in`` (recorded in the result).
    metric_source: str
    store: Store
    seconds: dict[str, float] = field(default_factory=dict)
    #: The examples given, before ``settings.max_examples`` (or the CPU's default) kept the first ones.
    available: int = 0


def prepare_sweep(
    model: nn.Module, examples: Any, tokenizer: Any, compute_metrics: Callable | None, s: AblationSettings
) -> SweepSetup:
    """Check the model and labels, tokenise and batch the examples, open the store: a refusal comes here, before
    any configuration is evaluated."""
    examples, available = first_examples(examples, example_cap(s.max_examples, next(model.parameters()).device.type))
    task, regression, features, labels, references, cut = sweep_examples(model, examples, tokenizer, s)
    num_layers, num_heads = model_shape(model)
    pad_id = pad_token_id(tokenizer, model.config)
    data = EvalData(features, labels, task_type=task.type, cut=cut)
    make_batches(data, s.batch_size, s.shard_size, int(pad_id))
    runner = Runner(model, s.mode, reuse=s.reuse)
    if task.type in ("token-classification", "question-answering", "masked-lm"):
        runner.pad_to = max(len(f["input_ids"]) for f in features)
    runner.token_nll = task.type == "masked-lm"
    if runner.sharded and s.distributed is False:
        raise ValueError(
            "the model's weights are sharded (FSDP), so every process must run the sweep together: call ablate() "
            "on every process with distributed=None or True"
        )
    processes = Processes(
        True if runner.sharded else s.distributed, cpu=runner.device.type == "cpu", sharded=runner.sharded
    )
    parts = task_parts(task, labels, references) if compute_metrics is None else None
    if parts is not None:
        metric = parts_metric(parts[0], parts[1], labels, s.metric)
    else:
        metric = make_metric(task.glue, compute_metrics, s.metric, labels, regression)
    out_path = Path(s.out_dir) if s.out_dir is not None else None
    run_id = _run_fingerprint(model, data, s.mode, s.batch_size, s.shard_size)
    store = Store(
        out_path / "partial.jsonl" if (out_path is not None and s.resume) else None, run_id, processes.is_main
    )
    processes.barrier()
    processes.share(store)
    configs_per_batch = s.configs_per_batch
    if configs_per_batch is None:
        longest = max(len(f["input_ids"]) for f in features)
        configs_per_batch = default_configs_per_batch(model, runner.device, s.batch_size, longest)
    return SweepSetup(
        model,
        s,
        task,
        num_layers,
        num_heads,
        data,
        runner,
        processes,
        int(configs_per_batch),
        metric,
        _metric_source(compute_metrics, metric, task),
        store,
        available=available,
    )


def evaluate_unit_configs(p: SweepSetup) -> tuple[list[HeadMask], dict[str, np.ndarray]]:
    """Outputs of the baseline, every head, every layer and every keep-one-head configuration that runs; fixes the
    metric, and the settings left to the budget (``p.settings``, by the plan timed on the first batch)."""
    started = time.perf_counter()
    configs = sweep_configs(p.num_layers, p.num_heads, keep_only=p.settings.keep_only is not False)
    device = "CPU" if p.runner.device.type == "cpu" else "GPU"
    plan = SweepPlan.of(configs, p.data, p.store, p.settings, device, p.runner.reuses, p.available)
    plan.said = not (p.settings.progress and p.processes.is_main and plan.shards)  # timed always, said when shown
    units = [c for c in configs if not c.id.startswith("keep:")]
    logits = _evaluate(p, units, plan.first_chunk)
    p.settings = p.processes.agree(plan.settled(p.settings))
    keep = [c for c in configs if c.id.startswith("keep:")] if p.settings.keep_only else []
    logits.update(_evaluate(p, keep, None) if keep else {})
    settle_metric(p.metric, logits)
    p.seconds["sweep"] = round(time.perf_counter() - started, 3)
    return units + keep, logits


def _evaluate(p: SweepSetup, configs: list[HeadMask], first_chunk: Callable | None) -> dict[str, np.ndarray]:
    with torch.inference_mode():
        return evaluate_configs(
            p.runner, p.data, configs, p.store, p.processes, p.configs_per_batch, p.settings.progress,
            desc=f"ablate ({p.settings.mode})", first_chunk=first_chunk,
        )  # fmt: skip


@dataclass
class PruningCurves:
    """The pruning curves: the importance order's entries and logits (``[n, C]`` per step), and each baseline
    order's (``random0``, ..., ``iterative``) at the same steps."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    importance: np.ndarray | None = None
    baselines: dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]] = field(default_factory=dict)

    def all_logits(self) -> dict[str, np.ndarray]:
        """Every step's logits by configuration id (``prune:k``, ``random{r}:k``, ``iterative:k``)."""
        out = {f"prune:{e['pruned']}": x for e, x in zip(self.entries, self.logits)}
        for name, (entries, logits) in self.baselines.items():
            out.update({f"{name}:{e['pruned']}": x for e, x in zip(entries, logits)})
        return out


def run_pruning_curves(p: SweepSetup, baseline: float, loss_fn: Callable | None) -> PruningCurves:
    """Importance (once, on the evaluation set), the pruning curve down to ``prune_threshold`` x baseline, then the
    random and iterative orders at the same steps."""
    s = p.settings
    if not s.prune:
        p.seconds.update(importance=0.0, pruning=0.0, baselines=0.0)
        return PruningCurves()
    started = time.perf_counter()
    importance = head_importance(p.model, p.data, p.task.regression, loss_fn)
    p.seconds["importance"] = round(time.perf_counter() - started, 3)
    margin = (1 - s.prune_threshold) * abs(baseline)
    greater = _greater_is_better(p)
    limit = baseline - margin if greater else baseline + margin
    started = time.perf_counter()
    with torch.inference_mode():
        pruning, prune_logits = pruning_curve(
            p.runner,
            p.data,
            p.store,
            p.processes,
            p.configs_per_batch,
            p.metric.score,
            importance,
            s.prune_step,
            (lambda value: value < limit) if greater else (lambda value: value > limit),
            s.progress,
            s.mode,
        )
    p.seconds["pruning"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    named = _baseline_order_masks(p, importance, len(pruning), loss_fn)
    with torch.inference_mode():
        baselines = baseline_curves(
            p.runner, p.data, p.store, p.processes, p.configs_per_batch, named, p.metric.score, s.progress, s.mode
        )
    p.seconds["baselines"] = round(time.perf_counter() - started, 3)
    return PruningCurves(pruning, prune_logits, importance, baselines)


def _baseline_order_masks(
    p: SweepSetup, importance: np.ndarray, steps: int, loss_fn: Callable | None
) -> dict[str, list[np.ndarray]]:
    """The first ``steps`` masks of each random order (``random{r}``) and of the iterative order."""
    s = p.settings
    named: dict[str, list[np.ndarray]] = {}
    for r, order in enumerate(random_orders(importance.size, int(s.prune_random), s.seed)):
        named[f"random{r}"] = order_masks(order, importance.shape, s.prune_step)[:steps]
    if s.prune_iterative and steps:
        started = time.perf_counter()

        bar = progress_bar(s.progress and p.processes.is_main, steps - 1, f"iterative importance ({s.mode})", "step")

        def importance_under(mask: np.ndarray) -> np.ndarray:
            found = head_importance(p.model, p.data, p.task.regression, loss_fn, disabled=mask, mode=s.mode)
            if bar is not None:
                bar.update(1)  # one gradient pass a step: said, not silent
            return found

        try:
            named["iterative"] = iterative_masks(importance, steps, s.prune_step, importance_under)
        finally:
            if bar is not None:
                bar.close()
        p.seconds["iterative_importance"] = round(time.perf_counter() - started, 3)
    return named


def bootstrap_tables(p: SweepSetup, configs: list[HeadMask], logits: dict[str, np.ndarray], pruned: PruningCurves):
    """The paired bootstrap of every configuration against the baseline, laid out as the result's tables:
    (bootstrap, heads ``[L, H, 5]``, layers ``[L, 5]``, keep-only ``[L, H, 5]`` or None); fills the cells of every
    pruning curve's entries."""
    started = time.perf_counter()
    s = p.settings
    names = [c.id for c in configs if c.id != "baseline"]
    curves = [(pruned.entries, pruned.logits)] + list(pruned.baselines.values())
    steps = [x for _, found in curves for x in found]
    boot = p.metric.bootstrap(
        logits["baseline"], [logits[i] for i in names] + steps, s.n_resamples, s.seed, s.confidence
    )
    cells = boot.cells()
    index = {cid: i for i, cid in enumerate(names)}
    L, H = p.num_layers, p.num_heads
    heads = np.stack([[cells[index[f"head:{l}:{h}"]] for h in range(H)] for l in range(L)])
    layers = np.stack([cells[index[f"layer:{l}"]] for l in range(L)])
    keep = None
    if s.keep_only and H > 1:
        keep = np.stack([[cells[index[f"keep:{l}:{h}"]] for h in range(H)] for l in range(L)])
    row = len(names)
    for entries, _ in curves:
        for entry in entries:
            entry.update(dict(zip(FIELDS, (float(v) for v in cells[row]))))
            row += 1
    p.seconds["bootstrap"] = round(time.perf_counter() - started, 3)
    return boot, heads, layers, keep


def _result_config(p: SweepSetup, num_configurations: int) -> dict[str, Any]:
    """What the result records about how it was computed."""
    s, model = p.settings, p.model
    return {
        "model": model.config._name_or_path or type(model).__name__,
        "model_type": model_family(model.config),
        "layers": p.num_layers,
        "heads": p.num_heads,
        "mode": s.mode,
        "metric": p.metric.name,
        "task_type": p.task.type,
        "metric_source": p.metric_source,
        "greater_is_better": _greater_is_better(p),
        "n_resamples": int(s.n_resamples),
        "seed": int(s.seed),
        "confidence": float(s.confidence),
        "p_value": "two-sided bootstrap: min(1, 2*min(1+#(d<=0), 1+#(d>=0))/(R+1))",
        "prune_step": float(s.prune_step),
        "prune_threshold": float(s.prune_threshold),
        "importance": "E|dL/d gate| on the evaluation set, L2-normalised per layer, computed once",
        "prune_random": int(s.prune_random) if s.prune else 0,
        "prune_iterative": bool(s.prune and s.prune_iterative),
        "random_orders": "numpy.random.default_rng([seed, r]).permutation(layers * heads)",
        "delta": float(s.delta),
        "budget_minutes": s.budget_minutes,
        "examples_given": int(max(p.available, p.data.size)),
        "batch_size": int(s.batch_size),
        "configs_per_batch": int(p.configs_per_batch),
        "max_length": int(s.max_length),
        "cut_examples": int(p.data.cut),
        "max_answer_length": int(s.max_answer_length),
        "layer_reuse": p.runner.reuses,
        "first_token_last_layer": p.runner.last is not None,
        "processes": p.processes.world,
        "num_configurations": num_configurations,
        "seconds": {
            k: p.seconds.get(k, 0.0)
            for k in ("sweep", "importance", "pruning", "iterative_importance", "baselines", "bootstrap")
        },
    }


def _greater_is_better(p: SweepSetup) -> bool:
    """The settings' direction, except for a metric where lower is always better (masked-LM loss, perplexity)."""
    return bool(p.settings.greater_is_better and p.metric.greater_is_better)


def _metric_source(compute_metrics: Callable | None, metric: Metric, task: Task) -> str:
    if compute_metrics is not None:
        return "compute_metrics"
    if metric.combine is not None:
        return task.type
    return "glue" if task.glue else "built-in"


def write_result(p: SweepSetup, result: AblationResult, writer: Any) -> None:
    """On the main process: the files in ``out_dir`` and the TensorBoard summaries."""
    s = p.settings
    if not p.processes.is_main:
        return
    if s.out_dir is not None:
        write_outputs(result, Path(s.out_dir))
    sw, owned = _summary_writer(writer, s.logdir)
    if sw is None:
        return
    try:
        sw.add_ablation_result(result, step=s.step)
    finally:
        sw.close() if owned else sw.flush()


def ablate(
    model: nn.Module,
    examples_or_dataset: Any,
    tokenizer: Any = None,
    task: str | None = None,
    compute_metrics: Callable | None = None,
    mode: str | None = None,
    out_dir: str | os.PathLike | None = None,
    writer: Any = None,
    *,
    settings: AblationSettings | None = None,
    loss_fn: Callable | None = None,
    **overrides: Any,
) -> AblationResult:
    """Disable every head, every layer, each layer but one head, and prune by importance; score each with a
    paired bootstrap against the baseline.

    The metric is ``compute_metrics``' (``metric`` names which key, default: the task's primary one or accuracy),
    else the task's metric, else accuracy (Pearson for regression). Runs split across processes under accelerate /
    torchrun (call it on every process); only world process zero writes files and summaries.

    Args:
        model: a fine-tuned task model (sequence or token classification, QA, multiple choice, masked LM), possibly
            wrapped (peft, DDP, FSDP).
        examples_or_dataset: ``{"text", "text_pair", "label"}`` dicts (:func:`bertwatch.data.glue.load_glue`), or a
            (HF) dataset or list of dicts with ``input_ids`` (+ ``token_type_ids``) and ``label``/``labels``, or GLUE
            text columns.
        tokenizer: needed for text examples; tokenized ones are used as they are.
        task: a GLUE task name or a task type (``"token-classification"``, ``"qa"``, ...); None: what the model's
            head does.
        compute_metrics: a Trainer-style ``compute_metrics(EvalPrediction) -> dict``.
        mode: ``"uniform"`` (Kovaleva) or ``"zero"`` (Michel); default the settings' (``"uniform"``).
        out_dir: where ``ablation.json``, ``ablation.csv``, ``report.html`` and ``partial.jsonl`` (resumption) go.
        writer: a bertwatch or torch ``SummaryWriter``, or a run directory, for the TensorBoard ablation summaries
            at ``settings.step`` (or give ``logdir=``).
        settings: every other choice (:class:`~bertwatch.ablation.settings.AblationSettings`); ``task``, ``mode``,
            ``out_dir`` and ``overrides`` replace its fields.
        loss_fn: ``loss_fn(outputs, batch) -> [batch]`` replaces the model's loss in the pruning importance.
        **overrides: any ``AblationSettings`` field (``n_resamples=200``).

    Returns:
        The :class:`~bertwatch.report.result.AblationResult`: ``heads`` ``[layers, heads, 5]`` and ``layers``
        ``[layers, 5]`` cells ``(value, delta, ci_low, ci_high, p)``, keep-only cells, the pruning curves, the config.

    Raises:
        ValueError: before any configuration runs, for a head, task, label or example layout the sweep cannot
            score (with what to do), or a setting out of range.
        TypeError: an unknown setting (the message lists the known ones).

    Example:
        >>> import torch, transformers
        >>> from bertwatch import ablate
        >>> _ = torch.manual_seed(0)
        >>> config = transformers.BertConfig(
        ...     vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
        ... )
        >>> model = transformers.BertForSequenceClassification(config).eval()
        >>> examples = [{"input_ids": [2, 5 + i % 7, 9 + i % 5, 3], "label": i % 2} for i in range(12)]
        >>> result = ablate(model, examples, mode="zero", n_resamples=50, prune=False, progress=False)
        >>> result.heads.shape, result.layers.shape  # (value, delta, ci_low, ci_high, p) per head and per layer
        ((2, 2, 5), (2, 5))
        >>> result.metric, result.num_examples
        ('accuracy', 12)
    """
    given = {k: v for k, v in (("task", task), ("mode", mode), ("out_dir", out_dir)) if v is not None}
    s = AblationSettings.resolve(settings, **given, **overrides)
    p = prepare_sweep(model, examples_or_dataset, tokenizer, compute_metrics, s)
    configs, logits = evaluate_unit_configs(p)
    baseline_logits = logits["baseline"]
    pruned = run_pruning_curves(p, p.metric.score(baseline_logits), loss_fn)
    logits.update(pruned.all_logits())
    boot, heads, layers, keep = bootstrap_tables(p, configs, logits, pruned)
    baseline_metrics = p.metric.all_metrics(baseline_logits) if p.metric.all_metrics else {}
    one_example, how = one_example_change(p.metric, baseline_logits)
    names = class_names(label_names(model.config), s.task)
    trivial = constant_comparison(p.metric, baseline_logits, names, s.n_resamples, s.seed, s.confidence)
    trivial = trivial.about("its ablation figures") if trivial is not None else None
    result = AblationResult(
        task=s.task,
        mode=s.mode,
        metric=p.metric.name,
        num_examples=p.data.size,
        baseline=float(boot.baseline),
        heads=heads,
        layers=layers,
        keep_only=keep,
        pruning=pruned.entries,
        importance=pruned.importance,
        pruning_random=[pruned.baselines[n][0] for n in pruned.baselines if n.startswith("random")],
        pruning_iterative=pruned.baselines["iterative"][0] if "iterative" in pruned.baselines else [],
        baseline_metrics={k: float(v) for k, v in baseline_metrics.items()},
        config=_result_config(p, len(configs) + len(pruned.all_logits())),
        task_type=p.task.type,
        one_example=one_example,
        one_example_how=how,
        trivial=trivial,
        logits=logits,
    )
    write_result(p, result, writer)
    p.processes.barrier()
    return result
