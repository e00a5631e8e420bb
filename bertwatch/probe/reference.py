"""The drift reference of one training run: what every drift statistic compares the trained model's maps with.

By default the model's own maps on the probe set before its first optimiser step; with ``reference_model=`` those
of that model. The probe pass asks for them one unit of rows at a time (``probe.probe_units``), so the device
never holds the whole probe set's maps; the reference is kept in whichever of two ways costs the device less:

* ``MapsReference``: each probe row's maps cut to its real tokens, in float16, in host memory (pinned on a GPU, so
  a unit's maps stream to the device without stalling it). On a GPU it costs no device memory at all; on the CPU,
  where host and device memory are one, it is kept when the maps take fewer bytes than the model.
* ``ModelReference``: a frozen copy of the model as it was (or the reference model itself), whose forward on a unit
  gives that unit's maps again: the model's bytes instead of maps that grow with the square of the texts' length
  (32 MiniLM examples of 512 tokens: 1.2 GB of float16 maps against 90 MB of weights).

A sharded model (every forward a collective) keeps maps. Either is written once to
``<output_dir>/bertwatch/reference.pt`` (``probe_set.ReferenceCache``: the maps, or the copy's weights), so a
resumed run measures drift from the same reference, not from its checkpoint.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from bertwatch.core.warnings import BertWatchWarning, SetupError
from bertwatch.heads.capture import capture, model_shape
from bertwatch.heads.sharding import is_sharded
from bertwatch.heads.unwrap import select_inputs, unwrap
from bertwatch.probe.adapt import config_value, mixed_precision
from bertwatch.probe.probe_set import ProbeSet, ReferenceCache
from bertwatch.probe.probe_units import ProbeUnit

__all__ = ["DriftReference", "MapsReference", "ModelReference", "ReferenceTaking", "check_reference_model"]


def check_reference_model(reference_model: Any) -> None:
    """Refuse, before any step, a ``reference_model`` path or name whose configuration cannot be loaded (the
    weights themselves are loaded by the first probe pass)."""
    if not isinstance(reference_model, (str, os.PathLike)):
        return
    from transformers import AutoConfig

    from bertwatch.heads.loading import resolve_model

    try:
        AutoConfig.from_pretrained(resolve_model(os.fspath(reference_model)))
    except (OSError, ValueError) as err:
        raise SetupError(
            f"reference_model {os.fspath(reference_model)!r} cannot be loaded ({type(err).__name__}: {err}); pass "
            "the folder of a saved model (or a model object), or leave it out to measure drift from the model "
            "before its first step"
        ) from err


class MapsReference:
    """The reference as maps: one ``[layers, heads, n, n]`` float16 tensor per probe row in host memory (pinned
    when ``device`` is a GPU)."""

    kind = "maps"

    def __init__(self, maps: list[Tensor], device: torch.device) -> None:
        self.maps = maps
        self.device = device

    def for_unit(self, unit: ProbeUnit) -> Tensor:
        """The unit's reference maps ``[rows, layers, heads, width, width]`` float16 on the device (zero at pad
        positions), copied row by row from the host without waiting for it."""
        first = self.maps[unit.rows[0]]
        out = torch.zeros(len(unit.rows), *first.shape[:2], unit.width, unit.width, dtype=torch.float16,
                          device=self.device)  # fmt: skip
        for k, (row, where) in enumerate(zip(unit.rows, unit.positions, strict=True)):
            maps = self.maps[row].to(self.device, non_blocking=True)
            n = maps.shape[-1]
            if where is None:
                out[k, :, :, :n, :n] = maps
            else:
                out[k][:, :, where[:, None], where[None, :]] = maps
        return out


class ModelReference:
    """The reference as a model: a frozen copy of the trained model as it was (run under the training's mixed
    precision ``dtype``, as the pass runs the model) or the reference model (``dtype`` None: run as it is); its
    inputs are a unit's but ``label_names``."""

    kind = "model"

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype | None, label_names: Sequence[str]) -> None:
        self.model = model
        self.dtype = dtype
        self.label_names = tuple(label_names)

    def for_unit(self, unit: ProbeUnit) -> Tensor:
        """The unit's reference maps ``[rows, layers, heads, width, width]``: one no-grad forward."""
        device = next(self.model.parameters()).device
        with torch.no_grad(), mixed_precision(device, self.dtype), capture(self.model) as cap:
            self.model(**select_inputs(self.model, unit.inputs, self.label_names))
        return cap.attentions


def _frozen(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` that no optimiser step reaches: no gradients, none kept."""
    frozen = copy.deepcopy(model)
    for parameter in frozen.parameters():
        parameter.requires_grad_(False)
        parameter.grad = None
    return frozen


def _model_bytes(model: torch.nn.Module) -> int:
    """The bytes of ``model``'s parameters and buffers, each storage once (tied weights are shared)."""
    seen: dict[int, int] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _keeps_model(model: torch.nn.Module, probe: ProbeSet, shape: tuple[int, int], device: torch.device) -> bool:
    """Whether the reference is kept as ``model`` rather than as maps (module doc): never for a sharded model or on
    a GPU (host maps cost it nothing), else when the model takes fewer bytes than the probe set's float16 maps."""
    if is_sharded(model) or device.type == "cuda":
        return False
    return _model_bytes(model) < sum(probe.maps_bytes(*shape))


class ReferenceTaking:
    """A reference being taken by one probe pass, unit by unit, for the run of ``model`` on ``probe`` (``shape``:
    layers, heads) on ``device``: the pass's own maps (``source`` None: the model as it is now; a frozen copy runs
    under the training's mixed precision ``dtype``) or those of a reference model (a model object, or a folder
    ``AutoModel`` loads). ``label_names``: the inputs a forward leaves out."""

    def __init__(
        self,
        model: torch.nn.Module,
        probe: ProbeSet,
        shape: tuple[int, int],
        device: torch.device,
        dtype: torch.dtype | None,
        label_names: Sequence[str],
        source: Any = None,
    ) -> None:
        self.model: torch.nn.Module | None = None
        self.device = device
        if source is None:
            self.words = None
            keep = _keeps_model(model, probe, shape, device)
            self.kept = ModelReference(_frozen(model), dtype, label_names) if keep else None
        else:
            self.model = _reference_encoder(source, shape, device)
            self.words = f"the reference model {config_value(self.model, '_name_or_path', '')}"
            keep = _keeps_model(self.model, probe, shape, device)
            self.kept = ModelReference(self.model, None, label_names) if keep else None
            self.running = self.kept or ModelReference(self.model, None, label_names)
        self.maps: list[Tensor | None] = [None] * (0 if keep else probe.size)
        self.pinned = device.type == "cuda"

    def for_unit(self, unit: ProbeUnit, attn: Tensor) -> Tensor:
        """The unit's reference maps (its own ``attn`` ``[rows, layers, heads, width, width]``, or the reference
        model's), each row's kept in host memory as it goes when the reference is kept as maps."""
        if self.model is not None:
            attn = self.running.for_unit(unit)
        if self.kept is None:
            for row, maps in zip(unit.rows, unit.crop(attn), strict=True):
                half = maps.to(torch.float16).contiguous()
                host = torch.empty(half.shape, dtype=torch.float16, pin_memory=self.pinned)
                self.maps[row] = host.copy_(half, non_blocking=True)  # read once the pass's copy has waited
        return attn

    def taken(self) -> MapsReference | ModelReference:
        """The reference this pass took (its host maps complete once the pass has copied its results)."""
        return self.kept if self.kept is not None else MapsReference(list(self.maps), self.device)


def _reference_encoder(source: Any, shape: tuple[int, int], device: torch.device) -> torch.nn.Module:
    """The reference model's encoder on ``device`` (a folder is loaded with ``AutoModel``), checked to have the
    trained model's ``shape`` (layers, heads)."""
    if isinstance(source, (str, os.PathLike)):
        from transformers import AutoModel

        source = AutoModel.from_pretrained(source)
    if model_shape(source) != shape:
        raise SetupError(f"reference_model has {model_shape(source)} (layers, heads); the trained model has {shape}")
    model = unwrap(source).model
    return model.to(device) if next(model.parameters()).device != device else model


class DriftReference:
    """The run's drift reference (``current``: a ``MapsReference`` or a ``ModelReference``, None before it is
    taken), where it came from (``source``, in words) and its cache. ``save`` says whether a reference taken is
    written to the cache (``cache_reference`` on world process zero)."""

    def __init__(
        self, cache: ReferenceCache, probe: ProbeSet, shape: tuple[int, int], device: torch.device, save: bool
    ) -> None:
        self.cache = cache
        self.probe = probe
        self.shape = shape
        self.device = device
        self.save = save
        self.current: MapsReference | ModelReference | None = None
        self.source = "the model before its first optimiser step"

    @property
    def ready(self) -> bool:
        return self.current is not None

    def resume(
        self,
        step: int,
        has_reference_model: bool,
        model: torch.nn.Module,
        dtype: torch.dtype | None,
        label_names: Sequence[str],
    ) -> None:
        """A resumed run: the cached reference of this probe set (maps) or of ``model``'s shape (weights, loaded
        into a copy of ``model``, run under ``dtype`` without ``label_names``), else say that drift starts from
        step ``step`` (unless a reference model will give it)."""
        maps = self.cache.load(self.probe.fingerprint, *self.shape)
        state = None if maps is not None else self.cache.load_model(*self.shape)
        if maps is not None:
            pinned = self.device.type == "cuda"
            self.current = MapsReference([m.pin_memory() if pinned else m for m in maps], self.device)
        elif state is not None:
            frozen = _frozen(model)
            frozen.load_state_dict(state)
            self.current = ModelReference(frozen, dtype, label_names)
        if self.current is not None:
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

    def keep(self, taking: ReferenceTaking) -> None:
        """Make the reference ``taking`` took the run's (after its pass has copied its results, so host maps are
        complete), and cache it: the maps, or the frozen copy's weights (a reference model is not copied: a
        resumed run loads it again)."""
        self.current = taking.taken()
        if taking.words is not None:
            self.source = taking.words
        if not self.save:
            return
        if isinstance(self.current, MapsReference):
            self.cache.save(self.current.maps, self.probe.fingerprint, *self.shape, self.source)
        elif taking.words is None:
            self.cache.save_model(self.current.model.state_dict(), *self.shape, self.source)

    def forget(self) -> None:
        """Free the reference at the end of the run (the cache keeps it)."""
        self.current = None
