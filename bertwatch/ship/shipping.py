"""``ship_model``: a fine-tuned classifier exported, quantized (and optionally pruned), every variant measured in
ONNX Runtime on the evaluation set against the float32 export, the files and ``ship.json`` written.

The metric is measured at the serving batch (``ShipOptions.serve_batch``, default 1: one request at a time, each
example at its own length), and every variant is run once more in length-sorted batches of 32: dynamic INT8 computes
its activation scales from the whole batch, so the predictions that change between the two are counted.
``ship.json`` records the batching of every figure; the tokenizer and the examples are written beside the files, so
the metric can be reproduced with ONNX Runtime and ``tokenizers`` alone (docs/ship.md).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.ablation.scoring import make_metric, one_example_change
from bertwatch.core.schema import Checked, Flag, number, option, whole
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.ship import runtime
from bertwatch.ship.delimiters import OUTLIER_EXAMPLES
from bertwatch.ship.export import (
    DEFAULT_OPSET,
    check_classifier,
    export_difference,
    export_onnx,
    quantize_int8,
    require_onnx,
)
from bertwatch.ship.layer_error import layer_attribution, layer_nodes, worst_layer
from bertwatch.ship.measure import against_constant, batch_dependence, compare_variants, size_mb
from bertwatch.ship.table import write_ship_json

__all__ = ["EXAMPLES_FILE", "FILES", "REFERENCE", "ShipOptions", "mixed_name", "ship_model"]

#: The variants' files, in the table's order; the pruned ones only when heads are removed.
FILES = {
    "fp32": "model.onnx",
    "int8": "model.int8.onnx",
    "pruned": "model.pruned.onnx",
    "pruned+int8": "model.pruned.int8.onnx",
}
#: The variant every other is compared with.
REFERENCE = "fp32"
#: The batch of the throughput figure, of the export check and of the sorted batches every variant is compared at.
THROUGHPUT_BATCH = 32
#: The evaluation examples as measured, in their order (JSON lines ``{"text", "text_pair"?, "label"}``).
EXAMPLES_FILE = "examples.jsonl"


def mixed_name(layer: int) -> tuple[str, str]:
    """The mixed-precision variant's name and file: INT8 everywhere but ``layer``, kept in float32.

    Example:
        >>> mixed_name(0)
        ('int8, layer 0 fp32', 'model.int8.layer0fp32.onnx')
    """
    return f"int8, layer {layer} fp32", f"model.int8.layer{layer}fp32.onnx"


@dataclass(frozen=True, eq=False, init=False)
class ShipOptions(Checked):
    """How ``ship_model`` measures: each option declared once (default, help, check, the flag of ``bertwatch ship``).

    Args:
        max_length: longest input in tokens; longer examples are cut.
        serve_batch: the batch the metric is measured at, as served: 1 runs one request at a time, each example at
            its own length; N runs batches of N in the set's order, each padded to its longest example.
        repeats: timed runs per variant and batch size (their median is reported).
        warmup: untimed runs before them.
        threads: ONNX Runtime's intra-op threads; 0 lets it choose.
        n_resamples: bootstrap resamples.
        seed: the resamples' seed.
        confidence: the intervals' level.
        opset: the ONNX opset of the export.
        attribution_examples: the first N evaluation examples on which each layer's share of the INT8 error is
            measured (``ship.layer_error``), and the mixed variant chosen; 0 measures neither.

    Raises:
        TypeError: a value that is not a number, or an unknown option name (the message suggests the closest).
        ValueError: a value out of range (the message names the option).

    Example:
        >>> ShipOptions(serve_batch=8).serve_batch, ShipOptions().repeats
        (8, 20)
        >>> ShipOptions(repeats=0)
        Traceback (most recent call last):
        ValueError: repeats must be >= 1, got 0
    """

    max_length: int = option(
        128, "longest input in tokens; longer examples are cut", whole(2),
        Flag(("--max-length",), "int", help="longest input in tokens (default 128, or the model's maximum)"),
    )  # fmt: skip
    serve_batch: int = option(
        1, "measure the metric at the batch you serve: 1 (default) runs one request at a time, each example at its own "
        "length; N runs batches of N in the evaluation set's order, each padded to its longest example", whole(1),
        Flag(("--serve-batch",), "int"),
    )  # fmt: skip
    repeats: int = option(20, "timed runs per variant and batch size", whole(1), Flag(("--repeats",), "int"))
    warmup: int = option(2, "untimed runs before the timed ones", whole(0))
    threads: int = option(0, "ONNX Runtime's intra-op threads (0: it chooses)", whole(0), Flag(("--threads",), "int"))
    n_resamples: int = option(
        1000,
        "paired-bootstrap resamples of each variant's metric against fp32",
        whole(1),
        Flag(("--resamples",), "int"),
    )
    seed: int = option(0, "the resamples' seed", whole(), Flag(("--seed",), "int"))
    confidence: float = option(0.95, "the intervals' level", number(0.0, below=1.0))
    opset: int = option(DEFAULT_OPSET, "the ONNX opset of the export", whole(1), Flag(("--opset",), "int"))
    attribution_examples: int = option(
        OUTLIER_EXAMPLES, "measure each layer's share of the INT8 error on the first N examples and add 'int8, layer "
        "K fp32' for the layer that removes the most (0: neither)", whole(0), Flag(("--attribution-examples",), "int"),
    )  # fmt: skip

    @classmethod
    def option_prefix(cls) -> str:
        return ""


def _labels(examples: Sequence[Mapping[str, Any]], num_labels: int) -> np.ndarray:
    if not examples:
        raise ValueError("the evaluation set is empty: pass a --data file or --task with examples")
    try:
        labels = np.array([int(row["label"]) for row in examples])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError("every evaluation example needs a class label (the test splits of GLUE have none)") from error
    if labels.min() < 0 or labels.max() >= num_labels:
        raise ValueError(f"labels must be class ids 0..{num_labels - 1}; the evaluation set has {sorted(set(labels))}")
    return labels


def _write_variants(model: Any, tokenizer: Any, out: Path, heads: Mapping[int, Sequence[int]] | None, opset: int):
    """Export and quantize every variant; returns name -> (torch model or None, file)."""
    written = {REFERENCE: (model, export_onnx(model, tokenizer, out / FILES["fp32"], opset=opset))}
    written["int8"] = (None, quantize_int8(written[REFERENCE][1], out / FILES["int8"]))
    if heads:
        from bertwatch.ablation.physical import prune_model

        pruned = prune_model(model, heads)
        written["pruned"] = (pruned, export_onnx(pruned, tokenizer, out / FILES["pruned"], opset=opset))
        written["pruned+int8"] = (None, quantize_int8(written["pruned"][1], out / FILES["pruned+int8"]))
    return written


def ship_model(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Mapping[str, Any]],
    out: str | Path,
    *,
    metric: str = "accuracy",
    heads: Mapping[int, Sequence[int]] | None = None,
    options: ShipOptions | None = None,
    source: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Will this model ship? Export it to ONNX, quantize it to INT8 (and prune ``heads``), and measure every
    variant in ONNX Runtime (CPU) against the float32 export.

    Args:
        model: a fine-tuned single-label ``...ForSequenceClassification`` (torch, CPU).
        tokenizer: its tokenizer.
        examples: the evaluation set, ``{"text", "text_pair"?, "label"}`` rows (``bertwatch.data.glue.load_glue``,
            ``bertwatch.data.files.read_labelled_texts``).
        out: the output folder (created): ``model.onnx``, ``model.int8.onnx``, the mixed variant
            ``model.int8.layerKfp32.onnx`` (:func:`mixed_name`; when a layer's fp32 removes INT8 error), with
            ``heads`` ``model.pruned.onnx`` and ``model.pruned.int8.onnx``, the tokenizer's files
            (``save_pretrained``: ``tokenizer.json`` for a fast tokenizer), ``examples.jsonl`` (the examples as
            measured) and ``ship.json``.
        metric: the task metric (``accuracy``, ``f1``, ``matthews_correlation``).
        heads: ``{layer: [heads to remove]}`` for the pruned variants (``bertwatch.ablation.physical``).
        options: bootstrap, timing and runtime settings (:class:`ShipOptions`).
        source: what to record about the input (checkpoint, task, split) in ``ship.json``.
        progress: a progress bar over the evaluation and timing runs.

    Returns:
        What ``ship.json`` holds: ``variants`` (one row each: ``name``, ``file``, ``size_mb``, ``value``, ``delta``,
        ``ci_low``, ``ci_high``, ``p``, ``agreement``, ``max_abs_logit_diff`` at the serving batch, ``latency_ms``,
        ``throughput``, and ``sorted_batches``: ``changed``, the predictions that differ in length-sorted batches of
        32, and the metric ``value`` there), ``batching`` (per figure: ``batch_size``, ``padded``, ``sorted``),
        ``files`` (``examples``, ``tokenizer``), ``export_check`` (ONNX against torch per exported model),
        ``outliers`` (the float32 model's activation outliers per layer and its heads' delimiter mass on the first
        256 examples: ``ship.delimiters.float_side``),
        ``attribution`` (each layer's share of the INT8 error, ``ship.layer_error.layer_attribution``, and
        ``kept_fp32``, the mixed variant's layer; None with ``attribution_examples=0``), ``one_example`` and
        ``one_example_how`` (the largest change of the metric one example makes on the fp32 predictions, by the
        ablation's rule: ``bertwatch.ablation.scoring.one_example_change``), the settings and the runtime.

    Raises:
        ValueError: not a single-label classifier, an empty or unlabelled evaluation set, a bad head.
        RuntimeError: onnx or onnxruntime is missing (``pip install 'bertwatch[ship]'``).

    Example:
        >>> result = ship_model(model, tokenizer, load_glue("sst2", glue_dir="glue"), "ship_out/")
        >>> [(v["name"], v["value"], v["latency_ms"]) for v in result["variants"]]
    """
    ort = require_onnx()
    check_classifier(model)
    options = options or ShipOptions()
    labels = _labels(examples, int(model.config.num_labels))
    out = Path(out)
    written = _write_variants(model, tokenizer, out, heads, options.opset)
    tokenizer_files = _write_inputs(out, tokenizer, examples)
    attribution = _attribute(written, tokenizer, examples, out, options, progress)
    models = {name: runtime.load_onnx(path, options.threads) for name, (_, path) in written.items()}
    singles, batch = runtime.timing_feeds(tokenizer, examples, options.max_length, options.repeats, THROUGHPUT_BATCH)
    checks = {
        name: export_difference(torch_model, runtime.predict_logits(models[name], _one(batch)), batch)
        for name, (torch_model, _) in written.items()
        if torch_model is not None
    }
    from bertwatch.ship.delimiters import float_side, top_heads

    outliers = float_side(model, tokenizer, examples, options.max_length)
    if attribution is not None and attribution["kept_fp32"] is not None and outliers["heads"] is not None:
        layer = attribution["kept_fp32"]
        attribution["heads"] = top_heads(outliers["heads"], [layer])
        attribution["heads_from_layer"] = top_heads(outliers["heads"], range(layer, len(outliers["residual"])))
    evaluations = {
        "served": runtime.eval_batches(tokenizer, examples, options.max_length, options.serve_batch, sort=False),
        "sorted": runtime.eval_batches(tokenizer, examples, options.max_length, THROUGHPUT_BATCH, sort=True),
    }
    logits, timings = _evaluate_and_time(models, evaluations, singles, batch, options, progress)
    predictions = {key: {name: values.argmax(-1) for name, values in runs.items()} for key, runs in logits.items()}
    served = predictions["served"]
    others = {name: p for name, p in served.items() if name != REFERENCE}
    compared = compare_variants(
        served[REFERENCE], others, labels, metric, options.n_resamples, options.seed, options.confidence, REFERENCE
    )
    dependence = batch_dependence(served, predictions["sorted"], labels, metric)
    one_example, how = one_example_change(make_metric(None, None, metric, labels, False), logits["served"][REFERENCE])
    trivial = _trivial(model, served, labels, metric, options, source)
    rows = [
        {
            **_row(name, path, logits["served"], timings),
            **compared[name],
            "sorted_batches": dependence[name],
            "vs_constant": _vs_constant(trivial, trivial.rows.index(name)),
        }
        for name, (_, path) in written.items()
    ]
    result = {
        "version": 3,  # 3: the trivial baseline (no_better_than_constant, trivial_baseline, each row's vs_constant)
        **dict(source or {}),
        "metric": metric,
        "num_examples": len(labels),
        "one_example": one_example,  # the ablation's rule: the largest change one example's prediction makes
        "one_example_how": how,
        "no_better_than_constant": trivial.no_better(0),
        "trivial_baseline": trivial.to_json(),
        **_settings(options, batch, ort.__version__),
        "batching": _batching(options, attribution is not None),
        "removed_heads": {str(layer): sorted(h) for layer, h in sorted(heads.items())} if heads else None,
        "export_check": checks,
        "variants": rows,
        "outliers": outliers,
        "attribution": attribution,
        "files": {"examples": EXAMPLES_FILE, "tokenizer": tokenizer_files},
    }
    write_ship_json(out, result)
    return result


def _trivial(model: Any, served: Mapping[str, np.ndarray], labels: np.ndarray, metric: str, options: ShipOptions,
             source: Mapping[str, Any] | None):  # fmt: skip
    """Every variant against the constant answer (``ship.measure.against_constant``), the classes named."""
    from bertwatch.core.baseline import class_names
    from bertwatch.heads.task_heads import label_names

    names = class_names(label_names(model.config), (source or {}).get("task"))
    found = against_constant(
        served,
        labels,
        int(model.config.num_labels),
        metric,
        options.n_resamples,
        options.seed,
        options.confidence,
        names,
    )
    return found.about("its ship figures")


def _vs_constant(trivial: Any, row: int) -> dict[str, Any]:
    """A variant's metric minus the constant answer's, with its interval, and whether it is no better."""
    return {
        "delta": trivial.delta[row],
        "ci_low": trivial.ci_low[row],
        "ci_high": trivial.ci_high[row],
        "no_better": trivial.no_better(row),
    }


def _settings(options: ShipOptions, batch: runtime.Feed, version: str) -> dict[str, Any]:
    """What ``ship.json`` records of the settings and the runtime."""
    return {
        "confidence": options.confidence,
        "n_resamples": options.n_resamples,
        "seed": options.seed,
        "max_length": options.max_length,
        "timing": {
            "repeats": options.repeats,
            "warmup": options.warmup,
            "batch_size": THROUGHPUT_BATCH,
            "batch_tokens": int(batch["input_ids"].shape[1]),
        },
        "runtime": {
            "onnxruntime": version,
            "provider": runtime.PROVIDER,
            "threads": options.threads or "auto",
            "cpu_count": os.cpu_count(),
            "opset": options.opset,
        },
    }


def _write_inputs(out: Path, tokenizer: Any, examples: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tokenizer's files (``save_pretrained``) and the examples as measured, beside the ONNX files; returns the
    tokenizer's file names."""
    rows = [{k: row[k] for k in ("text", "text_pair", "label") if row.get(k) is not None} for row in examples]
    (out / EXAMPLES_FILE).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return sorted(Path(name).name for name in tokenizer.save_pretrained(str(out)))


def _batching(options: ShipOptions, attributed: bool) -> dict[str, Any]:
    """How each figure's examples were batched: ``batch_size``, ``padded`` (to the longest of the batch) and
    ``sorted`` (by length; else in the evaluation set's order)."""

    def how(size: int, sort: bool = False) -> dict[str, Any]:
        return {"batch_size": size, "padded": size > 1, "sorted": sort}

    served = how(options.serve_batch)
    return {
        "metric": served,  # the value, its interval, agreement and max_abs_logit_diff
        "sorted_batches": how(THROUGHPUT_BATCH, True),  # each variant's sorted_batches
        "latency": how(1),
        "throughput": how(THROUGHPUT_BATCH),  # the first examples of the set
        "export_check": how(THROUGHPUT_BATCH),
        "attribution": served if attributed else None,
    }


def _attribute(written: dict, tokenizer: Any, examples, out: Path, options: ShipOptions, progress: bool):
    """Each layer's share of the INT8 error on the first examples; the mixed variant (the layer that removes the
    most of it kept in fp32) added to ``written`` after ``int8``. None when ``attribution_examples`` is 0."""
    from tqdm.auto import tqdm

    if not options.attribution_examples:
        return None
    fp32 = written[REFERENCE][1]
    chosen = list(examples[: options.attribution_examples])
    batches = runtime.eval_batches(tokenizer, chosen, options.max_length, options.serve_batch, sort=False)
    try:
        nodes, _ = layer_nodes(fp32)
    except ValueError as error:  # a graph whose nodes name no layer: the table still stands
        warnings.warn(f"bertwatch ship: {error}", BertWatchWarning, stacklevel=3)
        return None
    with tqdm(total=1 + 2 * len(nodes), desc="INT8 error by layer", unit="copy", disable=not progress) as bar:
        attribution = layer_attribution(fp32, batches, options.threads, lambda: bar.update(1))
    layer = worst_layer(attribution["layers"])
    attribution["kept_fp32"] = layer
    if layer is not None:
        name, file = mixed_name(layer)
        mixed = quantize_int8(fp32, out / file, exclude=nodes[layer])
        items = list(written.items())
        items.insert(list(written).index("int8") + 1, (name, (None, mixed)))
        written.clear()
        written.update(items)
    return attribution


def _evaluate_and_time(models, evaluations: Mapping[str, runtime.EvalBatches], singles, batch, options, progress):
    """Every variant's logits at every batching of the evaluation set (``{batching: {variant: [n, labels]}}``), then
    the timings; one progress bar over all the runs."""
    from tqdm.auto import tqdm

    runs = sum(len(batches.feeds) for batches in evaluations.values())
    total = len(models) * (runs + 2 * (options.repeats + options.warmup))
    with tqdm(total=total, desc="bertwatch ship", unit="run", disable=not progress, leave=False) as bar:
        logits: dict[str, dict[str, np.ndarray]] = {key: {} for key in evaluations}
        for name, model in models.items():
            for key, batches in evaluations.items():
                bar.set_postfix_str(f"evaluating {name}, {key} batches")
                logits[key][name] = runtime.predict_logits(model, batches, lambda: bar.update(1))
        bar.set_postfix_str("timing")
        timings = runtime.time_variants(models, singles, batch, options.warmup, lambda: bar.update(1))
    return logits, timings


def _row(name: str, path: Path, logits: Mapping[str, np.ndarray], timings: Mapping[str, Mapping[str, float]]):
    """A variant's file, size, largest logit change against fp32 and timings (the comparison is added)."""
    return {
        "name": name,
        "file": path.name,
        "size_mb": size_mb(path.stat().st_size),
        "max_abs_logit_diff": float(np.abs(logits[name] - logits[REFERENCE]).max()),
        "latency_ms": timings[name]["latency_ms"],
        "throughput": timings[name]["throughput"],
    }


def _one(feed: runtime.Feed) -> runtime.EvalBatches:
    """One feed as a set of batches, its rows in order."""
    return runtime.EvalBatches([np.arange(len(next(iter(feed.values()))))], [feed])
