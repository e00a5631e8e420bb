"""The array conversions and checks every TensorBoard summary builder shares (torch-free)."""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

__all__ = ["check_name", "tensor_value", "to_numpy"]


def to_numpy(x: Any, dtype=np.float32) -> np.ndarray:
    """An array of ``dtype`` from a numpy array, a nested sequence or a torch tensor (duck-typed)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if hasattr(x, "float"):
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def check_name(name: str, what: str) -> str:
    """``name`` when it can be one part of a tag; ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(name, str) or not name or name != name.strip() or "/" in name:
        raise ValueError(f"{what} must be a non-empty string without '/' or surrounding spaces, got {name!r}")
    return name


def tensor_value(summary: summary_pb2.Summary, tag: str, metadata, array: np.ndarray) -> None:
    """Append ``array`` to ``summary`` as the tensor value ``tag`` with its ``SummaryMetadata``."""
    summary.value.add(tag=tag, metadata=metadata, tensor=tensor_util.make_tensor_proto(array))
