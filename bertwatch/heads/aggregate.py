"""Per-example statistics `{name: [batch, layers, heads]}` to `[layers, heads]` grids: one batch (`aggregate`)
or several (`StatsAccumulator`); unweighted means over examples, NaN examples skipped."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

__all__ = ["StatsAccumulator", "aggregate"]


def aggregate(per_example: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """`{name: [batch, layers, heads]}` -> `{name: [layers, heads]}`, unweighted mean skipping NaN examples."""
    return {name: torch.nanmean(value.float(), dim=0) for name, value in per_example.items()}


class StatsAccumulator:
    """Unweighted mean over all examples of several batches (NaN examples skipped); sums kept on CPU in float64."""

    def __init__(self) -> None:
        self._sums: dict[str, Tensor] = {}
        self._counts: dict[str, Tensor] = {}

    def add(self, per_example: Mapping[str, Tensor]) -> None:
        """Add one batch `{name: [batch, layers, heads]}`."""
        for name, value in per_example.items():
            value = value.detach().to("cpu", torch.float64)
            finite = ~torch.isnan(value)
            total = torch.where(finite, value, 0.0).sum(0)
            count = finite.sum(0)
            if name in self._sums:
                self._sums[name] = self._sums[name] + total
                self._counts[name] = self._counts[name] + count
            else:
                self._sums[name], self._counts[name] = total, count

    def result(self) -> dict[str, Tensor]:
        """`{name: [layers, heads]}` float32 on CPU, NaN where no example defined the statistic."""
        return {
            name: torch.where(self._counts[name] > 0, total / self._counts[name].clamp_min(1), math.nan).float()
            for name, total in self._sums.items()
        }
