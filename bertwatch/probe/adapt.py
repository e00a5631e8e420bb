"""The one module that adapts to what differs between tokenizer classes, model configs and devices.

An attribute that not every tokenizer or config has is read here, with its default, by a named function
(:func:`tokenizer_value`, :func:`config_value`), and the training's mixed precision is applied to bertwatch's own
passes through the model only where autocast takes it (:func:`autocast_dtype`, :func:`mixed_precision`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

__all__ = ["autocast_dtype", "config_value", "mixed_precision", "tokenizer_value"]


def autocast_dtype(args: Any) -> torch.dtype | None:
    """The training's mixed-precision dtype from its ``TrainingArguments`` (``bf16``, ``fp16``), or None."""
    if args.bf16:
        return torch.bfloat16
    if args.fp16:
        return torch.float16
    return None


def mixed_precision(device: Any, dtype: Any) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type (no-op for None or where autocast refuses it): the
    training's mixed precision (:func:`autocast_dtype`) for a pass bertwatch makes through a model."""
    if dtype is None:
        return contextlib.nullcontext()
    try:
        return torch.autocast(device.type, dtype=dtype)
    except (RuntimeError, ValueError):
        return contextlib.nullcontext()


def tokenizer_value(tokenizer: Any, name: str, default: Any = None) -> Any:
    """A tokenizer attribute that not every tokenizer class has (``pad_token_id``, ``padding_side``,
    ``mask_token_id``, ``all_special_ids``, ``model_max_length``, ``is_fast``: the tokenizer backends differ), else
    ``default``."""
    return getattr(tokenizer, name, default)  # slow, fast and custom tokenizer classes each lack some of these


def config_value(model: Any, name: str, default: Any = None) -> Any:
    """A model's config attribute that differs between architectures (``max_position_embeddings``,
    ``problem_type``, ``_name_or_path``), else ``default`` (also for a model without a config)."""
    return getattr(getattr(model, "config", None), name, default)  # a bare nn.Module has no config; configs differ
