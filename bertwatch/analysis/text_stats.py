"""``bertwatch analyze``: every per-head statistic of a model on a file of texts, as JSON and figures."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.jsonable import jsonable
from bertwatch.heads.loading import load_model, max_input_length

__all__ = ["analyze", "encode_texts"]

logger = logging.getLogger(__name__)


def encode_texts(
    tokenizer: Any, texts: Sequence[tuple[str, str | None]], max_length: int
) -> tuple[list[dict[str, list[int]]], int]:
    """Tokenise examples (pairs where a second text is given) without padding; returns (encodings, truncated count)."""
    encodings, truncated = [], 0
    for first, second in texts:
        full = tokenizer(first, second, truncation=False, add_special_tokens=True)
        if len(full["input_ids"]) > max_length:
            truncated += 1
            full = tokenizer(first, second, truncation=True, max_length=max_length)
        encodings.append(dict(full))
    return encodings, truncated


def analyze(
    model: str | Any,
    texts: str | Path | Sequence[str | tuple[str, str | None]],
    out: str | Path | None = None,
    max_length: int | None = None,
    batch_size: int = 16,
    tokenizer: Any = None,
    reference: str | Any | None = None,
    device: str | None = None,
    progress: bool = True,
    figures: bool = True,
    mixing: bool = False,
    value_zeroing: int = 0,
) -> dict[str, Any]:
    """Compute every statistic of ``docs/statistics.md`` for ``model`` on ``texts``; optionally write them to ``out``.

    Each example is measured alone (its statistics never depend on its batch or padding), then averaged per head.

    Args:
        model: a local model folder, a Hub name (online only) or a loaded encoder model.
        texts: a file (one example per line, a tab between the two sentences of a pair) or a list of strings or
            (text, pair) tuples.
        out: folder for ``stats.json`` and, with ``figures``, the heatmaps; None: write nothing.
        max_length: tokens per example (default 128, capped by the model's maximum); longer ones are truncated,
            with a warning that says how many.
        batch_size: examples per forward pass (the results do not depend on it).
        tokenizer: needed when ``model`` is a loaded model; loaded from the folder otherwise.
        reference: a second model or path (e.g. the pretrained one): adds the drift statistics.
        device: a torch device name; default CPU.
        progress: show a progress bar.
        figures: with ``out``, also write the figures.
        mixing: add every context-mixing measure (``bertwatch.analysis.text_mixing``): the ``MIXING_NAMES`` grids in
            ``stats``, a ``mixing`` summary, and ``mixing.json`` + ``mixing.npz`` in ``out``.
        value_zeroing: with ``mixing``, also value zeroing on the first N examples (one zeroed pass of a layer per
            token: costly).

    Returns:
        The ``stats.json`` document: ``{"model", "num_layers", "num_heads", "num_examples", "max_length",
        "truncated", "stats": {name: [layers][heads]}, "labels", "patterns"}`` (NaN written as null).

    Raises:
        ValueError: no texts to analyse.

    Example:
        >>> import torch, transformers
        >>> from bertwatch import analyze
        >>> words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", "cat", "sat", "on", "mat"]
        >>> tokenizer = transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)})
        >>> _ = torch.manual_seed(0)
        >>> config = transformers.BertConfig(
        ...     vocab_size=len(words), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
        ... )
        >>> model = transformers.BertModel(config).eval()
        >>> doc = analyze(model, ["the cat sat .", ("the cat", "sat on the mat .")], tokenizer=tokenizer, progress=False)
        >>> doc["num_layers"], doc["num_heads"], doc["num_examples"]
        (2, 2, 2)
        >>> len(doc["stats"]["cls_mass"]), len(doc["stats"]["cls_mass"][0])  # [layers][heads]
        (2, 2)
    """
    import torch

    from bertwatch.heads.capture import model_shape
    from bertwatch.heads.maps.stats import behaviour_label_lists, pattern_classes

    examples = _examples(texts)
    config = None if isinstance(model, (str, Path)) else getattr(model, "config", None)  # a DDP wrapper has none
    name = model if isinstance(model, (str, Path)) else "model" if config is None else config._name_or_path
    model, tokenizer, ref_model = _models(model, tokenizer, reference, device)
    layers, heads = model_shape(model)
    length = max_input_length(model, tokenizer, max_length)
    encodings, truncated = encode_texts(tokenizer, examples, length)
    if truncated:
        warnings.warn(
            f"{truncated} of {len(examples)} examples were longer than {length} tokens and were truncated", stacklevel=2
        )
    grids = _grids(model, ref_model, tokenizer, encodings, batch_size, progress)
    mixing_summary = mixing_maps = None
    if mixing or value_zeroing:
        from bertwatch.analysis.text_mixing import mixing_analysis

        mixing_summary, mixing_maps, mixing_grids = mixing_analysis(
            model, tokenizer, encodings, batch_size, value_zeroing, progress
        )
        grids.update(mixing_grids)
    result: dict[str, Any] = {
        "model": str(name),
        "num_layers": layers,
        "num_heads": heads,
        "num_examples": len(encodings),
        "max_length": length,
        "truncated": truncated,
        "stats": {k: jsonable(v) for k, v in grids.items()},
        "labels": behaviour_label_lists({k: torch.as_tensor(v) for k, v in grids.items()}),
        "patterns": pattern_classes({k: torch.as_tensor(v) for k, v in grids.items()}),
    }
    if mixing_summary is not None:
        result["mixing"] = jsonable(mixing_summary)
    if out is not None:
        _write(result, grids, Path(out), figures)
        if mixing_summary is not None:
            from bertwatch.analysis.text_mixing import write_mixing

            write_mixing(out, mixing_summary, mixing_maps)
    return result


def _examples(texts: str | Path | Sequence[str | tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """(text, pair or None) per example, from a file or a list."""
    from bertwatch.data.glue import read_texts

    if isinstance(texts, (str, Path)):
        return read_texts(texts)
    examples = [(t, None) if isinstance(t, str) else (t[0], t[1]) for t in texts]
    if not examples:
        raise ValueError("no texts to analyse")
    return examples


def _models(model: str | Any, tokenizer: Any, reference: str | Any | None, device: str | None) -> tuple[Any, Any, Any]:
    """(model, tokenizer, reference model or None), loading paths and refusing a reference of another shape."""
    from bertwatch.heads.capture import model_shape

    if isinstance(model, (str, Path)):
        model, loaded_tokenizer = load_model(str(model), device)
        tokenizer = tokenizer or loaded_tokenizer
    if tokenizer is None:
        raise ValueError("pass the model's tokenizer when giving a model object")
    ref_model = None
    if reference is not None:
        ref_model = load_model(str(reference), device)[0] if isinstance(reference, (str, Path)) else reference
        if model_shape(ref_model) != model_shape(model):
            raise ValueError(f"the reference model has shape {model_shape(ref_model)}, the model {model_shape(model)}")
    return model, tokenizer, ref_model


def _grids(
    model: Any, ref_model: Any, tokenizer: Any, encodings: list[dict[str, list[int]]], batch_size: int, progress: bool
) -> dict[str, np.ndarray]:
    """Every statistic's ``[layers, heads]`` grid (float64) over the encoded examples, batch by batch."""
    import torch
    from tqdm.auto import tqdm

    from bertwatch.heads.capture import capture
    from bertwatch.heads.layout import pad_examples, right_align
    from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES, StatsAccumulator, compute_stats
    from bertwatch.heads.roles import token_roles

    device_obj = next(model.parameters()).device
    accumulator = StatsAccumulator()
    bar = tqdm(total=len(encodings), desc="bertwatch analyze", unit="ex", disable=not progress)
    with torch.no_grad():
        for start in range(0, len(encodings), batch_size):
            chunk = encodings[start : start + batch_size]
            batch = right_align(pad_examples(chunk, tokenizer))
            batch = {k: v.to(device_obj) for k, v in batch.items()}
            roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer, batch.get("token_type_ids"))
            with capture(model) as cap:
                model(**batch)
            ref_maps = None
            if ref_model is not None:
                with capture(ref_model) as ref_cap:
                    ref_model(**batch)
                ref_maps = ref_cap.attentions
            names = STAT_NAMES + (DRIFT_NAMES if ref_maps is not None else ())
            accumulator.add(compute_stats(cap.attentions, roles, names=names, reference=ref_maps))
            bar.update(len(chunk))
    bar.close()
    return {k: v.detach().cpu().double().numpy() for k, v in accumulator.result().items()}


def _write(result: dict[str, Any], grids: dict[str, np.ndarray], out: Path, figures: bool) -> None:
    from bertwatch.report.changes import reference_value
    from bertwatch.report.figures import grid_heatmap, special_token_figure
    from bertwatch.tb.colours import higher_is_better

    out.mkdir(parents=True, exist_ok=True)
    (out / "stats.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    if not figures:
        return
    for name, grid in grids.items():
        grid_heatmap(
            grid,
            f"{name} ({result['num_examples']} examples)",
            out / f"{name}.png",
            center=reference_value(name),
            colorbar_label=name,
            higher_better=higher_is_better(name),
        )
    special_token_figure(grids, out / "special_tokens.png")
