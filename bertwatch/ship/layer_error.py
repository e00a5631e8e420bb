"""Which layers the INT8 loss comes from, measured: for every encoder layer l, two INT8 copies of the float32 export
are run in ONNX Runtime on the same examples as the float32 file:

* **only l in INT8**: every node outside layer l (the embeddings, pooler and classifier too) left in float32
  (``quantize_dynamic``'s ``nodes_to_exclude``): the error layer l's quantization causes on its own;
* **l kept in fp32**: every node quantized but layer l's: the share of the full INT8 copy's error that
  keeping l in float32 removes (its *recovery*).

The error of a copy against the float32 file is the mean over examples of the largest absolute logit difference
(``logit_error``), with the share of predictions that change. A layer's nodes are those whose name holds
``/layer.{l}/`` (the TorchScript exporter names nodes after the module path, e.g.
``/bert/encoder/layer.0/output/dense/MatMul``); its quantized ones are the ``MatMul`` nodes of the query, key, value
and output projections, the two feed-forward maps, and the two products of the attention scores, which dynamic
quantization also quantizes.

Nothing here imports torch.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.ship.export import quantize_int8, require_onnx
from bertwatch.ship.runtime import EvalBatches, load_onnx, predict_logits

__all__ = ["QUANTIZED_OPS", "layer_attribution", "layer_nodes", "logit_error", "recovery", "worst_layer"]

#: The node types of a layer that dynamic INT8 quantization quantizes (its embeddings' ``Gather`` sit outside layers).
QUANTIZED_OPS = ("MatMul", "Gemm")
#: A node of encoder layer N: ``.../layer.N/...`` (BERT, RoBERTa, ELECTRA, DistilBERT) or ``.../layers.N/...``.
_LAYER = re.compile(r"/layers?\.(\d+)/")


def layer_nodes(path: str | Path) -> tuple[dict[int, list[str]], list[str]]:
    """The nodes of each encoder layer of an exported file, and all of its nodes.

    Args:
        path: an ONNX file from ``export_onnx``.

    Returns:
        ``({layer: [node names]}, [every node name])``: the nodes named after each layer, layers in order, then
        every node of the graph (the embeddings' ``Gather``, which dynamic quantization also stores as int8, the
        pooler and the classifier too).

    Raises:
        ValueError: no node names a layer (a graph exported some other way): per-layer attribution cannot run.
    """
    require_onnx()
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    found: dict[int, list[str]] = {}
    everything = []
    for node in graph.node:
        # the quantizer first rewrites a Gemm as "<name>_MatMul" + Add, and excludes by the new name
        names = [node.name, f"{node.name}_MatMul"] if node.op_type == "Gemm" else [node.name]
        everything += names
        match = _LAYER.search(node.name)
        if match:
            found.setdefault(int(match.group(1)), []).extend(names)
    if not any(node.op_type in QUANTIZED_OPS for node in graph.node if _LAYER.search(node.name)):
        raise ValueError(f"no node of {path} names an encoder layer ('/layer.N/'): cannot attribute the INT8 error")
    return dict(sorted(found.items())), everything


def logit_error(reference: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """How far ``logits`` are from ``reference``, both ``[n, labels]``.

    Returns:
        ``{"mean_max_abs": mean over examples of max over labels of |Δ|, "changed": share of examples whose argmax
        differs}``.

    Raises:
        ValueError: shapes that differ, or no examples.

    Example:
        >>> logit_error(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.5, 0.0], [1.0, 0.5]]))
        {'mean_max_abs': 0.75, 'changed': 0.5}
    """
    reference, logits = np.asarray(reference, dtype=np.float64), np.asarray(logits, dtype=np.float64)
    if reference.shape != logits.shape or reference.ndim != 2 or len(reference) == 0:
        raise ValueError(f"cannot compare logits {logits.shape} with {reference.shape}")
    return {
        "mean_max_abs": float(np.abs(logits - reference).max(-1).mean()),
        "changed": float(np.mean(logits.argmax(-1) != reference.argmax(-1))),
    }


def recovery(full_error: float, kept_error: float) -> float:
    """The share of the full INT8 copy's error that keeping one layer in fp32 removes: 1 − kept / full (NaN when the
    full copy has no error).

    Example:
        >>> recovery(0.2, 0.05)
        0.75
    """
    return 1.0 - kept_error / full_error if full_error > 0 else float("nan")


def worst_layer(rows: list[Mapping[str, Any]]) -> int | None:
    """The layer whose keeping in fp32 removes the most INT8 error (``recovery``), or None when no layer removes any."""
    scored = [(row["recovery"], row["layer"]) for row in rows if row["recovery"] == row["recovery"]]
    best = max(scored, default=None)
    return None if best is None or best[0] <= 0 else int(best[1])


def layer_attribution(
    fp32_path: str | Path,
    batches: EvalBatches,
    threads: int = 0,
    step: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Measure each layer's share of the INT8 error (module doc) on ``batches``.

    Args:
        fp32_path: the float32 export.
        batches: the examples to run (e.g. the first 256 of the evaluation set).
        threads: ONNX Runtime's intra-op threads (0: it chooses).
        step: called after each copy is measured.

    Returns:
        ``{"examples": n, "int8": logit_error of the full INT8 copy, "layers": [{"layer", "only": logit_error,
        "kept": logit_error, "recovery"}, ...]}``. The copies are written to a temporary folder and removed.

    Raises:
        ValueError: the graph names no layer (``layer_nodes``).

    Example:
        >>> batches = eval_batches(tokenizer, examples[:256], 128)  # doctest: +SKIP
        >>> worst_layer(layer_attribution("ship/model.onnx", batches)["layers"])  # doctest: +SKIP
        0
    """
    nodes, everything = layer_nodes(fp32_path)
    reference = predict_logits(load_onnx(fp32_path, threads), batches)
    with tempfile.TemporaryDirectory(prefix="bertwatch-int8-") as folder:

        def error(exclude: list[str], name: str) -> dict[str, float]:
            target = quantize_int8(fp32_path, Path(folder) / f"{name}.onnx", exclude=exclude)
            measured = logit_error(reference, predict_logits(load_onnx(target, threads), batches))
            target.unlink()
            if step is not None:
                step()
            return measured

        full = error([], "int8")
        rows = []
        for layer, names in nodes.items():
            others = [name for name in everything if name not in set(names)]
            only, kept = error(others, f"only{layer}"), error(names, f"kept{layer}")
            rows.append({"layer": layer, "only": only, "kept": kept, "recovery": recovery(
                full["mean_max_abs"], kept["mean_max_abs"])})  # fmt: skip
    return {"examples": batches.num_examples, "int8": full, "layers": rows}
