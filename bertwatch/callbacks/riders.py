"""Riders: what rides on the shared probe pass (``BertWatchCallback(word_classes=True, head_clusters=True)``).

Each is a ``Rider`` (measured on the probe set during training; the statistics of a saved model on texts are
``bertwatch.analysis``), made once when its callback joins the run (:func:`riders_for`) and ridden on every pass the
callback is due at: the probe pass hands it every probe batch's maps (``consume``), then asks for its ``RiderOutput``
(``finish``: grids and other records, values that ``callbacks.publisher`` writes), after which it starts over for the
next pass. They never touch the model, except ``UDWordClassPass``, which runs its own annotated sentences through it
in ``finish``.

- ``WordClassPass`` (``word_classes=True``): Kovaleva et al. 2019's attention to word classes (Sec 4.4) and the
  targets of [CLS] (Sec 4.5) per head, logged as ``wordclass_<class>`` and ``cls_target_<class>`` grids. The
  classes come from a small rule set on the probe tokens (closed word lists): pronouns, subject and object
  pronouns, negation. With UD annotations (``word_classes="dev.conllu"``) nouns, verbs, subjects, objects, … come
  from the treebank instead: ``callbacks.word_classes.UDWordClassPass``.
- ``HeadClusterPass``: Clark et al. 2019's JS distances between heads and their 2-D MDS map at every probe step,
  aligned to the previous step by an orthogonal Procrustes fit so that heads move smoothly; logged as the head
  embedding ``bertwatch/clustering/js_mds_training`` at each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from bertwatch.callbacks.word_classes import UDWordClassPass, WordClassBatches
from bertwatch.core.stat_names import RULE_CLASSES
from bertwatch.heads.maps.stats import StatsAccumulator
from bertwatch.heads.roles import TokenRoles
from bertwatch.linguistics.clustering import HeadDistances, mds_embedding, procrustes_align
from bertwatch.linguistics.wordclass import NEGATION_WORDS, class_attention, cls_targets
from bertwatch.probe.records import HeadEmbedding, Rider, RiderOutput

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.probe.probe_context import ProbeContext

__all__ = [
    "ClusterTrack",
    "HeadClusterPass",
    "WordClassPass",
    "riders_for",
    "rule_word_classes",
]

SUBJECT_PRONOUNS = frozenset({"i", "he", "she", "we", "they", "who"})
OBJECT_PRONOUNS = frozenset({"me", "him", "us", "them", "whom"})
OTHER_PRONOUNS = frozenset(
    {"you", "it", "her", "my", "your", "his", "its", "our", "their", "mine", "yours", "hers", "ours", "theirs"}
    | {"myself", "yourself", "himself", "herself", "itself", "ourselves", "themselves", "this", "that", "these"}
    | {"those", "someone", "something", "anyone", "anything", "everyone", "everything"}
)
EMBEDDING_NAME = "js_mds_training"


def _word(token: str) -> str:
    """A word piece without WordPiece / byte-level BPE / sentencepiece markers, lower-cased."""
    return token.removeprefix("##").removeprefix("Ġ").removeprefix("▁").lower()


def rule_word_classes(tokens: Sequence[str]) -> dict[str, list[bool]]:
    """Per token: pron (personal, possessive, reflexive, demonstrative, indefinite pronouns), subj (nominative
    pronouns), obj (accusative pronouns), neg (``wordclass.NEGATION_WORDS``). Word-continuation pieces never match."""
    out: dict[str, list[bool]] = {name: [] for name in RULE_CLASSES}
    for token in tokens:
        word = "" if token.startswith("##") else _word(token)
        out["subj"].append(word in SUBJECT_PRONOUNS)
        out["obj"].append(word in OBJECT_PRONOUNS)
        out["pron"].append(word in SUBJECT_PRONOUNS | OBJECT_PRONOUNS | OTHER_PRONOUNS)
        out["neg"].append(word in NEGATION_WORDS)
    return out


def _masks(tokens: Sequence[Sequence[str]], real: Tensor) -> dict[str, Tensor]:
    """``{class: bool [batch, T]}``: each example's real tokens, in order, on its real positions."""
    masks = {name: torch.zeros(real.shape, dtype=torch.bool) for name in RULE_CLASSES}
    for b, example in enumerate(tokens):
        positions = real[b].nonzero().flatten().tolist()
        for name, flags in rule_word_classes(example).items():
            for position, flag in zip(positions, flags):
                masks[name][b, position] = flag
    return masks


class WordClassPass:
    """Attention to word classes and [CLS] targets of every head over each probe pass (see the module doc)."""

    def __init__(self, tokens: Sequence[Sequence[str]]) -> None:
        self.tokens = tokens
        self.accumulator = StatsAccumulator()

    def consume(self, rows: Sequence[int], attn: Tensor, roles: TokenRoles) -> None:
        """Add a unit ``[B, L, H, T, T]`` of the probe examples ``rows``."""
        real = roles.real.bool().cpu()
        masks = _masks([self.tokens[r] for r in rows], real)
        values = class_attention(attn, roles.real, masks)
        per_example = {f"wordclass_{name}": value for name, value in values.items()}
        for name, value in cls_targets(attn, roles.cls, masks).items():
            per_example[f"cls_target_{name}"] = value
        self.accumulator.add(per_example)

    def finish(self) -> RiderOutput:
        """``{name: [layers, heads]}`` grids of the pass: NaN where no probe example has the class (then the next
        pass starts from none)."""
        grids, self.accumulator = self.accumulator.result(), StatsAccumulator()
        return RiderOutput({name: grid.numpy() for name, grid in grids.items()})


@dataclass
class ClusterTrack:
    """The head map of the last probe step of a run (``[K, 2]``), which the next step's map is aligned to."""

    previous: np.ndarray | None = None


class HeadClusterPass:
    """JS distances between heads on the first ``num_examples`` probe examples of each pass and their MDS map,
    aligned to the track's previous map, which it then replaces."""

    def __init__(self, layers: int, heads: int, track: ClusterTrack, num_examples: int = 8) -> None:
        self.distances = HeadDistances(layers, heads)
        self.track = track
        self.num_examples = num_examples

    def consume(self, rows: Sequence[int], attn: Tensor, roles: TokenRoles) -> None:
        take = [k for k, row in enumerate(rows) if row < self.num_examples]
        if take:
            picked = torch.tensor(take, device=attn.device)
            lengths = roles.real.index_select(0, picked).sum(-1).tolist()
            self.distances.add_batch(attn.index_select(0, picked).detach().float().cpu(), lengths)

    def finish(self) -> RiderOutput:
        """The heads' map of the pass as the embedding ``js_mds_training`` (no grids); the next pass starts from
        no distances."""
        distances, self.distances = self.distances, HeadDistances(self.distances.layers, self.distances.heads)
        coords = mds_embedding(distances.distances, seed=0, n_init=1)
        if self.track.previous is not None:
            coords = procrustes_align(coords, self.track.previous)
        self.track.previous = coords
        return RiderOutput(records=(HeadEmbedding(EMBEDDING_NAME, coords, distances.layers, distances.heads),))


def riders_for(
    context: ProbeContext,
    word_classes: bool,
    track: ClusterTrack | None,
    cluster_examples: int = 8,
    annotated: WordClassBatches | None = None,
) -> list[Rider]:
    """The riders asked for, over ``context``'s probe set: word classes by token rules, head clusters when
    ``track`` is given, and word classes on ``annotated`` UD sentences when given; made once a run, for all its
    passes."""
    out: list[Rider] = []
    if word_classes:
        out.append(WordClassPass(context.probe.tokens))
    if annotated is not None:
        out.append(UDWordClassPass(context, annotated))
    if track is not None:
        out.append(HeadClusterPass(context.layers, context.heads, track, cluster_examples))
    return out
