"""A fine-tuned sequence classifier as ONNX files: the float32 export (``torch.onnx.export``, dynamic batch and
sequence axes) and its INT8 dynamic quantization (``onnxruntime.quantization.quantize_dynamic``, weights INT8,
activations quantized per tensor at run time).

The export uses torch's TorchScript exporter (``dynamo=False``), which needs only ``onnx``. It traces one padded
batch; every branch transformers takes on Python values (the attention mask's padding) is then fixed, so
:func:`export_difference` checks the file against torch on other batches. onnx and onnxruntime are imported inside
the functions, so importing this module costs nothing when they are missing.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_OPSET",
    "INSTALL_HINT",
    "check_classifier",
    "export_difference",
    "export_onnx",
    "input_names",
    "quantize_int8",
    "require_onnx",
]

#: What to run when onnx or onnxruntime is missing.
INSTALL_HINT = "pip install 'bertwatch[ship]'"
#: The ONNX opset of the export (17 has LayerNormalization as one operator).
DEFAULT_OPSET = 17
#: The model inputs the export takes, when the tokenizer gives them (the graph's order is the forward's).
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: The trace batch: two rows of different lengths, so the traced graph handles padding.
_TRACE_TEXTS = ("the quick brown fox jumps over the lazy dog", "a dog")


def require_onnx() -> Any:
    """The ``onnxruntime`` module, after checking that ``onnx`` imports too.

    Returns:
        The ``onnxruntime`` module.

    Raises:
        RuntimeError: one of them is not installed; the message says ``pip install 'bertwatch[ship]'``.
    """
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as error:
        raise RuntimeError(
            f"ONNX export needs onnx and onnxruntime ({error.name} is missing): {INSTALL_HINT}"
        ) from error
    return onnxruntime


def check_classifier(model: Any) -> None:
    """Refuse anything but a single-label sequence classifier (the metric compares class predictions).

    Raises:
        ValueError: a bare encoder, another task head, a regression or multi-label head; the message says what to pass.
    """
    name = type(model).__name__
    if not name.endswith("ForSequenceClassification"):
        raise ValueError(
            f"bertwatch ship measures sequence classifiers; this checkpoint is a {name}. Pass a checkpoint "
            "fine-tuned with AutoModelForSequenceClassification (its config.json names a ...ForSequenceClassification)"
        )
    config = model.config
    kind = config.problem_type or ("regression" if int(config.num_labels) == 1 else None)
    if kind in ("regression", "multi_label_classification"):
        raise ValueError(
            f"bertwatch ship compares class predictions; this classifier's problem type is {kind}. "
            "Pass a single-label classifier"
        )


def input_names(model: Any, encoded: Mapping[str, Any]) -> list[str]:
    """The model inputs the export feeds, in the order of ``model.forward``'s parameters (the traced graph's
    order): ``input_ids``, ``attention_mask`` and ``token_type_ids`` where the tokenizer gives them."""
    parameters = list(inspect.signature(model.forward).parameters)
    present = [name for name in _INPUTS if name in encoded and name in parameters]
    return sorted(present, key=parameters.index)


def export_onnx(
    model: Any, tokenizer: Any, path: str | Path, *, opset: int = DEFAULT_OPSET, texts: Sequence[str] = _TRACE_TEXTS
) -> Path:
    """Export a sequence classifier to one ONNX file that ONNX Runtime runs without torch.

    Args:
        model: a transformers ``...ForSequenceClassification`` (a pruned one from
            ``bertwatch.ablation.physical.prune_model`` too); moved to the CPU, left in eval mode.
        tokenizer: its tokenizer; it builds the trace batch and decides which inputs the graph takes.
        path: the ``.onnx`` file to write (its folder is created).
        opset: the ONNX opset, at least 17.
        texts: the trace batch (rows of different lengths, so the graph sees padding).

    Returns:
        The file. Its inputs are ``input_ids``, ``attention_mask`` and (when the tokenizer gives them)
        ``token_type_ids``, int64 ``[batch, sequence]`` with both axes dynamic; its output is ``logits``
        ``[batch, labels]``.

    Raises:
        ValueError: not a single-label sequence classifier, or an opset under 17.
        RuntimeError: onnx or onnxruntime is missing (the message says what to install).

    Example:
        >>> export_onnx(model, tokenizer, "out/model.onnx")
    """
    import torch

    require_onnx()
    check_classifier(model)
    if opset < DEFAULT_OPSET:
        raise ValueError(f"the export needs opset {DEFAULT_OPSET} or later, got {opset}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.cpu().eval()
    encoded = tokenizer(list(texts), padding=True, return_tensors="pt")
    names = input_names(model, encoded)
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    previous = model.config._attn_implementation
    swapped = previous not in ("sdpa", "eager")
    if swapped:  # bertwatch's capture, flash attention: a plain implementation for the graph
        model.set_attn_implementation("sdpa")
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings; export_difference checks the result instead
            torch.onnx.export(
                model,
                (),
                str(path),
                kwargs={name: encoded[name] for name in names},
                input_names=names,
                output_names=["logits"],
                dynamic_axes={**axes, "logits": {0: "batch"}},
                opset_version=opset,
                dynamo=False,
            )
    finally:
        if swapped and previous is not None:
            model.set_attn_implementation(previous)
    return path


def quantize_int8(source: str | Path, target: str | Path, exclude: Sequence[str] = ()) -> Path:
    """INT8 dynamic quantization of an ONNX file: the weights of MatMul (and Gemm) stored as int8, activations
    quantized per tensor at run time (``onnxruntime.quantization.quantize_dynamic``, ``QuantType.QInt8``).

    Args:
        source: a float32 ONNX file (from :func:`export_onnx`).
        target: the file to write.
        exclude: names of nodes left in float32 (``nodes_to_exclude``; ``ship.layer_error.layer_nodes`` gives a
            layer's).

    Returns:
        ``target``.

    Raises:
        RuntimeError: onnx or onnxruntime is missing. FileNotFoundError: no ``source``.

    Example:
        >>> quantize_int8("out/model.onnx", "out/model.int8.onnx")
    """
    require_onnx()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if not Path(source).is_file():
        raise FileNotFoundError(f"{source} does not exist: export the model first")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to run shape inference first; the measured result is what counts
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude))
    finally:
        root.setLevel(level)
    return Path(target)


def export_difference(model: Any, onnx_logits: np.ndarray, encoded: Mapping[str, Any]) -> dict[str, float]:
    """How far an exported file's logits are from torch's on one batch.

    Args:
        model: the torch model that was exported.
        onnx_logits: the file's logits on ``encoded`` (ONNX Runtime).
        encoded: the batch, as numpy arrays (or tensors) by input name.

    Returns:
        ``{"max_abs_diff", "max_abs_logit", "rows"}``: the largest absolute difference, the largest torch logit
        in absolute value (the scale the difference reads against) and the number of rows compared.
    """
    import torch

    with torch.no_grad():
        feed = {name: torch.as_tensor(np.asarray(value)) for name, value in encoded.items()}
        want = model.cpu().eval()(**feed).logits.float().numpy()
    got = np.asarray(onnx_logits, dtype=np.float32)
    return {
        "max_abs_diff": float(np.abs(got - want).max()),
        "max_abs_logit": float(np.abs(want).max()),
        "rows": int(want.shape[0]),
    }
