"""One pass of a model over encoded sentences that gathers every linguistic analysis at once.

The pass feeds Clark's syntactic heads (``syntax``), Kovaleva's attention to word classes and [CLS] targets
(``wordclass``), Clark's head clustering (``clustering``) and the examples of the parsing probes (``parsing``);
``bertwatch probe-syntax`` (``bertwatch/cli/probe_syntax.py``) runs it and writes the files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bertwatch.linguistics.syntax import Encoded, HeadAccuracy

__all__ = ["DEFAULT_CLUSTER_LIMIT", "DEFAULT_PROBE_TRAIN_LIMIT", "Scan", "scan"]

DEFAULT_PROBE_TRAIN_LIMIT = 2000
DEFAULT_CLUSTER_LIMIT = 1000
_BEHAVIOUR_STATS = ("next", "prev", "entropy", "cls_mass", "sep_mass", "punct_mass")


@dataclass
class Scan:
    """What one pass over encoded sentences gathered; grids are ``[layers, heads]`` numpy arrays."""

    sentences: int = 0
    accuracy: HeadAccuracy | None = None
    classes: dict[str, np.ndarray] = field(default_factory=dict)
    cls_targets: dict[str, np.ndarray] = field(default_factory=dict)
    behaviour: dict[str, np.ndarray] = field(default_factory=dict)
    distances: Any = None
    examples: list = field(default_factory=list)


def scan(
    model: torch.nn.Module,
    tokenizer: Any,
    encoded: Sequence[Encoded],
    *,
    syntax: bool = True,
    wordclass: bool = True,
    cluster_limit: int = 0,
    probe_examples: bool = False,
    word_mode: str = "mean",
    subtypes: bool = False,
    batch_size: int = 32,
    progress: bool | None = None,
    desc: str = "attention",
) -> Scan:
    """One pass of ``encoded`` through ``model`` feeding every requested analysis."""
    from bertwatch.heads.capture import model_shape
    from bertwatch.heads.maps.stats import StatsAccumulator, compute_stats
    from bertwatch.heads.roles import token_roles
    from bertwatch.linguistics.clustering import HeadDistances
    from bertwatch.linguistics.parsing import make_example
    from bertwatch.linguistics.syntax import attention_batches
    from bertwatch.linguistics.wordclass import class_attention, cls_targets, token_masks, ud_word_classes

    layers, heads = model_shape(model)
    out = Scan(sentences=len(encoded))
    out.accuracy = HeadAccuracy(layers, heads, subtypes) if syntax else None
    distances = HeadDistances(layers, heads) if cluster_limit else None
    cluster_ids = {e.index for e in encoded[:cluster_limit]}
    classes, targets, behaviour = StatsAccumulator(), StatsAccumulator(), StatsAccumulator()
    embedding = model.get_input_embeddings().weight.detach().float().cpu() if probe_examples else None
    examples: dict[int, Any] = {}
    for batch in attention_batches(model, tokenizer, encoded, batch_size, progress, desc):
        if syntax or probe_examples:
            for b, item in enumerate(batch.items):
                word_map = batch.word_map(b, word_mode)
                if out.accuracy is not None:
                    out.accuracy.add(word_map, item.sentence)
                if embedding is not None:
                    vectors = torch.stack([embedding[batch.input_ids[b, list(g)]].mean(0) for g in item.groups[1:-1]])
                    examples[item.index] = make_example(word_map, item.sentence.heads, item.sentence.punct, vectors)
        if wordclass or distances is not None:
            roles = token_roles(batch.input_ids, batch.attention_mask, tokenizer)
            behaviour.add(compute_stats(batch.attn, roles, _BEHAVIOUR_STATS))
        if wordclass:
            masks = token_masks(
                [ud_word_classes(e.sentence) for e in batch.items],
                [e.word_ids for e in batch.items],
                batch.input_ids.shape[1],
            )
            classes.add(class_attention(batch.attn, roles.real, masks))
            types = {
                "cls": roles.cls,
                "sep": roles.sep,
                "punct": roles.punct,
                "other": roles.real & ~roles.cls & ~roles.sep & ~roles.punct,
                **masks,
            }
            targets.add(cls_targets(batch.attn, roles.cls, types))
        if distances is not None:
            for b, item in enumerate(batch.items):
                if item.index in cluster_ids:
                    distances.add(batch.piece_map(b))
    if encoded:
        out.classes = {k: v.numpy() for k, v in classes.result().items()}
        out.cls_targets = {k: v.numpy() for k, v in targets.result().items()}
        out.behaviour = {k: v.numpy() for k, v in behaviour.result().items()}
    out.distances = distances
    out.examples = [examples[i] for i in sorted(examples)]
    return out
