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
* ``top_dims``: the three dimensions with the largest max |x|, largest first.

The feed-forward output is the second linear map of each layer's feed-forward block, before the residual sum and
its LayerNorm; the residual stream is the layer's output (``hidden_states[l + 1]``). Sums are float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from bertwatch.core.families import model_family
from bertwatch.heads.capture import model_shape
from bertwatch.heads.roles import TokenRoles

__all__ = ["OUTLIER_THRESHOLD", "OutlierMoments", "activation_outliers", "ffn_outputs"]

OUTLIER_THRESHOLD = 6.0
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

    def add(self, x: Tensor, real: Tensor, delimiters: Tensor) -> None:
        """``x`` ``[rows, T, d]``; ``real`` and ``delimiters`` ``[rows, T]`` (bool)."""
        values = x.detach().double()[real.bool()]  # [tokens, d]
        on_delimiter = delimiters.bool()[real.bool()]  # [tokens]
        self.count += values.numel()
        self.sums += torch.stack([values.sum(), (values**2).sum(), (values**3).sum(), (values**4).sum()])
        magnitude = values.abs()
        dim_max = magnitude.amax(0) if len(magnitude) else torch.zeros(x.shape[-1], dtype=torch.float64)
        self.dim_max = dim_max if self.dim_max is None else torch.maximum(self.dim_max, dim_max)
        big = magnitude >= self.threshold
        self.outliers += int(big.sum())
        self.mass += torch.stack([(magnitude * big).sum(), (magnitude * big)[on_delimiter].sum()])

    def result(self) -> dict[str, Any]:
        """``inf_norm``, ``kurtosis``, ``outlier_share``, ``delimiter_share``, ``top_dims`` (module doc)."""
        if self.count == 0 or self.dim_max is None:
            return {"inf_norm": math.nan, "kurtosis": math.nan, "outlier_share": math.nan,
                    "delimiter_share": math.nan, "top_dims": []}  # fmt: skip
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
            "top_dims": [int(d) for d in torch.argsort(self.dim_max, descending=True)[:3]],
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
