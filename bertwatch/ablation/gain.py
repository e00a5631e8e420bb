"""What a physically pruned model buys: parameters, inference latency and throughput against the full model in
the same run, and the task metric on an evaluation set with its paired-bootstrap interval."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertwatch.ablation.bootstrap import paired_bootstrap
from bertwatch.core.schema import Checked, Flag, option, whole

__all__ = ["TIMING_TEXT", "GainOptions", "count_parameters", "measure_gain", "metric_with_interval", "time_inference"]

#: The timing batch's text when no evaluation set is given (truncated to the timing length).
TIMING_TEXT = "the quick brown fox jumps over the lazy dog while the committee reviews the annual budget report " * 20


def count_parameters(model: torch.nn.Module) -> int:
    """Number of parameter values of ``model`` (shared tensors once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def _batch(tokenizer: Any, texts: Sequence[str], max_length: int, device: Any) -> dict[str, torch.Tensor]:
    encoded = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in encoded.items()}


@torch.inference_mode()
def time_inference(
    models: Mapping[str, torch.nn.Module], batch: Mapping[str, torch.Tensor], repeats: int = 10, warmup: int = 2
) -> dict[str, dict[str, float]]:
    """Median seconds per forward pass of each model on ``batch`` ``[batch, tokens]``, the models alternating
    within every repeat so that both see the same machine load; throughput is examples per second at that median.

    Returns:
        ``{name: {"latency_s": float, "throughput": float}}``.
    """
    size = int(next(iter(batch.values())).shape[0])
    device = next(iter(batch.values())).device
    times: dict[str, list[float]] = {name: [] for name in models}
    for repeat in range(warmup + repeats):
        order = list(models) if repeat % 2 == 0 else list(models)[::-1]
        for name in order:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            models[name](**batch)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if repeat >= warmup:
                times[name].append(time.perf_counter() - start)
    return {
        name: {"latency_s": statistics.median(t), "throughput": size / statistics.median(t)}
        for name, t in times.items()
    }


@torch.inference_mode()
def _predictions(
    model: torch.nn.Module, tokenizer: Any, examples: Sequence[Mapping[str, Any]], max_length: int
) -> np.ndarray:
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(examples), 32):
        rows = examples[start : start + 32]
        pairs = [r.get("text_pair") for r in rows]
        encoded = tokenizer(
            [r["text"] for r in rows],
            None if all(p is None for p in pairs) else [p or "" for p in pairs],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        )
        logits = model(**{k: v.to(device) for k, v in encoded.items()}).logits
        out.append(logits.float().argmax(-1).cpu().numpy())
    return np.concatenate(out)


def metric_with_interval(
    full: torch.nn.Module,
    pruned: torch.nn.Module,
    tokenizer: Any,
    examples: Sequence[Mapping[str, Any]],
    max_length: int = 128,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """Accuracy of both sequence classifiers on ``examples`` (``{"text", "text_pair", "label"}``) and the pruned
    model's change with its 95% paired-bootstrap interval and p-value (``bertwatch.ablation.bootstrap``).

    Returns:
        ``{"metric": "accuracy", "full", "pruned", "delta", "ci_low", "ci_high", "p", "num_examples"}``.

    Raises:
        ValueError: no examples.
    """
    if not examples:
        raise ValueError("the evaluation set is empty")
    labels = np.array([int(r["label"]) for r in examples])
    base = _predictions(full, tokenizer, examples, max_length)
    cut = _predictions(pruned, tokenizer, examples, max_length)
    result = paired_bootstrap(base, cut[None], labels, "accuracy", n_resamples=n_resamples, seed=seed)
    return {
        "metric": "accuracy",
        "full": float(result.baseline),
        "pruned": float(result.value[0]),
        "delta": float(result.delta[0]),
        "ci_low": float(result.ci_low[0]),
        "ci_high": float(result.ci_high[0]),
        "p": float(result.p[0]),
        "num_examples": len(examples),
    }


def _device(name: str, value: Any) -> str | torch.device:
    if isinstance(value, torch.device) or (isinstance(value, str) and value):
        return value
    raise TypeError(f"{name} must be a torch device or its name, e.g. 'cpu' or 'cuda:0', not {value!r}")


@dataclass(frozen=True, eq=False, init=False)
class GainOptions(Checked):
    """How :func:`measure_gain` times and scores a pruned model: each option declared once (default, help, check and
    the flag of ``bertwatch prune``).

    Args:
        batch_size: examples in the timing batch (``bertwatch prune``: the first of the evaluation set, else a
            fixed text).
        max_length: tokens per example, in the timing batch and for the metric.
        repeats: timed forward passes per model (their median is reported).
        device: the torch device both models are timed on.

    Raises:
        TypeError / ValueError: a value of the wrong type or out of range, naming the option.

    Example:
        >>> GainOptions(repeats=3).repeats, GainOptions().max_length
        (3, 128)
    """

    batch_size: int = option(32, "timing batch", whole(1), Flag(("--batch-size",), "int"))
    max_length: int = option(128, "tokens per example", whole(1), Flag(("--max-length",), "int"))
    repeats: int = option(10, "timed forward passes per model", whole(1), Flag(("--repeats",), "int"))
    device: str | torch.device = option("cpu", "torch device", _device, Flag(("--device",), "str"))

    @classmethod
    def option_prefix(cls) -> str:
        return ""


def measure_gain(
    full: torch.nn.Module,
    pruned: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    examples: Sequence[Mapping[str, Any]] | None = None,
    options: GainOptions | None = None,
) -> dict[str, Any]:
    """Parameters, latency and throughput of ``pruned`` against ``full`` on one batch of ``texts`` (padded to its
    longest), and with ``examples`` the accuracy with its interval. Both models move to ``options.device``.

    Args:
        full, pruned: the model and its pruned copy (:func:`~bertwatch.ablation.physical.prune_model`).
        tokenizer: their tokenizer.
        texts: the timing batch.
        examples: labelled texts to score both models on (None: no metric).
        options: the length, repeats and device (:class:`GainOptions`; None: its defaults).

    Returns:
        ``{"device", "batch_size", "tokens", "parameters": {"full", "pruned", "ratio"}, "latency_s": {...},
        "throughput": {...}, "speedup", "metric" (or None)}``; ``speedup`` is full latency / pruned latency.

    Example:
        >>> gain = measure_gain(model, prune_model(model, heads), tokenizer, ["a sentence"] * 32)
    """
    o = options or GainOptions()
    full, pruned = full.to(o.device).eval(), pruned.to(o.device).eval()
    batch = _batch(tokenizer, texts, o.max_length, o.device)
    timed = time_inference({"full": full, "pruned": pruned}, batch, repeats=o.repeats)
    params = {"full": count_parameters(full), "pruned": count_parameters(pruned)}
    return {
        "device": str(o.device),
        "batch_size": len(texts),
        "tokens": int(batch["input_ids"].shape[1]),
        "parameters": {**params, "ratio": params["pruned"] / params["full"]},
        "latency_s": {name: t["latency_s"] for name, t in timed.items()},
        "throughput": {name: t["throughput"] for name, t in timed.items()},
        "speedup": timed["full"]["latency_s"] / timed["pruned"]["latency_s"],
        "metric": None if examples is None else metric_with_interval(full, pruned, tokenizer, examples, o.max_length),
    }
