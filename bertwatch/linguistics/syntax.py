"""Syntactic heads (Clark et al. 2019, Sec 4.2): which head points from a dependent to its syntactic head.

Pipeline: ``read_conllu`` (syntactic words; multiword ranges "3-4" and empty nodes "8.1" left out) →
``encode`` (the model's fast tokenizer with ``is_split_into_words=True``; special tokens are their own words;
sentences longer than the model's maximum are skipped, not truncated, and counted) → ``attention_batches``
(padded batches through ``bertwatch.heads.capture``) → word-level maps (``bertwatch.heads.roles.to_word_level``) →
``HeadAccuracy`` (per UD relation, every head in both directions, and the best fixed-offset baseline).

A word-level map here is ``[layers, heads, W, W]`` with W = words + 2: [CLS] first, [SEP] last.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bertwatch.heads.layout import pad_token_id
from bertwatch.heads.roles import to_word_level, word_groups

__all__ = [
    "training_treebank",
    "DIRECTIONS",
    "OFFSETS",
    "Sentence",
    "Encoded",
    "AttentionBatch",
    "HeadAccuracy",
    "read_conllu",
    "pad_encoded",
    "parse_conllu",
    "relation",
    "encode",
    "skip_message",
    "attention_batches",
    "predict_heads",
    "syntax_figure",
]

DIRECTIONS: tuple[str, ...] = ("dep->head", "head->dep")
OFFSETS: tuple[int, ...] = (-3, -2, -1, 1, 2)
ALL = "all"


@dataclass(frozen=True)
class Sentence:
    """The syntactic words of one CoNLL-U sentence; ``heads`` are 1-based word indices, 0 = root."""

    words: tuple[str, ...]
    heads: tuple[int, ...]
    deprels: tuple[str, ...]
    upos: tuple[str, ...]
    xpos: tuple[str | None, ...]
    feats: tuple[Mapping[str, str], ...]
    sent_id: str | None = None

    def __len__(self) -> int:
        return len(self.words)

    @property
    def punct(self) -> tuple[bool, ...]:
        """Per word: UPOS is PUNCT (left out of UAS, as in Clark's probes)."""
        return tuple(u == "PUNCT" for u in self.upos)


def _sentence(tokens: Iterable[Mapping[str, Any]], sent_id: str | None) -> Sentence:
    words = [t for t in tokens if isinstance(t["id"], int)]
    ids = [t["id"] for t in words]
    if ids != list(range(1, len(ids) + 1)):
        raise ValueError(f"sentence {sent_id!r}: word ids are not 1..n: {ids}")
    heads = [t["head"] for t in words]
    if any(not isinstance(h, int) or h < 0 or h > len(words) for h in heads):
        raise ValueError(f"sentence {sent_id!r}: a HEAD is missing or outside 0..{len(words)}: {heads}")
    return Sentence(
        words=tuple(str(t["form"]) for t in words),
        heads=tuple(int(h) for h in heads),
        deprels=tuple(str(t["deprel"]) for t in words),
        upos=tuple(str(t["upos"]) for t in words),
        xpos=tuple(None if t.get("xpos") in (None, "_") else str(t["xpos"]) for t in words),
        feats=tuple(dict(t.get("feats") or {}) for t in words),
        sent_id=sent_id,
    )


def _parse(stream: io.TextIOBase, limit: int | None) -> list[Sentence]:
    import conllu

    sentences: list[Sentence] = []
    for tokens in conllu.parse_incr(stream):
        if limit is not None and len(sentences) >= limit:
            break
        sentence = _sentence(tokens, tokens.metadata.get("sent_id"))
        if len(sentence):
            sentences.append(sentence)
    return sentences


def read_conllu(path: str | Path, limit: int | None = None) -> list[Sentence]:
    """The first ``limit`` (all if None) non-empty sentences of a CoNLL-U file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no CoNLL-U file at {path}; pass e.g. ../shared/data/ud_english_ewt/en_ewt-ud-dev.conllu"
        )
    with path.open(encoding="utf-8") as stream:
        return _parse(stream, limit)


def parse_conllu(text: str, limit: int | None = None) -> list[Sentence]:
    """Sentences of CoNLL-U ``text`` (see ``read_conllu``)."""
    return _parse(io.StringIO(text), limit)


def relation(deprel: str, subtypes: bool = False) -> str:
    """The UD relation a head is scored on: the base before ':' (``nmod:poss`` → ``nmod``) unless ``subtypes``."""
    return deprel if subtypes else deprel.split(":", 1)[0]


@dataclass(frozen=True)
class Encoded:
    """One tokenised sentence: piece ids, the fast tokenizer's word ids, and the word → pieces groups.

    ``groups`` has W = len(sentence) + 2 entries: the leading special token, one per word, the trailing one;
    ``index`` is the sentence's position in the list given to ``encode``.
    """

    index: int
    sentence: Sentence
    input_ids: tuple[int, ...]
    word_ids: tuple[int | None, ...]
    groups: tuple[tuple[int, ...], ...]

    def __len__(self) -> int:
        return len(self.input_ids)


def encode(
    tokenizer: Any, sentences: Sequence[Sentence], max_length: int, keep: int | None = None
) -> tuple[list[Encoded], dict[str, int]]:
    """Tokenise each sentence's words; returns the kept ones and counts of skipped ones.

    Skipped: ``too_long`` (more than ``max_length`` pieces with specials; Clark skips, never truncates) and
    ``unaligned`` (a word the tokenizer turns into no piece, or no special token at either end). With ``keep``,
    stops once that many are kept: the counts are then those of the sentences before the last one kept.
    """
    if not getattr(tokenizer, "is_fast", False):  # MistralCommonBackend has no is_fast
        raise ValueError("probe-syntax needs a fast tokenizer (word_ids() gives the word alignment)")
    kept: list[Encoded] = []
    skipped = {"too_long": 0, "unaligned": 0}
    for index, sentence in enumerate(sentences):
        if keep is not None and len(kept) >= keep:
            break
        enc = tokenizer(list(sentence.words), is_split_into_words=True, truncation=False)
        ids = list(enc["input_ids"])
        word_ids = enc.word_ids()
        if len(ids) > max_length:
            skipped["too_long"] += 1
            continue
        groups = word_groups(word_ids)
        inner = [word_ids[g[0]] for g in groups[1:-1]]
        if (
            len(groups) != len(sentence) + 2
            or word_ids[0] is not None
            or word_ids[-1] is not None
            or inner != list(range(len(sentence)))
        ):
            skipped["unaligned"] += 1
            continue
        kept.append(Encoded(index, sentence, tuple(ids), tuple(word_ids), tuple(tuple(g) for g in groups)))
    return kept, skipped


def skip_message(skipped: Mapping[str, int], used: int, max_length: int | None, source: str, remedy: str) -> str:
    """The one warning of a pass over sentences that skipped some (:func:`encode`'s counts): how many of the
    sentences read, why, the length limit, and which sentences were measured; ``remedy`` says how to include the
    long ones."""
    too_long, unaligned = int(skipped.get("too_long", 0)), int(skipped.get("unaligned", 0))
    reasons = [f"{too_long} longer than {max_length} word pieces"] if too_long else []
    reasons += [f"{unaligned} not aligned to words by the tokenizer"] if unaligned else []
    return (
        f"bertwatch: {source}: skipped {too_long + unaligned} of the first {too_long + unaligned + used} sentences "
        f"({', '.join(reasons)}); sentences are skipped, never cut. Measured: the {used} sentences of at most "
        f"{max_length} word pieces among them.{f' To include the long ones, {remedy}.' if too_long and remedy else ''}"
    )


@dataclass
class AttentionBatch:
    """Maps of one padded batch of encoded sentences; ``attn`` is ``[batch, layers, heads, T, T]`` on the CPU."""

    items: list[Encoded]
    input_ids: Tensor
    attention_mask: Tensor
    attn: Tensor

    def __len__(self) -> int:
        return len(self.items)

    def piece_map(self, b: int) -> Tensor:
        """Example ``b``'s map cropped to its real pieces, ``[layers, heads, n, n]``."""
        n = len(self.items[b])
        return self.attn[b, :, :, :n, :n]

    def word_map(self, b: int, mode: str = "mean") -> Tensor:
        """Example ``b``'s word-level map ``[layers, heads, W, W]`` (float32)."""
        return to_word_level(self.piece_map(b), self.items[b].groups, mode)


def pad_encoded(items: Sequence[Encoded], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask`` ``[len(items), longest]`` of encoded sentences."""
    length = max(len(e) for e in items)
    ids = torch.full((len(items), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), length), dtype=torch.long)
    for b, e in enumerate(items):
        ids[b, : len(e)] = torch.tensor(e.input_ids)
        mask[b, : len(e)] = 1
    return ids, mask


def attention_batches(
    model: torch.nn.Module,
    tokenizer: Any,
    encoded: Sequence[Encoded],
    batch_size: int = 32,
    progress: bool | None = None,
    desc: str = "attention",
) -> Iterator[AttentionBatch]:
    """Run ``encoded`` through ``model`` in padded batches (similar lengths together) and yield the maps."""
    from tqdm.auto import tqdm

    from bertwatch.heads.capture import capture

    device = next(model.parameters()).device
    pad = pad_token_id(tokenizer)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=desc, disable=progress is False or not len(order), unit="batch"):
        items = [encoded[i] for i in order[start : start + batch_size]]
        ids, mask = pad_encoded(items, pad)
        with torch.no_grad(), capture(model) as cap:
            model(input_ids=ids.to(device), attention_mask=mask.to(device))
        yield AttentionBatch(items, ids, mask, cap.attentions.float().cpu())


def predict_heads(word_map: Tensor | np.ndarray) -> np.ndarray:
    """Clark's single-head parser: predicted head (0-based word) of every word, ``[2, layers, heads, n]``.

    ``word_map`` is ``[layers, heads, W, W]`` with [CLS] first and [SEP] last. Their rows and columns are
    dropped and the diagonal is zeroed; direction 0 ("dep->head") takes argmax over a word's row, direction 1
    ("head->dep") over its column, i.e. the word that attends to it most.
    """
    a = torch.as_tensor(word_map).float()[..., 1:-1, 1:-1].clone()
    a.diagonal(dim1=-2, dim2=-1).zero_()
    return torch.stack([a.argmax(-1), a.argmax(-2)]).numpy()


@dataclass
class _Counts:
    count: int = 0
    correct: np.ndarray | None = None
    baseline: np.ndarray = field(default_factory=lambda: np.zeros(len(OFFSETS), dtype=np.int64))


class HeadAccuracy:
    """Per relation, how often each head (both directions) and each fixed offset finds a word's gold head.

    Every word counts towards its relation and towards "all" (root and punct included, as in Clark's table);
    a root word is never right, since ROOT is never predicted.
    """

    def __init__(self, layers: int, heads: int, subtypes: bool = False) -> None:
        self.layers, self.heads, self.subtypes = layers, heads, subtypes
        self._counts: dict[str, _Counts] = {}
        self.sentences = 0

    def add(self, word_map: Tensor | np.ndarray, sentence: Sentence) -> None:
        """Score one sentence's word-level map ``[layers, heads, W, W]``."""
        n = len(sentence)
        if tuple(word_map.shape) != (self.layers, self.heads, n + 2, n + 2):
            raise ValueError(f"word map {tuple(word_map.shape)} does not fit {n} words with [CLS]/[SEP]")
        gold = np.asarray(sentence.heads) - 1
        hits = predict_heads(word_map) == gold
        positions = np.arange(n)
        offset_hits = np.stack([(positions + k == gold) & (positions + k >= 0) for k in OFFSETS])
        rels = np.array([relation(r, self.subtypes) for r in sentence.deprels])
        for name in (ALL, *sorted(set(rels))):
            sel = slice(None) if name == ALL else rels == name
            counts = self._counts.setdefault(name, _Counts())
            correct = hits[..., sel].sum(-1)
            counts.correct = correct if counts.correct is None else counts.correct + correct
            counts.baseline += offset_hits[:, sel].sum(-1)
            counts.count += n if name == ALL else int(np.count_nonzero(sel))
        self.sentences += 1

    def accuracy(self, name: str) -> np.ndarray:
        """Accuracy of every head for relation ``name``, ``[2, layers, heads]`` (direction first)."""
        counts = self._counts[name]
        return counts.correct / max(counts.count, 1)

    def relations(self) -> list[str]:
        """The relations seen: "all" first, then by count (most frequent first)."""
        rest = sorted((r for r in self._counts if r != ALL), key=lambda r: (-self._counts[r].count, r))
        return ([ALL] if ALL in self._counts else []) + rest

    def result(self) -> dict[str, dict[str, Any]]:
        """``{relation: {count, best_layer, best_head, best_accuracy, direction, baseline_accuracy,
        baseline_offset, accuracy: {direction: [layers][heads]}}}``; layers and heads from 0."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.relations():
            counts = self._counts[name]
            acc = self.accuracy(name)
            d, l, h = np.unravel_index(int(np.argmax(acc)), acc.shape)
            k = int(np.argmax(counts.baseline))
            out[name] = {
                "count": counts.count,
                "best_layer": int(l),
                "best_head": int(h),
                "best_accuracy": float(acc[d, l, h]),
                "direction": DIRECTIONS[int(d)],
                "baseline_accuracy": float(counts.baseline[k] / max(counts.count, 1)),
                "baseline_offset": OFFSETS[k],
                "accuracy": {DIRECTIONS[i]: np.round(acc[i], 5).tolist() for i in range(len(DIRECTIONS))},
            }
        return out


def syntax_figure(
    relations: Mapping[str, Mapping[str, Any]], path: str | Path, min_count: int = 50, title: str = ""
) -> Path:
    """Bars of the best head's accuracy against the best fixed offset, per relation with ≥ ``min_count`` words."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [r for r, v in relations.items() if v["count"] >= min_count] or list(relations)
    best = [relations[r]["best_accuracy"] for r in names]
    base = [relations[r]["baseline_accuracy"] for r in names]
    labels = [
        f"{r} (L{relations[r]['best_layer']} H{relations[r]['best_head']}"
        f"{'ᵀ' if relations[r]['direction'] == DIRECTIONS[1] else ''}, n={relations[r]['count']})"
        for r in names
    ]
    fig = Figure(figsize=(8, 0.32 * len(names) + 1.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y = np.arange(len(names))
    ax.barh(y - 0.2, best, height=0.4, label="best head", color="#3b6ea8")
    ax.barh(y + 0.2, base, height=0.4, label="best fixed offset", color="#c8c8c8")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (heads numbered from 0; ᵀ = head→dependent)")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title or "Best single head per dependency relation vs. fixed-offset baseline", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def training_treebank(conllu: Path) -> Path | None:
    """The training treebank next to a dev/test file (``en_ewt-ud-dev.conllu`` → ``en_ewt-ud-train.conllu``)."""
    for split in ("-dev.", "-test.", "dev", "test"):
        if split in conllu.name:
            candidate = conllu.with_name(conllu.name.replace(split, split.replace(split.strip("-."), "train"), 1))
            if candidate.is_file():
                return candidate
    return None
