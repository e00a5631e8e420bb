"""Disable heads and layers after training and measure, with bootstrap intervals, what each is worth.

The flow: ``inputs`` (examples to padded batches) → ``configs`` (head masks) → ``runner`` (stacked configurations,
lower layers reused) → ``evaluate`` (shards, ``store`` for resumption and the process split) → ``scoring`` and
``bootstrap`` → ``pruning`` → ``sweep.ablate`` (the whole sweep, an ``AblationResult``).

``import bertwatch.ablation`` does not import torch; the names below load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertwatch.core.lazy import lazy_names

_LAZY = {
    "MODES": "bertwatch.core.modes",
    "HeadMask": "bertwatch.ablation.configs",
    "sweep_configs": "bertwatch.ablation.configs",
    "pruning_masks": "bertwatch.ablation.configs",
    "ablate": "bertwatch.ablation.sweep",
    "AblationSettings": "bertwatch.ablation.settings",
    "AblationResult": "bertwatch.report.result",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.ablation.configs import HeadMask, pruning_masks, sweep_configs
    from bertwatch.ablation.settings import AblationSettings
    from bertwatch.ablation.sweep import ablate
    from bertwatch.report.result import AblationResult


__getattr__ = lazy_names(__name__, _LAZY, globals())
