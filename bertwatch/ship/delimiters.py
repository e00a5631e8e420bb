"""The float32 model's side of the INT8 story, on the first evaluation examples: each layer's activation outliers
(``heads.outliers.activations``) and each head's attention to delimiters, by weight (``cls_mass``, ``sep_mass``,
``punct_mass``: ``heads.maps.stats.compute_stats``) and by norm (``cls_mass_norm``, ``sep_mass_norm``,
``punct_mass_norm``: ``heads.norms.norm_based.norm_stats``, Kobayashi et al. 2020). Bondarenko et al. 2023: heads that
learn to do nothing park their attention on delimiters, and the feed-forward outputs grow the outliers that per-tensor
INT8 handles worst. Delimiters are what ``heads.outliers.activations`` counts its outliers' share on: [CLS], [SEP] and
"."/"," (a sentence-embedding MiniLM parks on [CLS] more than on [SEP]).

Both come from the project's own statistics, computed here on the same batches; nothing is redefined.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bertwatch.core.warnings import BertWatchWarning
from bertwatch.ship.runtime import encode

__all__ = ["DELIMITER_NAMES", "OUTLIER_EXAMPLES", "delimiter_heads", "float_side", "top_heads"]

#: The evaluation examples the float32 model is measured on (the first ones of the set).
OUTLIER_EXAMPLES = 256
#: The head statistics read: by weight, then by norm; [CLS], [SEP] and punctuation summed in each.
DELIMITER_NAMES = ("cls_mass", "sep_mass", "punct_mass", "cls_mass_norm", "sep_mass_norm", "punct_mass_norm")
_BATCH = 32


def _batches(model: Any, tokenizer: Any, examples: Sequence[Mapping[str, Any]], max_length: int) -> list[tuple]:
    """The examples as (torch inputs, token roles) in batches of 32, right-padded (real tokens first)."""
    import torch

    from bertwatch.heads.roles import token_roles

    batches = []
    for start in range(0, len(examples), _BATCH):
        feed = encode(tokenizer, examples[start : start + _BATCH], max_length)
        inputs = {name: torch.from_numpy(value) for name, value in feed.items()}
        roles = token_roles(inputs["input_ids"], inputs.get("attention_mask"), tokenizer, inputs.get("token_type_ids"))
        batches.append((inputs, roles))
    return batches


def delimiter_heads(model: Any, batches: Sequence[tuple]) -> dict[str, list[list[float]]]:
    """Each head's attention mass on [CLS], on [SEP] and on "."/"," by weight and by norm over ``batches``.

    Args:
        model: the float32 classifier (torch, CPU).
        batches: (inputs, ``TokenRoles``) pairs.

    Returns:
        ``{name: [layers][heads]}`` for ``DELIMITER_NAMES``, the unweighted mean over examples (the grids of
        ``bertwatch analyze``); the norm-based ones are absent for a family whose attention block bertwatch does
        not know.
    """
    import torch

    from bertwatch.heads.aggregate import StatsAccumulator
    from bertwatch.heads.capture import capture
    from bertwatch.heads.maps.stats import compute_stats
    from bertwatch.heads.norms.norm_based import head_grams, norm_stats, supports_norms

    norms = supports_norms(model)
    grams = head_grams(model) if norms else None
    accumulator = StatsAccumulator()
    with torch.no_grad():
        for inputs, roles in batches:
            with capture(model, record_values=norms) as cap:
                model(**inputs)
            accumulator.add(compute_stats(cap.attentions, roles, DELIMITER_NAMES[:3]))
            if norms:
                accumulator.add(norm_stats(cap.attentions, cap.values, grams, roles, DELIMITER_NAMES[3:], cap.contexts))
    return {name: grid.double().tolist() for name, grid in accumulator.result().items()}


def top_heads(
    grids: Mapping[str, Sequence[Sequence[float]]], layers: Sequence[int], count: int = 3
) -> list[dict[str, Any]]:
    """The ``count`` heads of ``layers`` with the most attention on delimiters by weight (``cls_mass`` +
    ``sep_mass`` + ``punct_mass``), most first, each with its mass by weight and by norm (the ``_norm`` sums; None
    without the norm grids).

    Example:
        >>> grids = {"cls_mass": [[0.1, 0.0], [0.0, 0.0]], "sep_mass": [[0.7, 0.1], [0.2, 0.0]],
        ...          "punct_mass": [[0.0, 0.2], [0.0, 0.0]]}
        >>> [(h["layer"], h["head"], round(h["by_weight"], 2)) for h in top_heads(grids, [0, 1], 2)]
        [(0, 0, 0.8), (0, 1, 0.3)]
    """
    parts = DELIMITER_NAMES[:3]
    weight = sum(np.asarray(grids[name], dtype=float) for name in parts)
    norms = [name + "_norm" for name in parts]
    norm = sum(np.asarray(grids[name], dtype=float) for name in norms) if all(n in grids for n in norms) else None
    cells = [(layer, head) for layer in layers for head in range(weight.shape[1])]
    cells.sort(key=lambda cell: -np.nan_to_num(weight[cell], nan=-1.0))
    return [
        {
            "layer": layer,
            "head": head,
            "by_weight": float(weight[layer, head]),
            "by_norm": None if norm is None else float(norm[layer, head]),
        }
        for layer, head in cells[:count]
    ]


def float_side(model: Any, tokenizer: Any, examples: Sequence[Mapping[str, Any]], max_length: int) -> dict[str, Any]:
    """The float32 model's activation outliers per layer and its heads' delimiter mass, on the first
    ``OUTLIER_EXAMPLES`` examples.

    Returns:
        ``{"examples": n, "ffn": [...], "residual": [...], "heads": {name: [layers][heads]}}``
        (``heads.outliers.activations.activation_outliers`` for the first two, :func:`delimiter_heads` for the last;
        None, with a warning, for a model bertwatch cannot capture).
    """
    from bertwatch.heads.capture import UnsupportedModelError
    from bertwatch.heads.outliers.activations import activation_outliers

    chosen = list(examples[:OUTLIER_EXAMPLES])
    model = model.eval()
    batches = _batches(model, tokenizer, chosen, max_length)
    try:
        heads = delimiter_heads(model, batches)
    except UnsupportedModelError as error:  # a family bertwatch cannot capture: the outliers still stand
        warnings.warn(f"bertwatch ship: no head statistics for this model ({error})", BertWatchWarning, stacklevel=2)
        heads = None
    return {"examples": len(chosen), **activation_outliers(model, batches), "heads": heads}
