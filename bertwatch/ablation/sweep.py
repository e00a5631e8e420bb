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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.configs import MODES, sweep_configs
from bertwatch.ablation.evaluate import evaluate_configs
from bertwatch.ablation.inputs import EvalData, make_batches, prepare_examples
from bertwatch.ablation.pruning import head_importance, pruning_curve
from bertwatch.ablation.runner import Runner, default_configs_per_batch, model_type
from bertwatch.ablation.scoring import make_metric, settle_metric
from bertwatch.ablation.store import Processes, Store
from bertwatch.heads.capture import model_shape
from bertwatch.report.html import write_outputs
from bertwatch.report.result import FIELDS, AblationResult


def check_model(model: nn.Module, task: str | None) -> tuple[bool, int]:
    """(regression, number of outputs); clear errors for models the sweep cannot score."""
    name = type(model).__name__
    if not name.endswith("ForSequenceClassification"):
        raise ValueError(
            f"{name} has no sequence-classification head; the sweep scores a fine-tuned classifier. Load the "
            "checkpoint with AutoModelForSequenceClassification (after fine-tuning it on the task)."
        )
    num_labels = int(getattr(model.config, "num_labels", 0))
    problem = getattr(model.config, "problem_type", None)
    if problem == "multi_label_classification":
        raise ValueError("multi-label classifiers are not supported by the ablation sweep")
    regression = problem == "regression" or num_labels == 1
    if task is not None:
        from bertwatch.data.glue import glue_task

        spec = glue_task(task)
        if spec.num_labels != num_labels or spec.is_regression != regression:
            raise ValueError(
                f"task {spec.name!r} has {spec.num_labels} label{'s' if spec.num_labels != 1 else ''}"
                f"{' (regression)' if spec.is_regression else ''}, but the model's head has {num_labels} output"
                f"{'s' if num_labels != 1 else ''}: was this checkpoint fine-tuned on {spec.name}?"
            )
    return regression, num_labels


def check_labels(labels: np.ndarray, regression: bool, num_labels: int) -> None:
    if regression:
        if not np.all(np.isfinite(labels)):
            raise ValueError("regression labels must be finite numbers")
        return
    bad = labels[(labels < 0) | (labels >= num_labels)]
    if bad.size:
        raise ValueError(
            f"labels {sorted(set(bad.tolist()))[:5]} are outside the model's {num_labels} classes; "
            "do the task's labels match the model?"
        )


def fingerprint(model: nn.Module, data: EvalData, mode: str, batch_size: int, shard_size: int) -> str:
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


def writer_for(writer: Any, logdir: str | os.PathLike | None):
    from bertwatch.tb.summary import SummaryWriter

    if writer is None:
        return (SummaryWriter(os.fspath(logdir)), True) if logdir is not None else (None, False)
    if isinstance(writer, SummaryWriter):
        return writer, False
    if isinstance(writer, (str, os.PathLike)):
        return SummaryWriter(os.fspath(writer)), True
    return SummaryWriter.from_torch_writer(writer), False


def ablate(
    model: nn.Module,
    examples_or_dataset: Any,
    tokenizer: Any = None,
    task: str | None = None,
    compute_metrics: Callable | None = None,
    mode: str = "uniform",
    out_dir: str | os.PathLike | None = None,
    writer: Any = None,
    *,
    metric: str | None = None,
    greater_is_better: bool = True,
    logdir: str | os.PathLike | None = None,
    step: int = 0,
    keep_only: bool = True,
    prune: bool = True,
    prune_step: float = 0.1,
    prune_threshold: float = 0.9,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    batch_size: int = 32,
    configs_per_batch: int | None = None,
    shard_size: int = 256,
    max_length: int = 128,
    reuse: bool = True,
    resume: bool = True,
    distributed: bool | None = None,
    progress: bool = True,
    loss_fn: Callable | None = None,
) -> AblationResult:
    """Disable every head, every layer, each layer but one head, and prune by importance; score each with a
    paired bootstrap against the baseline.

    ``examples_or_dataset``: ``{"text", "text_pair", "label"}`` dicts (:func:`bertwatch.data.glue.load_glue`), or a
    (HF) dataset with ``input_ids`` (+ ``token_type_ids``) and ``label``/``labels``, or GLUE text columns.
    The metric is ``compute_metrics``' (``metric`` names which key, default: the task's primary one or accuracy),
    else the task's GLUE metric, else accuracy (Pearson for regression). ``mode``: "uniform" (Kovaleva) or "zero"
    (Michel). Pruning removes ``max(1, int(prune_step * remaining))`` heads a step, least important first
    (importance computed once, on the evaluation set), until the metric falls below ``prune_threshold`` x
    baseline or no head is left. ``out_dir``: ablation.json, ablation.csv, report.html and the resumable
    partial.jsonl. ``writer`` (a bertwatch or torch SummaryWriter, or a run directory) or ``logdir`` receive the
    TensorBoard ablation summaries at ``step``. Runs split across processes under accelerate / torchrun.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    started = time.perf_counter()
    regression, num_labels = check_model(model, task)
    num_layers, num_heads = model_shape(model)
    features, labels = prepare_examples(model, examples_or_dataset, tokenizer, max_length, regression)
    check_labels(labels, regression, num_labels)
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(model.config, "pad_token_id", None) or 0
    data = EvalData(features, labels)
    make_batches(data, batch_size, shard_size, int(pad_id))
    runner = Runner(model, mode, reuse=reuse)
    if runner.sharded and distributed is False:
        raise ValueError(
            "the model's weights are sharded (FSDP), so every process must run the sweep together: call ablate() "
            "on every process with distributed=None or True"
        )
    processes = Processes(
        True if runner.sharded else distributed, cpu=runner.device.type == "cpu", sharded=runner.sharded
    )
    if configs_per_batch is None:
        longest = max(len(f["input_ids"]) for f in features)
        configs_per_batch = default_configs_per_batch(model, runner.device, batch_size, longest)
    metric_spec = make_metric(task, compute_metrics, metric, labels, regression)
    out_path = Path(out_dir) if out_dir is not None else None
    run_id = fingerprint(model, data, mode, batch_size, shard_size)
    store = Store(out_path / "partial.jsonl" if (out_path is not None and resume) else None, run_id, processes.is_main)
    processes.barrier()
    processes.share(store)

    configs = sweep_configs(num_layers, num_heads, keep_only=keep_only)
    with torch.inference_mode():
        logits = evaluate_configs(
            runner, data, configs, store, processes, configs_per_batch, progress, desc=f"ablate ({mode})"
        )
    evaluated = time.perf_counter()
    settle_metric(metric_spec, logits)
    baseline_logits = logits["baseline"]
    baseline = metric_spec.score(baseline_logits)

    pruning, importance, prune_logits = [], None, []
    importance_seconds = 0.0
    if prune:
        importance = head_importance(model, data, regression, loss_fn)
        importance_seconds = time.perf_counter() - evaluated
        limit = (
            baseline - (1 - prune_threshold) * abs(baseline)
            if greater_is_better
            else baseline + (1 - prune_threshold) * abs(baseline)
        )
        with torch.inference_mode():
            pruning, prune_logits = pruning_curve(
                runner,
                data,
                store,
                processes,
                configs_per_batch,
                metric_spec.score,
                importance,
                prune_step,
                (lambda value: value < limit) if greater_is_better else (lambda value: value > limit),
                progress,
                mode,
            )
        logits.update(zip((f"prune:{p['pruned']}" for p in pruning), prune_logits))
    pruned = time.perf_counter()

    names = [c.id for c in configs if c.id != "baseline"]
    boot = metric_spec.bootstrap(
        baseline_logits, [logits[i] for i in names] + prune_logits, n_resamples, seed, confidence
    )
    cells = boot.cells()
    index = {cid: i for i, cid in enumerate(names)}
    heads = np.stack([[cells[index[f"head:{l}:{h}"]] for h in range(num_heads)] for l in range(num_layers)])
    layers = np.stack([cells[index[f"layer:{l}"]] for l in range(num_layers)])
    keep = None
    if keep_only and num_heads > 1:
        keep = np.stack([[cells[index[f"keep:{l}:{h}"]] for h in range(num_heads)] for l in range(num_layers)])
    for j, entry in enumerate(pruning):
        entry.update(dict(zip(FIELDS, (float(v) for v in cells[len(names) + j]))))
    finished = time.perf_counter()

    baseline_metrics = metric_spec.all_metrics(baseline_logits) if metric_spec.all_metrics else {}
    result = AblationResult(
        task=task,
        mode=mode,
        metric=metric_spec.name,
        num_examples=data.size,
        baseline=float(boot.baseline),
        heads=heads,
        layers=layers,
        keep_only=keep,
        pruning=pruning,
        importance=importance,
        baseline_metrics={k: float(v) for k, v in baseline_metrics.items()},
        config={
            "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
            "model_type": model_type(model),
            "layers": num_layers,
            "heads": num_heads,
            "mode": mode,
            "metric": metric_spec.name,
            "metric_source": "compute_metrics" if compute_metrics is not None else ("glue" if task else "built-in"),
            "greater_is_better": bool(greater_is_better),
            "n_resamples": int(n_resamples),
            "seed": int(seed),
            "confidence": float(confidence),
            "p_value": "two-sided bootstrap: min(1, 2*min(1+#(d<=0), 1+#(d>=0))/(R+1))",
            "prune_step": float(prune_step),
            "prune_threshold": float(prune_threshold),
            "importance": "E|dL/d gate| on the evaluation set, L2-normalised per layer, computed once",
            "batch_size": int(batch_size),
            "configs_per_batch": int(configs_per_batch),
            "max_length": int(max_length),
            "layer_reuse": runner.reuses,
            "first_token_last_layer": runner.last is not None,
            "processes": processes.world,
            "num_configurations": len(configs) + len(pruning),
            "seconds": {
                "sweep": round(evaluated - started, 3),
                "importance": round(importance_seconds, 3),
                "pruning": round(pruned - evaluated - importance_seconds, 3),
                "bootstrap": round(finished - pruned, 3),
            },
        },
        logits=logits,
    )
    if processes.is_main:
        if out_path is not None:
            write_outputs(result, out_path)
        sw, owned = writer_for(writer, logdir)
        if sw is not None:
            try:
                sw.add_ablation(
                    mode,
                    result.metric,
                    result.baseline,
                    result.num_examples,
                    result.heads.astype(np.float32),
                    result.layers.astype(np.float32),
                    result.pruning_curve() if pruning else None,
                    step=step,
                )
            finally:
                sw.close() if owned else sw.flush()
    processes.barrier()
    return result
