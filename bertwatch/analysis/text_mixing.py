"""``bertwatch analyze --mixing``: every context-mixing measure of a model on the user's texts (``bertwatch.heads.
mixing``): each example's token×token maps per measure, the mixing statistics' grids, and per layer the [CLS] and
[SEP] shares by attention weight, by norm (Kobayashi 2020), by ALTI (per layer and composed), by rollout, and by
value zeroing on a sample: the comparison behind Clark et al.'s "no-op" reading of [SEP] attention.

Files: ``mixing.json`` (``{"measures", "layers": {measure: {"cls": [L], "sep": [L]}}, "examples",
"value_zeroing_examples"}``) and ``mixing.npz`` (``{measure}/{example:04d}``: the example's maps cropped to its real
tokens, ``[L, H, n, n]`` for weights and norms, ``[L, n, n]`` for the others).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.jsonable import jsonable
from bertwatch.core.stat_names import MIXING_MEASURES, MIXING_NAMES

__all__ = ["mixing_analysis", "write_mixing"]


def mixing_analysis(
    model: Any,
    tokenizer: Any,
    encodings: list[dict[str, list[int]]],
    batch_size: int = 8,
    value_zeroing_examples: int = 0,
    progress: bool = True,
) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(summary, maps, grids) of every mixing measure over the encoded examples.

    Args:
        model: a supported encoder (``bertwatch.heads.norms.norm_based.attention_blocks`` refuses the others, loudly).
        tokenizer: its tokenizer (pads the batches, finds [CLS] and [SEP]).
        encodings: unpadded encodings (``bertwatch.analysis.analyze.encode_texts``).
        batch_size: examples per pass.
        value_zeroing_examples: value zeroing on the first this many examples (L·n forward passes each).
        progress: show a progress bar.

    Returns:
        The ``mixing.json`` document, ``{"{measure}/{example:04d}": maps}``, and ``{name: [layers, heads]}`` grids
        of ``MIXING_NAMES`` (per-layer names ``[layers, 1]``), NaN-aware means over examples.

    Example:
        >>> summary, maps, grids = mixing_analysis(model, tok, encodings)  # doctest: +SKIP
        >>> summary["layers"]["alti"]["sep"]  # doctest: +SKIP
    """
    import torch
    from tqdm.auto import tqdm

    from bertwatch.heads.aggregate import StatsAccumulator
    from bertwatch.heads.capture import capture
    from bertwatch.heads.layout import pad_examples, right_align
    from bertwatch.heads.mixing.mixing_model import (
        block_weights,
        mixing_maps,
        mixing_stats,
        record_blocks,
        value_zeroing,
    )
    from bertwatch.heads.mixing.mixing_scores import key_mass
    from bertwatch.heads.roles import token_roles

    weights = block_weights(model)
    device = next(model.parameters()).device
    shares: dict[str, dict[str, list[np.ndarray]]] = {}
    maps_out: dict[str, np.ndarray] = {}
    accumulator = StatsAccumulator()
    bar = tqdm(total=len(encodings), desc="bertwatch analyze --mixing", unit="ex", disable=not progress)
    for start in range(0, len(encodings), batch_size):
        chunk = encodings[start : start + batch_size]
        batch = right_align(pad_examples(chunk, tokenizer))
        batch = {k: v.to(device) for k, v in batch.items()}
        roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer, batch.get("token_type_ids"))
        real = roles.real.bool()
        with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
            model(**batch)
        accumulator.add(mixing_stats(cap.attentions, cap.values, blocks.residuals, weights, roles, MIXING_NAMES))
        maps = mixing_maps(model, batch, real)
        zeroing = max(0, min(len(chunk), value_zeroing_examples - start))
        if zeroing:
            part = {k: v[:zeroing] for k, v in batch.items()}
            maps["value_zeroing"] = value_zeroing(model, part, real[:zeroing])
        for measure, tensor in maps.items():
            rows = len(tensor)
            for key, mask in (("cls", roles.cls), ("sep", roles.sep)):
                mass = key_mass(tensor.float().cpu(), mask[:rows].cpu(), real[:rows].cpu())  # [rows, L(, H)]
                per_layer = mass if mass.dim() == 2 else torch.nanmean(mass, dim=-1)
                shares.setdefault(measure, {}).setdefault(key, []).append(per_layer.double().numpy())
            for row in range(rows):
                keep = real[row].cpu()
                cropped = tensor[row].cpu()[..., keep, :][..., keep]
                maps_out[f"{measure}/{start + row:04d}"] = cropped.float().numpy()
        bar.update(len(chunk))
    bar.close()
    layers = {
        measure: {key: np.nanmean(np.concatenate(parts), axis=0) for key, parts in by_key.items()}
        for measure, by_key in shares.items()
    }
    summary = {
        "measures": [m for m in MIXING_MEASURES if m in layers],
        "layers": layers,
        "examples": len(encodings),
        "value_zeroing_examples": min(value_zeroing_examples, len(encodings)),
    }
    grids = {k: v.detach().cpu().double().numpy() for k, v in accumulator.result().items()}
    return summary, maps_out, grids


def write_mixing(out: str | Path, summary: dict[str, Any], maps: dict[str, np.ndarray]) -> None:
    """``mixing.json`` and ``mixing.npz`` into the folder ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mixing.json").write_text(json.dumps(jsonable(summary), indent=1), encoding="utf-8")
    np.savez_compressed(out / "mixing.npz", **maps)
