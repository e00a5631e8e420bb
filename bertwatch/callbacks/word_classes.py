"""Word classes from UD annotations during training: ``BertWatchCallback(expert=ExpertOptions(word_classes="dev.conllu"))``.

The annotated sentences are a second, small probe set, fixed at ``on_train_begin``: the first ``num_sentences``
that fit the model's length are tokenised word by word (``linguistics.syntax.encode``: syntactic words, so
multiword tokens are split and empty nodes left out) into padded batches with one mask per class of
``linguistics.wordclass.UD_CLASSES``; a word's class marks every one of its word pieces. The probe set's own pass
cannot serve (its texts carry no annotations), so at every probe step ``UDWordClassPass`` runs these batches
through the model once more under ``heads.capture`` (``no_grad``, eval mode, RNG and attention implementation
restored) and the training's mixed precision (``ProbeContext.autocast``, as the probe pass), and returns per head
the share of attention on each class (``class_share_<class>`` grids) and, as the named-values series
``word_classes``, the mean over heads next to the share a uniform head would give (``<class>_uniform``).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from bertwatch.callbacks._safe import SetupError
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.heads.capture import capture
from bertwatch.heads.layout import pad_token_id
from bertwatch.heads.maps.stats import StatsAccumulator
from bertwatch.heads.unwrap import select_inputs
from bertwatch.linguistics.syntax import Encoded, Sentence, encode, pad_encoded, read_conllu, skip_message
from bertwatch.linguistics.wordclass import (
    UD_CLASSES,
    UDClass,
    class_attention,
    token_masks,
    ud_classes,
    uniform_class_share,
)
from bertwatch.options.groups import WordClassProbe
from bertwatch.probe.adapt import config_value, tokenizer_value
from bertwatch.probe.records import NamedValues, RiderOutput

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.probe.probe_context import ProbeContext

__all__ = [
    "SHARE_PREFIX",
    "UDWordClassPass",
    "WordClassBatches",
    "build_word_class_batches",
    "prepare_word_classes",
    "series_values",
]

SHARE_PREFIX = "class_share_"
#: The reading rounds of a CoNLL-U file: first this many times ``num_sentences``, then the whole file.
_FIRST_READ = 4


@dataclass
class WordClassBatches:
    """The fixed word-class probe set: ``batches[k]`` (``input_ids``, ``attention_mask`` ``[B, T]``, CPU) and
    ``masks[k]`` (``{class: bool [B, T]}``); ``uniform`` is each class's share under a uniform head, averaged over
    the sentences having the class (NaN when none has it). ``skipped`` counts the sentences before the last one
    used that were left out (``too_long``: more than ``max_length`` word pieces; ``unaligned``)."""

    batches: list[dict[str, Tensor]]
    masks: list[dict[str, Tensor]]
    uniform: dict[str, float]
    sentences: int
    skipped: dict[str, int]
    source: str
    max_length: int | None = None


def _read(probe: WordClassProbe, whole: bool = False) -> tuple[str, list[Sentence], bool]:
    """The source's name, its first ``_FIRST_READ`` × ``num_sentences`` sentences (all with ``whole``), and whether
    that was all of it."""
    if not isinstance(probe.source, (str, os.PathLike)):
        return f"{len(probe.source)} given sentences", list(probe.source), True
    path = Path(probe.source)
    if not path.is_file():
        raise SetupError(
            f"word_classes: no CoNLL-U file at {path}; pass the path of a UD treebank file (e.g. "
            "ud_english_ewt/en_ewt-ud-dev.conllu), a list of Sentence, or word_classes=True for the token rules"
        )
    limit = None if whole else _FIRST_READ * int(probe.num_sentences)
    try:
        sentences = read_conllu(path, limit=limit)
    except Exception as err:
        raise SetupError(f"word_classes: {path} is not valid CoNLL-U ({type(err).__name__}: {err})") from err
    return str(path), sentences, limit is None or len(sentences) < limit


def _encode_words(
    tokenizer: Any, sentences: list[Sentence], max_length: int, keep: int
) -> tuple[list[Encoded], dict[str, int]]:
    try:
        return encode(tokenizer, sentences, max_length, keep=keep)
    except Exception as err:
        raise SetupError(
            f"word_classes: the tokenizer cannot take pre-split words ({type(err).__name__}: {err}); byte-level "
            "BPE tokenizers need add_prefix_space=True"
        ) from err


def _encode(probe: WordClassProbe, tokenizer: Any, max_length: int) -> tuple[str, list[Encoded], dict[str, int]]:
    source, sentences, complete = _read(probe)
    if not sentences:
        raise SetupError(f"word_classes: {source} holds no sentence; pass a CoNLL-U file with annotated sentences")
    if not tokenizer_value(tokenizer, "is_fast", False):
        raise SetupError("word_classes with UD annotations needs a fast tokenizer (word_ids() aligns words to pieces)")
    kept, skipped = _encode_words(tokenizer, sentences, max_length, probe.num_sentences)
    if len(kept) < probe.num_sentences and not complete:
        _, sentences, _ = _read(probe, whole=True)
        kept, skipped = _encode_words(tokenizer, sentences, max_length, probe.num_sentences)
    if not kept:
        raise SetupError(
            f"word_classes: none of the sentences of {source} fits: {skipped['too_long']} longer than {max_length} "
            f"word pieces, {skipped['unaligned']} not aligned to words; raise probing=ProbeOptions(max_length=...) (or "
            "WordClassProbe(max_length=...)) or pass shorter sentences"
        )
    return source, kept, skipped


def build_word_class_batches(
    probe: WordClassProbe, tokenizer: Any, max_length: int, classes: Mapping[str, UDClass] = UD_CLASSES
) -> WordClassBatches:
    """Tokenise, batch (similar lengths together) and mark the classes of ``probe``'s first fitting sentences;
    raises ``SetupError`` saying what to do for a missing, empty or unreadable source or when no sentence fits, and
    warns once (``BertWatchWarning``, ``linguistics.syntax.skip_message``) when a sentence before the last one used
    was skipped (too long or unaligned): the shares are then those of the sentences that fit."""
    source, kept, skipped = _encode(probe, tokenizer, max_length)
    pad = pad_token_id(tokenizer)
    order = sorted(kept, key=len)
    batches, masks, uniform = [], [], []
    for start in range(0, len(order), probe.batch_size):
        items = order[start : start + probe.batch_size]
        ids, attention = pad_encoded(items, pad)
        length = ids.shape[1]
        batch_masks = token_masks([ud_classes(e.sentence, classes) for e in items], [e.word_ids for e in items], length)
        batches.append({"input_ids": ids, "attention_mask": attention})
        masks.append(batch_masks)
        uniform.append(uniform_class_share(attention.bool(), batch_masks))
    means = {}
    for name in classes:
        values = torch.cat([u[name] for u in uniform])
        finite = values[~values.isnan()]
        means[name] = float(finite.mean()) if finite.numel() else math.nan
    data = WordClassBatches(batches, masks, means, len(kept), skipped, source, max_length)
    if any(skipped.values()):
        remedy = (
            "raise probing=ProbeOptions(max_length=...) (or WordClassProbe(max_length=...)) up to the model's maximum"
        )
        message = skip_message(skipped, len(kept), max_length, f"word_classes on {source}", remedy)
        warnings.warn(message, BertWatchWarning, stacklevel=2)
    return data


def prepare_word_classes(option: bool | WordClassProbe, context: ProbeContext) -> WordClassBatches | None:
    """The word-class probe set of a ``WordClassProbe`` option for the run's model and tokenizer (None for
    the token rules or off); its length limit is the smallest of the option's (else ``ProbeOptions.max_length``), the
    model's ``max_position_embeddings`` and the tokenizer's ``model_max_length``."""
    if not isinstance(option, WordClassProbe):
        return None
    if context.tokenizer is None:
        raise SetupError("word_classes with UD annotations needs the tokenizer: pass tokenizer= to the callback")
    limits = [option.max_length or context.settings.max_length]
    limits.append(config_value(context.encoder, "max_position_embeddings"))
    limits.append(tokenizer_value(context.tokenizer, "model_max_length"))
    limit = min(int(x) for x in limits if isinstance(x, int) and 0 < x < 1_000_000)
    return build_word_class_batches(option, context.tokenizer, limit)


class UDWordClassPass:
    """A rider of the probe pass that measures attention to the UD word classes on its own sentences (module doc).

    ``context`` gives the model, its device and the training's mixed precision (``encoder``, ``device``,
    ``autocast()`` of a ``ProbeContext``)."""

    def __init__(self, context: ProbeContext, data: WordClassBatches) -> None:
        self.context = context
        self.data = data

    def consume(self, rows: Sequence[int], attn: Tensor, roles: Any) -> None:
        """The probe set's maps are not annotated: nothing to take from them."""

    def shares(self) -> dict[str, np.ndarray]:
        """``{class_share_<class>: [layers, heads]}`` of the model now: per sentence Σ_{j in class} (1/n) Σ_i A[i, j]
        over real tokens i, j, averaged over the sentences having the class (NaN when none has it)."""
        model, device = self.context.encoder, self.context.device
        accumulator = StatsAccumulator()
        for batch, masks in zip(self.data.batches, self.data.masks):
            inputs = select_inputs(model, {k: v.to(device) for k, v in batch.items()})
            with torch.no_grad(), self.context.autocast(), capture(model) as cap:
                model(**inputs)
            real = inputs["attention_mask"].bool()
            values = class_attention(cap.attentions, real, {k: m.to(device) for k, m in masks.items()}, reduce="sum")
            accumulator.add({SHARE_PREFIX + name: value for name, value in values.items()})
        return {name: grid.numpy() for name, grid in accumulator.result().items()}

    def finish(self) -> RiderOutput:
        """The class shares of the model now, and the ``word_classes`` series point made from them."""
        from bertwatch.tb.writer import metadata as md

        grids = self.shares()
        series = NamedValues(md.WORD_CLASS_SERIES, series_values(grids, self.data.uniform), md.WORD_CLASS_TEXT)
        return RiderOutput(grids, (series,), on_probe_set=False)


def series_values(grids: Mapping[str, np.ndarray], uniform: Mapping[str, float]) -> dict[str, float]:
    """The ``word_classes`` series of one step: per class the mean over heads of its share grid, then the share
    of a uniform head (``<class>_uniform``)."""
    out: dict[str, float] = {}
    for name, base in uniform.items():
        grid = np.asarray(grids.get(SHARE_PREFIX + name, np.nan), dtype=np.float64)
        out[name] = float(np.nanmean(grid)) if np.isfinite(grid).any() else math.nan
        out[f"{name}_uniform"] = float(base)
    return out
