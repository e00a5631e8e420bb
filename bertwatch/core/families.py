"""A model's family name, the one spelling every per-family table of bertwatch is keyed by (torch-free).

transformers spells some ``model_type`` values with underscores and others with dashes across versions
(``"deberta_v2"`` / ``"deberta-v2"``); bertwatch's tables use dashes. ``heads/pruned_modeling.py`` keeps its own
``family`` because it is copied into pruned model folders and may import nothing of bertwatch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["model_family"]


def model_family(model_or_config: Any, default: str = "") -> str:
    """``model_type`` of a model's ``config`` (or of a config itself) with dashes for underscores; ``default`` when
    there is none.

    Example:
        >>> from types import SimpleNamespace
        >>> model_family(SimpleNamespace(model_type="deberta_v2"))
        'deberta-v2'
    """
    config = getattr(model_or_config, "config", model_or_config)  # a config itself, or a DDP wrapper, has no config
    # a module not from transformers (or a DDP wrapper) has no model_type: the default
    return str(getattr(config, "model_type", default)).replace("_", "-")
