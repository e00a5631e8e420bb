"""The training loss of every step for the run's verdict, whatever the Trainer's ``logging_steps``: a forward hook
on the model keeps the ``loss`` of each training forward (the model in training mode, gradients on: the Trainer's
own forwards, never a probe pass or an evaluation), as a detached tensor on the model's device; at the end of each
step the step's mean joins a window of ``every`` steps (a log, as a Trainer logging every ``every`` steps would give),
read to the host once a window is full, with the learning rate then. The Trainer logs every 500 steps by default,
so a run of a few hundred steps would give the verdict no training loss at all.

The hook reads what the model returns and changes nothing; an output without a scalar ``loss`` (the Trainer
computes its own: label smoothing, ``compute_loss_func``, a loss without labels in the batch) leaves the tap silent
and the verdict reads the Trainer's logs instead.

Example:
    >>> import torch
    >>> class Model(torch.nn.Module):
    ...     def forward(self, x):
    ...         return {"loss": (x**2).mean()}
    >>> model = Model()
    >>> tap = LossTap(model, every=2)
    >>> for step in (1, 2):
    ...     _ = model(torch.full((3,), float(step)))
    ...     full = tap.end_step(step, 1e-4)
    >>> tap.read()
    [(2, 2.5, 0.0001)]
    >>> tap.close()
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["LossTap", "every_for", "learning_rate"]

#: The most loss windows a run's verdict reads: one window is ``max_steps / WINDOWS`` steps.
WINDOWS = 200


def every_for(max_steps: int | None) -> int:
    """The steps a loss window holds in a run of ``max_steps``: at most ``WINDOWS`` windows (1 when unknown)."""
    return max(1, math.ceil(max_steps / WINDOWS)) if max_steps else 1


def learning_rate(scheduler: Any, optimizer: Any) -> float | None:
    """The learning rate of the first parameter group now: the scheduler's last, else the optimizer's."""
    try:
        if scheduler is not None:
            return float(scheduler.get_last_lr()[0])
        if optimizer is not None:
            return float(optimizer.param_groups[0]["lr"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    return None


def _loss_of(output: Any) -> torch.Tensor | None:
    # a ModelOutput is a Mapping; a plain tuple or tensor output has no loss attribute
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.is_floating_point():
        return loss.detach()
    return None


class LossTap:
    """The model's training losses, a window of ``every`` steps at a time (module doc). ``seen``: whether any
    training forward gave a loss."""

    def __init__(self, model: torch.nn.Module, every: int = 1) -> None:
        self.every = max(1, int(every))
        self.seen = False
        self._forwards: list[torch.Tensor] = []  # this step's training losses
        self._steps: list[torch.Tensor] = []  # this window's step means
        self._ready: list[tuple[int, torch.Tensor, float | None]] = []  # windows not yet read
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return
        try:
            loss = _loss_of(output)
        except Exception:  # an output whose loss cannot be read: the tap stays silent
            return
        if loss is not None:
            self._forwards.append(loss)

    def end_step(self, step: int, rate: float | None) -> bool:
        """Close ``step`` (the mean of its training forwards' losses; nothing without one); whether a window is now
        full and waiting to be read."""
        if self._forwards:
            self.seen = True
            self._steps.append(torch.stack(self._forwards).float().mean())
            self._forwards = []
        if len(self._steps) >= self.every:
            self._ready.append((int(step), torch.stack(self._steps).mean(), rate))
            self._steps = []
        return bool(self._ready)

    def read(self) -> list[tuple[int, float, float | None]]:
        """The full windows not read yet, oldest first, as ``(step, mean loss, learning rate)``: one copy to the
        host for them all."""
        if not self._ready:
            return []
        values = torch.stack([loss for _, loss, _ in self._ready]).cpu().tolist()
        out = [(step, value, rate) for (step, _, rate), value in zip(self._ready, values)]
        self._ready = []
        return out

    def close(self) -> None:
        """Remove the hook and drop what it held."""
        self._handle.remove()
        self._forwards, self._steps, self._ready = [], [], []
