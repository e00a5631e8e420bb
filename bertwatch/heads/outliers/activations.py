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
    """The running sums of one layer's activations (``add`` batch by batch) on their device, and the statistics:
    :meth:`summary` as tensors on that device (read back nowhere), :meth:`result` as numbers on the host."""

    def __init__(self, threshold: float = OUTLIER_THRESHOLD) -> None:
        self.threshold = threshold
        #: float64 [8]: components counted, Σx, Σx², Σx³, Σx⁴ about zero, outliers, their Σ|x|, on delimiters.
        self.totals: Tensor | None = None
        self.dim_max: Tensor | None = None  # max |x| per dimension
        self.role_max: Tensor | None = None  # max |x| per role (ROLES), -inf before a token of the role

    def add(self, x: Tensor, real: Tensor, delimiters: Tensor, roles: TokenRoles | None = None) -> None:
        """``x`` ``[rows, T, d]``; ``real`` and ``delimiters`` ``[rows, T]`` (bool); with ``roles`` (the same rows)
        also each role's max |x| (``ROLES``). The sums run in float64 on ``x``'s device (on the CPU for a device
        without float64, such as MPS), the pad tokens masked, never dropped (which would read their count back)."""
        x = x.detach()
        if x.device.type == "mps":
            x, real, delimiters = x.cpu(), real.cpu(), delimiters.cpu()
            roles = None if roles is None else roles.to("cpu")
        real = real.to(x.device).bool()
        d = x.shape[-1]
        values = x.to(torch.float64, copy=True).masked_fill_(~real[..., None], 0.0).reshape(-1)  # the one copy
        square = values * values
        moments = [values.sum(), square.sum(), torch.dot(square, values), torch.dot(square, square)]
        del square
        magnitude = values.abs_()  # the values are not needed any more
        big = magnitude >= self.threshold
        outlying = (magnitude * big).view(*real.shape, d).sum(-1)  # each token's outliers' Σ|x|, [rows, T]
        on_delimiter = delimiters.to(x.device).bool() & real
        totals = torch.stack([
            real.sum(dtype=torch.float64) * d, *moments, big.sum(dtype=torch.float64), outlying.sum(),
            (outlying * on_delimiter).sum(),
        ])  # fmt: skip
        dim_max = magnitude.view(-1, d).amax(0)
        magnitude = magnitude.view(*real.shape, d)
        self.totals = totals if self.totals is None else self.totals + totals
        self.dim_max = dim_max if self.dim_max is None else torch.maximum(self.dim_max, dim_max)
        if roles is not None and x.shape[-1]:
            role_max = _role_max(magnitude.amax(-1), roles.to(x.device), real)
            self.role_max = role_max if self.role_max is None else torch.maximum(self.role_max, role_max)

    def summary(self) -> dict[str, Tensor] | None:
        """``inf_norm``, ``kurtosis``, ``outlier_share``, ``delimiter_share`` (float64 scalars), ``top_dims`` (long
        ``[3]``, or fewer dimensions), ``role_inf_norms`` (float64 ``[ROLES]``) and ``tokens`` (whether any real
        token was seen: every value is NaN, the top dimensions meaningless, without), on the sums' device; None
        before any batch."""
        if self.totals is None or self.dim_max is None:
            return None
        n, t = self.totals[0], self.totals
        mean = t[1] / n
        m2 = t[2] / n - mean**2
        m4 = (t[4] - 4 * mean * t[3] + 6 * mean**2 * t[2]) / n - 3 * mean**4
        seen = n > 0
        role = self.role_max if self.role_max is not None else torch.full((len(ROLES),), -math.inf, device=n.device)
        return {
            "inf_norm": torch.where(seen, self.dim_max.amax(), torch.nan),
            "kurtosis": torch.where(seen & (m2 > 0), m4 / m2**2, torch.nan),
            "outlier_share": torch.where(seen, t[5] / n, torch.nan),
            "delimiter_share": torch.where(seen & (t[6] > 0), t[7] / t[6], torch.nan),
            "top_dims": torch.argsort(self.dim_max, descending=True, stable=True)[:3],
            "role_inf_norms": torch.where(torch.isinf(role), torch.nan, role.double()),
            "tokens": seen,
        }

    def result(self) -> dict[str, Any]:
        """``inf_norm``, ``kurtosis``, ``outlier_share``, ``delimiter_share``, ``top_dims``, ``role_inf_norms``
        (module doc), read back to the host at once."""
        found = self.summary()
        if found is None:
            return {"inf_norm": math.nan, "kurtosis": math.nan, "outlier_share": math.nan,
                    "delimiter_share": math.nan, "top_dims": [],
                    "role_inf_norms": dict.fromkeys(ROLES, math.nan)}  # fmt: skip
        names = ("inf_norm", "kurtosis", "outlier_share", "delimiter_share")
        flat = torch.cat([torch.stack([found[n] for n in names]), found["role_inf_norms"],
                          found["top_dims"].double(), found["tokens"].double()[None]]).cpu().tolist()  # fmt: skip
        roles = flat[len(names) : len(names) + len(ROLES)]
        dims = [int(d) for d in flat[len(names) + len(ROLES) : -1]] if flat[-1] else []
        return {**dict(zip(names, flat)), "top_dims": dims, "role_inf_norms": dict(zip(ROLES, roles, strict=True))}


def _role_max(token_max: Tensor, roles: TokenRoles, real: Tensor) -> Tensor:
    """Each role's max over its real tokens of ``token_max`` ``[rows, T]`` (``ROLES``), float64 ``[4]``; -inf for a
    role without tokens."""
    cls, sep, punct = (mask.bool() & real for mask in (roles.cls, roles.sep, roles.punct))
    masks = torch.stack([cls, sep, punct, real & ~(cls | sep | punct)])  # [4, rows, T]
    return torch.where(masks, token_max.double(), -math.inf).reshape(len(ROLES), -1).amax(-1)


def ffn_outputs(model: nn.Module) -> list[nn.Module] | None:
    """Each layer's feed-forward output linear map, in order, or None for a family bertwatch does not know."""
    paths = _FFN.get(model_family(model.config))
    if paths is None:
        return None
    base = model.base_model
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
    reference_dims: Tensor | None,
    names: Collection[str] = OUTLIER_NAMES,
) -> tuple[dict[str, Tensor], Tensor | None]:
    """The outlier statistics ``names`` (``core.stat_names.OUTLIER_NAMES``) of one probe pass as ``[layers, 1]``
    float64 grids on the sums' device (nothing read back), from each layer's moments of the feed-forward output
    (``ffn``) and of the residual stream (``residual``), None where a stream was not measured (its names are left
    out); and each layer's top dimensions of the residual stream (long ``[layers, 3]``; None without it).

    ``outlier_dim_overlap`` is the share of a layer's top-3 dimensions also in ``reference_dims``' top-3 of that
    layer (``[layers, 3]``; NaN without a reference); ``outlier_dim`` the top one (NaN without tokens).
    """
    summaries = {where: [m.summary() for m in found] for where, found in (("ffn", ffn), ("residual", residual))
                 if found and all(m.totals is not None for m in found)}  # fmt: skip
    columns: dict[str, Tensor] = {}
    for where, layers in summaries.items():
        columns[f"{where}_inf_norm"] = torch.stack([s["inf_norm"] for s in layers])
        columns[f"{where}_kurtosis"] = torch.stack([s["kurtosis"] for s in layers])
    dims = None
    if "residual" in summaries:
        res = summaries["residual"]
        dims = torch.stack([s["top_dims"] for s in res])
        seen = torch.stack([s["tokens"] for s in res])
        columns["outlier_share"] = torch.stack([s["outlier_share"] for s in res])
        columns["delimiter_share"] = torch.stack([s["delimiter_share"] for s in res])
        columns["outlier_dim"] = torch.where(seen, dims[:, 0].double(), torch.nan)
        if reference_dims is None:
            columns["outlier_dim_overlap"] = torch.full_like(columns["outlier_dim"], torch.nan)
        else:
            shared = (dims[:, :, None] == reference_dims.to(dims.device)[:, None, :]).any(-1).double().mean(-1)
            columns["outlier_dim_overlap"] = torch.where(seen, shared, torch.nan)
        roles = torch.stack([s["role_inf_norms"] for s in res])  # [layers, ROLES]
        for k, role in enumerate(ROLES):
            columns[f"{role}_inf_norm"] = roles[:, k]
    grids = {n: columns[n].double()[:, None] for n in OUTLIER_NAMES if n in columns}
    return {n: grids[n] for n in names if n in grids}, dims


def layer_modules(model: nn.Module) -> list[nn.Module] | None:
    """Each encoder layer, in order (their outputs are the residual stream, ``hidden_states[l + 1]``), or None for a
    family bertwatch does not know."""
    paths = _FFN.get(model_family(model.config))
    if paths is None:
        return None
    try:
        found = list(model.base_model.get_submodule(paths[0]))
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

    def add_calls(self, recorded: RecordedActivations, roles: TokenRoles | None = None) -> None:
        """Every call of a complete recording (``RecordedActivations.complete``). ``roles``: the token roles of a
        recording of one call (the probe pass knows them for its rows; found from each call's token ids
        otherwise, which copies the tokenizer's special ids to the device)."""
        known = roles if len(recorded.calls) == 1 else None
        for call in recorded.calls:
            ids = call.inputs["input_ids"]
            mask, segments = call.inputs.get("attention_mask"), call.inputs.get("token_type_ids")
            roles = known if known is not None else token_roles(ids, mask, self.tokenizer, segments).to(ids.device)
            for layer in range(self.layers):
                self._add(layer, call.ffn[layer], call.layers[layer], roles)

    def add_hidden(self, hidden_states: Sequence[Tensor], roles: TokenRoles) -> None:
        """The residual stream from a forward's ``hidden_states`` (``[rows, T, d]`` each, the embeddings first)."""
        if self.ffn is not None:
            raise RuntimeError("the feed-forward outputs of this probe batch were not recorded")
        for layer in range(self.layers):
            self._add(layer, None, hidden_states[layer + 1], roles)

    def grids(self, reference_dims: Tensor | None) -> tuple[dict[str, Tensor], Tensor | None]:
        """:func:`outlier_grids` of the pass (``outlier_dim_overlap`` 1 without a reference: the pass is its own),
        on the device, with the top dimensions (the next passes' reference)."""
        grids, dims = outlier_grids(self.ffn, self.residual, reference_dims, self.names)
        if reference_dims is None and "outlier_dim_overlap" in grids:
            grids["outlier_dim_overlap"] = torch.ones_like(grids["outlier_dim_overlap"])
        return grids, dims
