"""Activation outliers per layer: how large the feed-forward output and the residual stream get, how heavy their
tails are, which dimensions and which tokens hold the outliers (Bondarenko, Nagel and Blankevoort 2023: heads that
learn to do nothing park their attention on delimiters, and the feed-forward output grows the outliers that break
per-tensor INT8 quantization).

For layer l, over the real tokens of the examples seen (every component of every real token's vector ``x``):

* ``inf_norm``: max |x|;
* ``kurtosis``: E[(x − μ)⁴] / E[(x − μ)²]² (Pearson's, 3 for a Gaussian), all components pooled;
* ``outlier_share``: the share of components with |x| ≥ ``OUTLIER_THRESHOLD`` (6, the magnitude LLM.int8(),
  Dettmers et al. 2022, calls an outlier);
* ``delimiter_share``: of the outliers' summed |x|, the share on [CLS], [SEP] and "."/"," tokens (NaN without
  outliers);
* ``top_dims``: the three dimensions with the largest max |x|, largest first;
* ``role_inf_norms``: max |x| over the components of the [CLS], [SEP], "."/"," and other ("content") real tokens
  (NaN for a role without tokens).

The feed-forward output is the second linear map of each layer's feed-forward block, before the residual sum and
its LayerNorm; the residual stream is the layer's output (``hidden_states[l + 1]``). Sums are float64.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from bertwatch.core.families import model_family
from bertwatch.core.stat_names import OUTLIER_FFN_NAMES, OUTLIER_NAMES
from bertwatch.heads.capture import model_shape
from bertwatch.heads.roles import TokenRoles, token_roles

__all__ = [
    "ActivationCall",
    "OUTLIER_NAMES",
    "OUTLIER_THRESHOLD",
    "ROLES",
    "OutlierAccumulator",
    "OutlierMoments",
    "RecordedActivations",
    "activation_outliers",
    "ffn_outputs",
    "layer_modules",
    "outlier_grids",
    "record_activations",
]

OUTLIER_THRESHOLD = 6.0
#: The token roles of ``role_inf_norms``, in order: "content" is every other real token.
ROLES: tuple[str, ...] = ("cls", "sep", "punct", "content")
#: family -> each layer's feed-forward output linear map, under the base model's layer list.
_FFN: dict[str, tuple[str, str]] = {
    **{f: ("encoder.layer", "output.dense") for f in ("bert", "roberta", "xlm-roberta", "camembert", "electra")},
    "distilbert": ("transformer.layer", "ffn.lin2"),
    "deberta-v2": ("encoder.layer", "output.dense"),
    "mpnet": ("encoder.layer", "output.dense"),
}


class OutlierMoments:
    """The running sums of one layer's activations (``add`` batch by batch), and the statistics (``result``)."""

    def __init__(self, threshold: float = OUTLIER_THRESHOLD) -> None:
        self.threshold = threshold
        self.count = 0
        self.sums = torch.zeros(4, dtype=torch.float64)  # Σx, Σx², Σx³, Σx⁴ about zero
        self.dim_max: Tensor | None = None
        self.outliers = 0
        self.mass = torch.zeros(2, dtype=torch.float64)  # outliers' Σ|x|: all, on delimiters
        self.role_max = torch.full((len(ROLES),), math.nan, dtype=torch.float64)  # max |x| per role (ROLES)

    def add(self, x: Tensor, real: Tensor, delimiters: Tensor, roles: TokenRoles | None = None) -> None:
        """``x`` ``[rows, T, d]``; ``real`` and ``delimiters`` ``[rows, T]`` (bool); with ``roles`` (the same rows)
        also each role's max |x| (``ROLES``). The sums run in float64 on ``x``'s device (on the CPU for a device
        without float64, such as MPS); the running totals stay on the CPU."""
        x = x.detach()
        if x.device.type == "mps":
            x, real, delimiters = x.cpu(), real.cpu(), delimiters.cpu()
            roles = None if roles is None else roles.to("cpu")
        real = real.to(x.device).bool()
        values = x.double()[real]  # [tokens, d]
        on_delimiter = delimiters.to(x.device).bool()[real]  # [tokens]
        if roles is not None:
            self._add_roles(values, roles.to(x.device), real)
        self.count += values.numel()
        square = values * values
        sums = torch.stack([values.sum(), square.sum(), (square * values).sum(), (square * square).sum()])
        self.sums += sums.cpu()
        magnitude = values.abs()
        dim_max = magnitude.amax(0).cpu() if len(magnitude) else torch.zeros(x.shape[-1], dtype=torch.float64)
        self.dim_max = dim_max if self.dim_max is None else torch.maximum(self.dim_max, dim_max)
        big = magnitude >= self.threshold
        self.outliers += int(big.sum())
        self.mass += torch.stack([(magnitude * big).sum(), (magnitude * big)[on_delimiter].sum()]).cpu()

    def _add_roles(self, values: Tensor, roles: TokenRoles, real: Tensor) -> None:
        """Each role's max |x| over the real tokens ``values`` ``[tokens, d]`` (NaN-aware running max)."""
        cls, sep, punct = (mask.bool()[real] for mask in (roles.cls, roles.sep, roles.punct))
        token_max = values.abs().amax(-1) if values.shape[-1] else values.new_zeros(len(values))
        for k, mask in enumerate((cls, sep, punct, ~(cls | sep | punct))):
            if bool(mask.any()):
                now = token_max[mask].max().cpu()
                self.role_max[k] = now if math.isnan(float(self.role_max[k])) else torch.maximum(self.role_max[k], now)

    def result(self) -> dict[str, Any]:
        """``inf_norm``, ``kurtosis``, ``outlier_share``, ``delimiter_share``, ``top_dims`` (module doc)."""
        if self.count == 0 or self.dim_max is None:
            return {"inf_norm": math.nan, "kurtosis": math.nan, "outlier_share": math.nan,
                    "delimiter_share": math.nan, "top_dims": [],
                    "role_inf_norms": dict.fromkeys(ROLES, math.nan)}  # fmt: skip
        n = self.count
        mean = float(self.sums[0]) / n
        m2 = float(self.sums[1]) / n - mean**2
        m4 = (
            float(self.sums[3]) - 4 * mean * float(self.sums[2]) + 6 * mean**2 * float(self.sums[1])
        ) / n - 3 * mean**4
        total, on_delimiters = (float(v) for v in self.mass)
        return {
            "inf_norm": float(self.dim_max.max()),
            "kurtosis": m4 / m2**2 if m2 > 0 else math.nan,
            "outlier_share": self.outliers / n,
            "delimiter_share": on_delimiters / total if total > 0 else math.nan,
            "top_dims": [int(d) for d in torch.argsort(self.dim_max, descending=True, stable=True)[:3]],
            "role_inf_norms": {role: float(v) for role, v in zip(ROLES, self.role_max, strict=True)},
        }


def ffn_outputs(model: nn.Module) -> list[nn.Module] | None:
    """Each layer's feed-forward output linear map, in order, or None for a family bertwatch does not know."""
    paths = _FFN.get(model_family(model.config))
    if paths is None:
        return None
    base = getattr(model, "base_model", model)
    try:
        found = [layer.get_submodule(paths[1]) for layer in base.get_submodule(paths[0])]
    except AttributeError:
        return None
    return found if len(found) == model_shape(model)[0] else None


@torch.no_grad()
def activation_outliers(
    model: nn.Module, batches: Iterable[tuple[Mapping[str, Tensor], TokenRoles]]
) -> dict[str, list[dict[str, Any]]]:
    """The outlier statistics (module doc) of every layer over ``batches`` (model inputs and their token roles).

    Returns:
        ``{"ffn": [layer 0, ...], "residual": [...]}``, one ``OutlierMoments.result()`` per layer; ``"ffn"`` is
        absent for a family whose feed-forward output bertwatch does not know.
    """
    layers, _ = model_shape(model)
    ffn = ffn_outputs(model)
    moments = {"residual": [OutlierMoments() for _ in range(layers)]}
    if ffn is not None:
        moments["ffn"] = [OutlierMoments() for _ in range(layers)]
    current: dict[str, Any] = {}

    def hook(layer: int):
        def record(module, args, output):
            moments["ffn"][layer].add(output, current["real"], current["delimiters"])

        return record

    handles = [module.register_forward_hook(hook(layer)) for layer, module in enumerate(ffn or [])]
    try:
        for inputs, roles in batches:
            current["real"], current["delimiters"] = roles.real, roles.cls | roles.sep | roles.punct
            hidden = model(**inputs, output_hidden_states=True).hidden_states
            for layer in range(layers):
                moments["residual"][layer].add(hidden[layer + 1], roles.real, current["delimiters"])
    finally:
        for handle in handles:
            handle.remove()
    return {name: [m.result() for m in per_layer] for name, per_layer in moments.items()}


def outlier_grids(
    ffn: Sequence[OutlierMoments] | None,
    residual: Sequence[OutlierMoments] | None,
    reference_dims: Sequence[Sequence[int]] | None,
    names: Collection[str] = OUTLIER_NAMES,
) -> tuple[dict[str, Tensor], list[list[int]]]:
    """The outlier statistics ``names`` (``core.stat_names.OUTLIER_NAMES``) of one probe pass as ``[layers, 1]``
    float64 grids, from each layer's moments of the feed-forward output (``ffn``) and of the residual stream
    (``residual``), None where a stream was not measured (its names are left out); and each layer's top dimensions
    of the residual stream (``top_dims``; empty without it).

    ``outlier_dim_overlap`` is the share of a layer's top-3 dimensions also in ``reference_dims``' top-3 of that
    layer (NaN without a reference); ``outlier_dim`` the top one (NaN without tokens).
    """
    results = {where: [m.result() for m in found] for where, found in (("ffn", ffn), ("residual", residual)) if found}
    columns: dict[str, list[float]] = {}
    for where in results:
        columns[f"{where}_inf_norm"] = [r["inf_norm"] for r in results[where]]
        columns[f"{where}_kurtosis"] = [r["kurtosis"] for r in results[where]]
    if "residual" not in results:
        return {n: torch.tensor(columns[n], dtype=torch.float64)[:, None] for n in names if n in columns}, []
    res = results["residual"]
    dims = [r["top_dims"] for r in res]
    columns["outlier_share"] = [r["outlier_share"] for r in res]
    columns["delimiter_share"] = [r["delimiter_share"] for r in res]
    columns["outlier_dim"] = [float(d[0]) if d else math.nan for d in dims]
    columns["outlier_dim_overlap"] = [
        len(set(now) & set(reference_dims[layer])) / len(now) if reference_dims is not None and now else math.nan
        for layer, now in enumerate(dims)
    ]
    for role in ROLES:
        columns[f"{role}_inf_norm"] = [r["role_inf_norms"][role] for r in res]
    grids = {n: torch.tensor(columns[n], dtype=torch.float64)[:, None] for n in OUTLIER_NAMES if n in columns}
    return {n: grids[n] for n in names if n in grids}, dims


def layer_modules(model: nn.Module) -> list[nn.Module] | None:
    """Each encoder layer, in order (their outputs are the residual stream, ``hidden_states[l + 1]``), or None for a
    family bertwatch does not know."""
    paths = _FFN.get(model_family(model.config))
    if paths is None:
        return None
    try:
        found = list(getattr(model, "base_model", model).get_submodule(paths[0]))
    except AttributeError:
        return None
    return found if len(found) == model_shape(model)[0] else None


@dataclass
class ActivationCall:
    """One forward call's token ids and mask (``inputs``, 2-D ``[rows, T]``: multiple-choice rows flattened) and each
    layer's feed-forward output and output ``[rows, T, d]`` (detached)."""

    inputs: dict[str, Tensor]
    ffn: list[Tensor] = field(default_factory=list)
    layers: list[Tensor] = field(default_factory=list)


class RecordedActivations:
    """The activations of every forward call inside :func:`record_activations` (``calls``), for ``num_layers``
    layers; ``complete`` when each call gave its token ids and every layer's two tensors."""

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.calls: list[ActivationCall] = []

    @property
    def complete(self) -> bool:
        n = self.num_layers
        return bool(self.calls) and all(
            "input_ids" in c.inputs and len(c.ffn) == n and len(c.layers) == n for c in self.calls
        )

    @property
    def rows(self) -> int:
        """The rows the calls ran, all together."""
        return sum(int(c.inputs["input_ids"].shape[0]) for c in self.calls if "input_ids" in c.inputs)


def _call_inputs(kwargs: Mapping[str, Any]) -> dict[str, Tensor]:
    """The 2-D token ids, attention mask and segment ids of a forward call's keyword arguments (what it has)."""
    ids = kwargs.get("input_ids")
    if not isinstance(ids, Tensor):
        return {}
    length = ids.shape[-1]
    out = {"input_ids": ids.detach().reshape(-1, length)}
    for key in ("attention_mask", "token_type_ids"):
        value = kwargs.get(key)
        if isinstance(value, Tensor) and value.shape[-1] == length and value.dim() == ids.dim():
            out[key] = value.detach().reshape(-1, length)
    return out


@contextlib.contextmanager
def record_activations(model: nn.Module) -> Iterator[RecordedActivations | None]:
    """Record, for every forward call of ``model`` inside the block (the gradient pass may call it once per length
    group or per example), its token ids and each layer's feed-forward output and output (:class:`ActivationCall`);
    None for a family whose layers bertwatch does not know. The hooks are removed on exit, also on error."""
    ffn, layers = ffn_outputs(model), layer_modules(model)
    if ffn is None or layers is None:
        yield None
        return
    recorded = RecordedActivations(len(layers))

    def start(_module, _args, kwargs):
        recorded.calls.append(ActivationCall(_call_inputs(kwargs)))

    def keep(where: str):
        def hook(_module, _args, out):
            if recorded.calls:
                tensor = out[0] if isinstance(out, tuple) else out
                getattr(recorded.calls[-1], where).append(tensor.detach())

        return hook

    handles = [model.register_forward_pre_hook(start, with_kwargs=True)]
    handles += [module.register_forward_hook(keep("ffn")) for module in ffn]
    handles += [module.register_forward_hook(keep("layers")) for module in layers]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


class OutlierAccumulator:
    """One probe pass's outlier moments of the statistics ``names`` (``OUTLIER_NAMES``) over ``layers`` layers: from
    recorded forward calls (:meth:`add_calls`, each call's token roles from its own token ids and ``tokenizer``) or
    from the hidden states of a forward (:meth:`add_hidden`: the residual stream only); :meth:`grids` at the end."""

    def __init__(self, layers: int, names: Collection[str], tokenizer: Any) -> None:
        self.layers, self.names, self.tokenizer = layers, tuple(names), tokenizer
        ffn_names = set(OUTLIER_FFN_NAMES)
        self.ffn = [OutlierMoments() for _ in range(layers)] if set(names) & ffn_names else None
        self.residual = [OutlierMoments() for _ in range(layers)] if set(names) - ffn_names else None

    def _add(self, layer: int, ffn_out: Tensor | None, out: Tensor, roles: TokenRoles) -> None:
        delimiters = roles.cls | roles.sep | roles.punct
        if self.residual is not None:
            self.residual[layer].add(out, roles.real, delimiters, roles)
        if self.ffn is not None and ffn_out is not None:
            self.ffn[layer].add(ffn_out, roles.real, delimiters)

    def add_calls(self, recorded: RecordedActivations) -> None:
        """Every call of a complete recording (``RecordedActivations.complete``)."""
        for call in recorded.calls:
            ids = call.inputs["input_ids"]
            mask, segments = call.inputs.get("attention_mask"), call.inputs.get("token_type_ids")
            roles = token_roles(ids, mask, self.tokenizer, segments).to(ids.device)
            for layer in range(self.layers):
                self._add(layer, call.ffn[layer], call.layers[layer], roles)

    def add_hidden(self, hidden_states: Sequence[Tensor], roles: TokenRoles) -> None:
        """The residual stream from a forward's ``hidden_states`` (``[rows, T, d]`` each, the embeddings first)."""
        if self.ffn is not None:
            raise RuntimeError("the feed-forward outputs of this probe batch were not recorded")
        for layer in range(self.layers):
            self._add(layer, None, hidden_states[layer + 1], roles)

    def grids(self, reference_dims: Sequence[Sequence[int]] | None) -> tuple[dict[str, Tensor], list[list[int]]]:
        """:func:`outlier_grids` of the pass (``outlier_dim_overlap`` 1 without a reference: the pass is its own)."""
        grids, dims = outlier_grids(self.ffn, self.residual, reference_dims, self.names)
        if reference_dims is None and "outlier_dim_overlap" in grids:
            grids["outlier_dim_overlap"] = torch.ones_like(grids["outlier_dim_overlap"])
        return grids, dims
