"""The drift reference of one training run: the maps every drift statistic compares the trained model's with.

By default they are the model's own maps on the probe set before its first optimiser step, taken by the first
probe pass; with ``reference_model=`` those of that model. Either way they are kept cropped to each example's
real tokens in float16 and cached in ``<output_dir>/bertwatch/reference.pt`` (``probe_set.ReferenceCache``), so
a resumed run measures drift from the same maps, not from its checkpoint.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bertwatch.callbacks._context import config_value
from bertwatch.callbacks._safe import BertWatchWarning, SetupError
from bertwatch.callbacks.probe_set import ProbeSet, ReferenceCache, crop_maps
from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.unwrap import select_inputs, unwrap

__all__ = ["DriftReference", "check_reference_model"]


def check_reference_model(reference_model: Any) -> None:
    """Refuse, before any step, a ``reference_model`` path or name whose configuration cannot be loaded (the
    weights themselves are loaded by the first probe pass)."""
    if not isinstance(reference_model, (str, os.PathLike)):
        return
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(reference_model)
    except (OSError, ValueError) as err:
        raise SetupError(
            f"reference_model {os.fspath(reference_model)!r} cannot be loaded ({type(err).__name__}: {err}); pass "
            "the folder of a saved model (or a model object), or leave it out to measure drift from the model "
            "before its first step"
        ) from err


class DriftReference:
    """The reference maps of one run (``maps``: one ``[layers, heads, n, n]`` float16 tensor per probe row, or
    None before they are taken), where they came from (``source``, in words) and their cache.

    ``save`` says whether maps taken are written to the cache (``cache_reference`` on world process zero).
    """

    def __init__(
        self, cache: ReferenceCache, probe: ProbeSet, shape: tuple[int, int], device: torch.device, save: bool
    ) -> None:
        self.cache = cache
        self.probe = probe
        self.shape = shape
        self.device = device
        self.save = save
        self.maps: list[Tensor] | None = None
        self.source = "the model before its first optimiser step"

    @property
    def ready(self) -> bool:
        return self.maps is not None

    def resume(self, step: int, has_reference_model: bool) -> None:
        """A resumed run: load the cached maps of this probe set, else say that drift starts from step ``step``
        (unless a reference model will give them)."""
        maps = self.cache.load(self.probe.fingerprint, *self.shape)
        if maps is not None:
            self.maps = [m.to(self.device) for m in maps]
            self.source = f"the cache {self.cache.path}"
        elif not has_reference_model:
            self.source = f"the model resumed at step {step}"

    def warn_resumed(self, step: int) -> None:
        """One warning: drift of a resumed run without a cache is measured from the checkpoint at ``step``."""
        warnings.warn(
            f"bertwatch: resuming without a reference cache for this probe set at {self.cache.path}; drift is "
            f"measured from the model at step {step}. Pass reference_model= to measure it from the pretrained "
            "model.",
            BertWatchWarning,
            stacklevel=2,
        )

    def keep(self, maps: list[Tensor]) -> None:
        """Make ``maps`` (this run's first pass) the reference, and cache them."""
        self.maps = maps
        if self.save:
            self.cache.save(maps, self.probe.fingerprint, *self.shape, self.source)

    def forget(self) -> None:
        """Free the maps at the end of the run (the cache keeps them)."""
        self.maps = None

    def batch(self, k: int, maps: Sequence[Tensor] | None = None) -> list[Tensor]:
        """Batch k's rows of the reference (or of ``maps``, a reference being built), cropped, float16."""
        maps = self.maps if maps is None else maps
        start, size = self.probe.first_row(k), self.probe.roles[k].real.shape[0]
        return list(maps[start : start + size])

    def from_model(self, reference_model: Any) -> None:
        """Take the named reference model's maps on the probe set (a path is loaded with ``AutoModel``)."""
        if isinstance(reference_model, (str, os.PathLike)):
            from transformers import AutoModel

            reference_model = AutoModel.from_pretrained(reference_model).to(self.device)
        if model_shape(reference_model) != self.shape:
            raise SetupError(
                f"reference_model has {model_shape(reference_model)} (layers, heads); the trained model has "
                f"{self.shape}"
            )
        reference_model = unwrap(reference_model).model
        device = next(reference_model.parameters()).device
        maps: list[Tensor] = []
        for k, cpu_batch in enumerate(self.probe.batches):
            batch = {key: v.to(device) for key, v in select_inputs(reference_model, cpu_batch).items()}
            with torch.no_grad(), capture(reference_model) as cap:
                reference_model(**batch)
            maps.extend(m.to(self.device, torch.float16) for m in crop_maps(cap.attentions, self.probe.roles[k].real))
        self.source = f"the reference model {config_value(reference_model, '_name_or_path', '')}"
        self.keep(maps)
