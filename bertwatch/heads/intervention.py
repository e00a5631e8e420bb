"""Per-head changes applied inside attention while :func:`bertwatch.heads.capture.capture` is open: Kovaleva's
uniform attention, Michel's zeroed context, any scale."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bertwatch.core.modes import check_mode

__all__ = ["Intervention"]


@dataclass(frozen=True)
class Intervention:
    """Per-head changes applied inside attention.

    ``uniform``: bool ``[layers, heads]`` or ``[batch, layers, heads]``; a marked head's probabilities become
    1/n over the keys it may attend to (Kovaleva et al.'s disabling, after softmax, before dropout).
    ``scale``: float, same shapes; multiplies each head's context vector (0 is Michel et al.'s zeroing).
    """

    uniform: torch.Tensor | None = None
    scale: torch.Tensor | None = None

    @classmethod
    def zero(cls, mask: torch.Tensor) -> Intervention:
        """Zero the context of the heads where ``mask`` is true."""
        mask = torch.as_tensor(mask, dtype=torch.bool)
        return cls(scale=(~mask).to(torch.float32))

    @classmethod
    def uniform_heads(cls, mask: torch.Tensor) -> Intervention:
        """Make the heads where ``mask`` is true attend uniformly to every key they may see."""
        return cls(uniform=torch.as_tensor(mask, dtype=torch.bool))

    @classmethod
    def disable(cls, mask: torch.Tensor, mode: str) -> Intervention:
        """Disable the marked heads with ``mode`` "uniform" (Kovaleva) or "zero" (Michel)."""
        return cls.uniform_heads(mask) if check_mode(mode) == "uniform" else cls.zero(mask)
