"""What a training run gives the probe pass, gathered once at ``on_train_begin``: ``ProbeContext``.

The encoder (held weakly), the probe set and its units on the model's device (``probe.probe_units``), the
tokenizer, the device and the training's mixed precision, the label names a forward leaves out, the loss of the
gradient statistics (``GradientLoss``) and the drift reference. Nothing of the Trainer is in it: its arguments and
state, the event writer and the trackers stay with the watched run (``callbacks.watched_run``). The callbacks build
it from the Trainer (``callbacks.probe_setup``) and hand it to the measurements (``probe.measurements``), the riders
and their setup checks. It is frozen: the references the passes take come back in their results
(``PassResult.references``); the drift reference is kept by ``DriftReference.keep``, and the outlier statistics'
top dimensions go into the context the watched run hands the later passes (``outlier_dims``, set once with
``dataclasses.replace``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from bertwatch.heads.gradients.importance import ExampleLoss
from bertwatch.heads.unwrap import select_inputs
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.adapt import config_value, mixed_precision
from bertwatch.probe.probe_set import ProbeSet
from bertwatch.probe.probe_units import ProbeUnit
from bertwatch.probe.reference import DriftReference

__all__ = ["GradientLoss", "ProbeContext"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GradientLoss:
    """The loss the gradient statistics take (at most one of ``loss_fn`` and ``example_loss``; neither = the
    model's own), what it is in words, and why it cannot be taken (``problem``, refused at setup) or None."""

    loss_fn: Callable | None = None
    example_loss: ExampleLoss | None = None
    description: str = "the model's own loss"
    problem: str | None = None

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``heads.gradients.importance``'s functions for this loss."""
        return {"loss_fn": self.loss_fn, "example_loss": self.example_loss}

    def announce(self) -> None:
        """Say once, at setup, which loss the gradient statistics use (``logging``, INFO)."""
        logger.info("bertwatch: the gradient statistics use %s", self.description)


@dataclass(frozen=True, eq=False)
class ProbeContext:
    """One training run as the probe pass sees it (module doc). Built by ``callbacks.probe_setup.build_probe_context``.

    ``probe_source``: where the probe examples come from, in words ("the eval set", "probe_texts", ...);
    ``label_names``: the batch entries a forward leaves out besides the usual label keys (the Trainer's
    ``label_names``); ``outlier_dims``: the activation outliers' top dimensions ``[layers, 3]`` (long, on the
    device) that the run's first pass measuring them took, for the later passes' ``outlier_dim_overlap`` (None
    before it).
    """

    encoder_ref: Callable[[], torch.nn.Module | None]
    probe: ProbeSet
    units: tuple[ProbeUnit, ...]
    probe_source: str
    tokenizer: Any
    device: torch.device
    autocast_dtype: torch.dtype | None
    layers: int
    heads: int
    settings: ProbeSettings
    loss: GradientLoss
    reference: DriftReference
    label_names: tuple[str, ...] = ()
    outlier_dims: torch.Tensor | None = None

    @property
    def model_name(self) -> str:
        """The encoder's folder or Hub name (``config._name_or_path``), else its class name."""
        encoder = self.encoder
        name = config_value(encoder, "_name_or_path", "") or ""
        return str(name) or type(encoder).__name__

    @property
    def encoder(self) -> torch.nn.Module | None:
        """The transformers model inside the Trainer's model (``bertwatch.heads.unwrap``), as trained."""
        return self.encoder_ref()

    def autocast(self) -> contextlib.AbstractContextManager:
        """The training's mixed precision, for every pass bertwatch makes through the model (the statistics are
        taken in float32 afterwards)."""
        return mixed_precision(self.device, self.autocast_dtype)

    def model_inputs(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The entries of a probe batch the encoder is called with (labels left out)."""
        return select_inputs(self.encoder, batch, self.label_names)
