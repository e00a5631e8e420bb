"""Attention to word classes and roles (Kovaleva et al. 2019, Sec 4.4) and the targets of [CLS] (Sec 4.5).

Pure tensor functions for training-time monitors: maps ``[batch, layers, heads, T, T]`` plus bool target masks
``[batch, T]`` in, ``[batch, layers, heads]`` out (NaN where an example has no target, so that
``bertwatch.heads.maps.stats.aggregate`` skips it, as the paper says: "ignore examples without the feature").
Target masks come from UD annotations (``ud_word_classes``, Kovaleva's sets for ``bertwatch probe-syntax``;
``ud_classes``, the ``UD_CLASSES`` measured during training) or from a spaCy parse (``spacy_word_classes``),
spread from words to word pieces with ``token_masks``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "WORD_CLASSES",
    "NEGATION_WORDS",
    "UDClass",
    "UD_CLASSES",
    "ud_classes",
    "uniform_class_share",
    "ud_word_classes",
    "spacy_word_classes",
    "token_masks",
    "class_attention",
    "cls_targets",
    "wordclass_figure",
    "cls_targets_figure",
]

WORD_CLASSES: tuple[str, ...] = ("noun", "verb", "pron", "subj", "obj", "neg")

NEGATION_WORDS: frozenset[str] = frozenset(
    {
        "not",
        "n't",
        "nt",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "without",
        "cannot",
        "nope",
        "nay",
        "non",
        "noone",
    }
)

_NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
_PRON_TAGS = frozenset({"PRP", "PRP$"})
_UPOS = {"noun": frozenset({"NOUN", "PROPN"}), "verb": frozenset({"VERB", "AUX"}), "pron": frozenset({"PRON"})}
_UD_SUBJ = frozenset({"nsubj", "csubj", "expl"})
_UD_OBJ = frozenset({"obj", "iobj"})
_SPACY_SUBJ = frozenset({"nsubj", "nsubjpass", "csubj", "csubjpass", "agent", "expl"})
_SPACY_OBJ = frozenset({"dobj", "iobj", "dative", "attr", "oprd"})


def _pos_classes(tag: str | None, upos: str | None) -> dict[str, bool]:
    """Kovaleva's POS sets on PTB tags (NN*, VB*, PRP/PRP$); UPOS when there is no PTB tag."""
    if tag:
        return {"noun": tag in _NOUN_TAGS, "verb": tag.startswith("VB"), "pron": tag in _PRON_TAGS}
    return {name: upos in tags for name, tags in _UPOS.items()}


def ud_word_classes(sentence: Any) -> dict[str, list[bool]]:
    """Per word of a ``bertwatch.linguistics.syntax.Sentence``: noun/verb/pron (XPOS, else UPOS), subj, obj, neg.

    subj = nsubj, csubj, expl (with subtypes) and obl:agent; obj = obj, iobj; neg = ``Polarity=Neg`` or a
    word of ``NEGATION_WORDS``.
    """
    out: dict[str, list[bool]] = {name: [] for name in WORD_CLASSES}
    for word, xpos, upos, deprel, feats in zip(
        sentence.words, sentence.xpos, sentence.upos, sentence.deprels, sentence.feats
    ):
        for name, value in _pos_classes(xpos, upos).items():
            out[name].append(value)
        base = deprel.split(":", 1)[0]
        out["subj"].append(base in _UD_SUBJ or deprel == "obl:agent")
        out["obj"].append(base in _UD_OBJ)
        out["neg"].append(feats.get("Polarity") == "Neg" or word.lower() in NEGATION_WORDS)
    return out


@dataclass(frozen=True)
class UDClass:
    """A word class by its UD annotation: a word belongs when its UPOS is in ``upos``, its relation (the part
    before ':', so ``nsubj:pass`` counts as ``nsubj``) is in ``deprels``, or it has one of the ``feats``."""

    upos: frozenset[str] = frozenset()
    deprels: frozenset[str] = frozenset()
    feats: frozenset[tuple[str, str]] = frozenset()

    def contains(self, upos: str, deprel: str, feats: Mapping[str, str]) -> bool:
        return (
            upos in self.upos
            or deprel.split(":", 1)[0] in self.deprels
            or any(feats.get(key) == value for key, value in self.feats)
        )


#: The word classes measured during training from UD annotations (``BertWatchCallback(word_classes=...)``),
#: documented in docs/statistics.md. Negation is annotation-only: ``Polarity=Neg`` (not, n't, nor, neither, the
#: interjection no) or ``PronType=Neg`` (the determiner no, never, nothing, none, nobody); no word list.
UD_CLASSES: Mapping[str, UDClass] = MappingProxyType(
    {
        "noun": UDClass(upos=frozenset({"NOUN", "PROPN"})),
        "verb": UDClass(upos=frozenset({"VERB"})),
        "pron": UDClass(upos=frozenset({"PRON"})),
        "det": UDClass(upos=frozenset({"DET"})),
        "subj": UDClass(deprels=frozenset({"nsubj", "csubj"})),
        "obj": UDClass(deprels=frozenset({"obj", "iobj"})),
        "neg": UDClass(feats=frozenset({("Polarity", "Neg"), ("PronType", "Neg")})),
        "punct": UDClass(upos=frozenset({"PUNCT"})),
    }
)


def ud_classes(sentence: Any, classes: Mapping[str, UDClass] = UD_CLASSES) -> dict[str, list[bool]]:
    """Per syntactic word of a ``bertwatch.linguistics.syntax.Sentence``: whether it is in each of ``classes``."""
    return {
        name: [
            rule.contains(upos, deprel, feats)
            for upos, deprel, feats in zip(sentence.upos, sentence.deprels, sentence.feats)
        ]
        for name, rule in classes.items()
    }


def uniform_class_share(real: Tensor, masks: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The share a uniform head gives each class, n_c / n over the real tokens: ``{class: [batch]}`` float64, NaN
    where an example has no token of the class (the baseline of ``class_attention(..., reduce="sum")``)."""
    real = real.bool()
    n = real.sum(-1).clamp_min(1).double()
    out = {}
    for name, mask in masks.items():
        count = (mask.bool().to(real.device) & real).sum(-1).double()
        out[name] = torch.where(count > 0, count / n, math.nan)
    return out


def spacy_word_classes(doc: Iterable[Any]) -> dict[str, list[bool]]:
    """Per token of a spaCy ``Doc`` (anything with ``.text``, ``.tag_``, ``.pos_``, ``.dep_``): Kovaleva's sets.

    Tokenise ``[t.text for t in doc]`` with ``is_split_into_words=True`` to align. Needs spaCy and an English
    pipeline (``pip install spacy && python -m spacy download en_core_web_sm``); UD annotations need neither.
    """
    out: dict[str, list[bool]] = {name: [] for name in WORD_CLASSES}
    for token in doc:
        for name, value in _pos_classes(token.tag_ or None, token.pos_).items():
            out[name].append(value)
        out["subj"].append(token.dep_ in _SPACY_SUBJ)
        out["obj"].append(token.dep_ in _SPACY_OBJ)
        out["neg"].append(token.dep_ == "neg" or token.text.lower() in NEGATION_WORDS)
    return out


def token_masks(
    word_classes: Sequence[Mapping[str, Sequence[bool]]],
    word_ids: Sequence[Sequence[int | None]],
    length: int,
) -> dict[str, Tensor]:
    """Spread per-word flags to every piece of the word: ``{class: bool [batch, length]}``.

    ``word_ids[b]`` is example b's ``encoding.word_ids()`` (single-sentence input); positions past it are False.
    """
    if len(word_classes) != len(word_ids):
        raise ValueError(f"{len(word_classes)} word-class dicts for {len(word_ids)} examples")
    names = list(word_classes[0]) if word_classes else []
    masks = {name: torch.zeros(len(word_ids), length, dtype=torch.bool) for name in names}
    for b, (classes, ids) in enumerate(zip(word_classes, word_ids)):
        for position, wid in enumerate(ids[:length]):
            if wid is None:
                continue
            for name in names:
                if classes[name][wid]:
                    masks[name][b, position] = True
    return masks


def _reduce(values: Tensor, mask: Tensor, reduce: str) -> Tensor:
    """max or sum of ``values`` ``[B, L, H, T]`` over positions in ``mask`` ``[B, T]``; NaN where mask is empty."""
    m = mask.to(values.device).bool()[:, None, None, :]
    if reduce == "max":
        out = values.masked_fill(~m, -math.inf).amax(-1)
    elif reduce == "sum":
        out = (values * m).sum(-1)
    else:
        raise ValueError(f"reduce must be 'max' (Kovaleva) or 'sum', not {reduce!r}")
    return torch.where(mask.to(values.device).any(-1)[:, None, None], out, math.nan)


def class_attention(attn: Tensor, real: Tensor, masks: Mapping[str, Tensor], reduce: str = "max") -> dict[str, Tensor]:
    """Kovaleva's attention to a token type: ``{class: [batch, layers, heads]}``.

    With ``col[j] = (1/n) Σ_{i real} A[i, j]``, the value is max over target positions j of ``col[j]``
    (``reduce="max"``, the paper) or their sum (``"sum"``, the class's total share of attention).
    ``attn`` ``[batch, layers, heads, T, T]``; ``real`` bool ``[batch, T]``; masks bool ``[batch, T]``.
    """
    if attn.dim() != 5:
        raise ValueError(f"attn must be [batch, layers, heads, T, T], got {tuple(attn.shape)}")
    realf = real.to(attn.device).float()
    cols = torch.einsum("blhij,bi->blhj", attn.float(), realf) / realf.sum(-1).clamp_min(1)[:, None, None, None]
    return {name: _reduce(cols, mask.bool() & real.bool(), reduce) for name, mask in masks.items()}


def cls_targets(attn: Tensor, cls: Tensor, masks: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Kovaleva Sec 4.5: max over target positions j of A[cls, j], the (first) [CLS] row: ``{type: [B, L, H]}``.

    NaN for examples without [CLS] or without the target. Take ``[:, -1]`` for the last layer.
    """
    cls = cls.to(attn.device).bool()
    first = cls.float().argmax(-1)
    rows = attn.float()[torch.arange(attn.shape[0], device=attn.device), :, :, first]
    out = {name: _reduce(rows, mask.to(attn.device).bool(), "max") for name, mask in masks.items()}
    has_cls = cls.any(-1)[:, None, None]
    return {name: torch.where(has_cls, value, math.nan) for name, value in out.items()}


def _figure(rows: int, cols: int, width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * cols + 0.6, height * rows + 0.8))
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _ticks(ax: Any, rows: int, cols: int, xlabel: str, ylabel: str) -> None:
    ax.set_xlabel(xlabel, fontsize=7)
    ax.set_ylabel(ylabel, fontsize=7)
    ax.set_xticks(range(cols), [str(i) for i in range(cols)], fontsize=5)
    ax.set_yticks(range(rows), [str(i) for i in range(rows)], fontsize=5)


def wordclass_figure(panels: Mapping[str, Mapping[str, Any]], path: Any, title: str = "") -> Any:
    """Grids ``[layers, heads]``: one column per class, one row per ``panels`` key (e.g. "model", "reference",
    "difference"; a row named "difference" gets a diverging scale). Layers and heads labelled from 0."""
    import numpy as np

    from bertwatch.report.figures import diverging_cmap

    rows = list(panels)
    names = list(panels[rows[0]])
    fig, axes = _figure(len(rows), len(names), 2.7, 2.2)
    for c, name in enumerate(names):
        grids = {r: np.asarray(panels[r][name], dtype=float) for r in rows}
        plain = [g for r, g in grids.items() if r != "difference" and np.isfinite(g).any()]
        vmax = max((float(np.nanmax(g)) for g in plain), default=1.0) or 1.0
        for r, row in enumerate(rows):
            ax, grid = axes[r][c], grids[row]
            if row == "difference":
                lim = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
                im = ax.imshow(grid, cmap=diverging_cmap(), vmin=-(lim or 1), vmax=lim or 1, aspect="auto")
            else:
                im = ax.imshow(grid, cmap="Greens", vmin=0, vmax=vmax, aspect="auto")
            ax.set_title(f"{name} ({row})", fontsize=8)
            _ticks(ax, grid.shape[0], grid.shape[1], "head", "layer")
            fig.colorbar(im, ax=ax, fraction=0.05)
    return _save(fig, path, title)


def _save(fig: Any, path: Any, title: str) -> Any:
    """Title ``fig`` (when ``title``), lay it out and write it to ``path``; returns ``path``."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def cls_targets_figure(panels: Mapping[str, Mapping[str, Any]], path: Any, title: str = "") -> Any:
    """The last layer's [CLS] row: for each ``panels`` key, a ``[types, heads]`` map of ``panels[key][type]``."""
    import numpy as np

    rows = list(panels)
    fig, axes = _figure(1, len(rows), 4.5, 2.8)
    for r, row in enumerate(rows):
        types = list(panels[row])
        grid = np.stack([np.asarray(panels[row][t], dtype=float) for t in types])
        ax = axes[0][r]
        im = ax.imshow(
            grid, cmap="Purples", vmin=0, vmax=float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0, aspect="auto"
        )
        ax.set_title(f"[CLS] row, last layer ({row})", fontsize=8)
        ax.set_xticks(range(grid.shape[1]), [str(i) for i in range(grid.shape[1])], fontsize=6)
        ax.set_yticks(range(len(types)), types, fontsize=7)
        ax.set_xlabel("head", fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.05)
    return _save(fig, path, title)
