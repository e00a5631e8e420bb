"""ONNX files run in ONNX Runtime on the CPU: the evaluation set's logits at a given batching and the timings
(latency at batch 1, throughput at batch 32), the variants alternating within every repeat so that all see the same
machine load.

The batching matters to INT8: dynamic quantization computes an activation's scale and zero point from the whole
input tensor at run time, so in a padded batch an example's INT8 logits depend on the examples beside it. One
request at a time (batch 1) each example runs at its own length, without padding.

Nothing here imports torch; the tokenizer only turns texts into numpy arrays.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.ship.export import require_onnx

__all__ = ["EvalBatches", "encode", "eval_batches", "load_onnx", "predict_logits", "time_variants", "timing_feeds"]

#: The provider every measurement runs on.
PROVIDER = "CPUExecutionProvider"

Feed = dict[str, np.ndarray]


def load_onnx(path: str | Path, threads: int = 0) -> Any:
    """An ``onnxruntime.InferenceSession`` of ``path`` on the CPU provider; ``threads`` 0 lets ONNX Runtime choose
    (one per physical core)."""
    ort = require_onnx()
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=[PROVIDER])


def _texts(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str] | None]:
    pairs = [row.get("text_pair") for row in rows]
    return [row["text"] for row in rows], None if all(p is None for p in pairs) else [p or "" for p in pairs]


def encode(tokenizer: Any, rows: Sequence[Mapping[str, Any]], max_length: int) -> Feed:
    """``rows`` (``{"text", "text_pair"?}``) as int64 numpy arrays padded to the longest row, cut at ``max_length``."""
    texts, pairs = _texts(rows)
    encoded = tokenizer(texts, pairs, padding=True, truncation=True, max_length=max_length, return_tensors="np")
    return {name: np.asarray(value, dtype=np.int64) for name, value in encoded.items()}


@dataclass(frozen=True)
class EvalBatches:
    """The evaluation set in batches of similar lengths: ``indices[b]`` are the examples of ``feeds[b]``."""

    indices: list[np.ndarray]
    feeds: list[Feed]

    @property
    def num_examples(self) -> int:
        return int(sum(len(i) for i in self.indices))


def eval_batches(
    tokenizer: Any, examples: Sequence[Mapping[str, Any]], max_length: int, batch_size: int = 32, sort: bool = True
) -> EvalBatches:
    """Tokenize ``examples`` once for every variant, in batches of ``batch_size``, each padded to its longest example
    (batch 1: every example at its own length, no padding).

    Args:
        tokenizer: the model's tokenizer.
        examples: ``{"text", "text_pair"?}`` rows.
        max_length: longest input in tokens; longer examples are cut.
        batch_size: examples per run.
        sort: group examples of similar lengths (less padding); False keeps the set's order, as requests arrive.

    Returns:
        The batches, with the examples each holds.
    """
    if not sort:
        order = np.arange(len(examples))
    else:
        texts, pairs = _texts(examples)
        lengths = [len(ids) for ids in tokenizer(texts, pairs, truncation=True, max_length=max_length)["input_ids"]]
        order = np.argsort(np.asarray(lengths), kind="stable")
    indices = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    feeds = [encode(tokenizer, [examples[i] for i in chosen], max_length) for chosen in indices]
    return EvalBatches(indices, feeds)


def _run(model: Any, feed: Feed) -> np.ndarray:
    wanted = [i.name for i in model.get_inputs()]
    return model.run(["logits"], {name: feed[name] for name in wanted})[0]


def predict_logits(model: Any, batches: EvalBatches, step: Callable[[], None] | None = None) -> np.ndarray:
    """``[n, labels]`` float32 logits of every example, in the examples' order; ``step`` is called after each batch."""
    out: np.ndarray | None = None
    for chosen, feed in zip(batches.indices, batches.feeds):
        logits = _run(model, feed)
        if out is None:
            out = np.empty((batches.num_examples, logits.shape[1]), dtype=np.float32)
        out[chosen] = logits
        if step is not None:
            step()
    if out is None:
        raise ValueError("the evaluation set is empty")
    return out


def timing_feeds(
    tokenizer: Any, examples: Sequence[Mapping[str, Any]], max_length: int, repeats: int, batch_size: int = 32
) -> tuple[list[Feed], Feed]:
    """The timed inputs: ``repeats`` single examples (the first of the set, each at its own length, cycling when
    the set is shorter) and one batch of its first ``batch_size`` examples padded to the longest."""
    if not examples:
        raise ValueError("the evaluation set is empty")
    singles = [encode(tokenizer, [examples[r % len(examples)]], max_length) for r in range(repeats)]
    batch = encode(tokenizer, [examples[r % len(examples)] for r in range(batch_size)], max_length)
    return singles, batch


def time_variants(
    models: Mapping[str, Any],
    singles: Sequence[Feed],
    batch: Feed,
    warmup: int = 2,
    step: Callable[[], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Median latency at batch 1 (over ``singles``) and throughput at the batch of ``batch``, per model.

    Every repeat runs each model once, in an order that alternates between repeats, after ``warmup`` untimed
    repeats; ``step`` is called after each run.

    Returns:
        ``{name: {"latency_ms": median ms of one example, "throughput": examples per second at the batch's median
        time, "batch_ms": that median}}``.
    """
    names = list(models)
    single_times: dict[str, list[float]] = {name: [] for name in names}
    batch_times: dict[str, list[float]] = {name: [] for name in names}
    for times, feeds in ((single_times, list(singles)), (batch_times, [batch] * len(singles))):
        for repeat in range(-warmup, len(feeds)):
            feed = feeds[max(repeat, 0)]
            for name in names if repeat % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                _run(models[name], feed)
                if repeat >= 0:
                    times[name].append(time.perf_counter() - start)
                if step is not None:
                    step()
    size = int(next(iter(batch.values())).shape[0])
    return {
        name: {
            "latency_ms": 1e3 * statistics.median(single_times[name]),
            "throughput": size / statistics.median(batch_times[name]),
            "batch_ms": 1e3 * statistics.median(batch_times[name]),
        }
        for name in names
    }
