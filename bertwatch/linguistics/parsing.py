"""Clark et al. 2019 (Sec 5) dependency-parsing probes on attention maps, scored by UAS without punctuation.

For a dependent d and a candidate head c (a word, or ROOT), with K = layers·heads word-level maps A_k:

* attention-only: ``score(d, c) = Σ_k w_k A_k[d, c] + u_k A_k[c, d]``, and
  ``score(d, ROOT) = Σ_k s_k A_k[d, [CLS]] + e_k A_k[d, [SEP]]``;
* attention + words: the 2K weights come from a linear map of the pair ``v_d ⊕ v_c`` (``v_ROOT`` is learned).
  Clark used fixed 100-d GloVe vectors; offline we use the model's own input word embeddings (non-contextual,
  frozen; a word's vector is the mean of its pieces' rows).

``p(c | d)`` is a softmax over ROOT and the other words; training minimises the summed cross-entropy with Adam
(lr 0.002), one sentence per step, as Clark did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = [
    "ProbeExample",
    "make_example",
    "pair_features",
    "AttentionProbe",
    "AttentionWordProbe",
    "train_probe",
    "probe_uas",
    "right_branching_uas",
]


@dataclass(frozen=True)
class ProbeExample:
    """One sentence for the probes.

    ``maps`` ``[K, W, W]`` word-level maps of all heads ([CLS] first, [SEP] last, W = n + 2); ``heads`` long
    ``[n]`` gold heads (0 = ROOT, else the 1-based word); ``scored`` bool ``[n]`` (False for punctuation);
    ``vectors`` ``[n, E]`` word vectors or None.
    """

    maps: Tensor
    heads: Tensor
    scored: Tensor
    vectors: Tensor | None = None

    def __len__(self) -> int:
        return int(self.heads.shape[0])


def make_example(
    word_map: Tensor, heads: Sequence[int], punct: Sequence[bool], vectors: Tensor | None = None
) -> ProbeExample:
    """A ``ProbeExample`` from a word-level map ``[layers, heads, W, W]`` (kept as float16 to save memory)."""
    k = word_map.shape[0] * word_map.shape[1]
    maps = word_map.reshape(k, *word_map.shape[-2:]).to(torch.float16).contiguous()
    if maps.shape[-1] != len(heads) + 2:
        raise ValueError(f"a word map of size {maps.shape[-1]} does not fit {len(heads)} words + [CLS]/[SEP]")
    return ProbeExample(
        maps=maps,
        heads=torch.as_tensor(list(heads), dtype=torch.long),
        scored=~torch.as_tensor(list(punct), dtype=torch.bool),
        vectors=None if vectors is None else vectors.detach().to(torch.float32),
    )


def pair_features(maps: Tensor) -> tuple[Tensor, Tensor]:
    """Word-pair features ``[n, n, 2K]`` (A_k[d, c], then A_k[c, d]) and ROOT features ``[n, 2K]``
    (A_k[d, [CLS]], then A_k[d, [SEP]]) from maps ``[K, W, W]``; row = dependent d, column = candidate c."""
    a = maps.float()
    words = a[:, 1:-1, 1:-1]
    pair = torch.cat([words.permute(1, 2, 0), words.permute(2, 1, 0)], dim=-1)
    root = torch.cat([a[:, 1:-1, 0].T, a[:, 1:-1, -1].T], dim=-1)
    return pair, root


def _assemble(pair_scores: Tensor, root_scores: Tensor) -> Tensor:
    """Scores ``[n, n + 1]``: column 0 = ROOT, column c = word c (1-based); a word never heads itself."""
    n = pair_scores.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=pair_scores.device)
    return torch.cat([root_scores[:, None], pair_scores.masked_fill(eye, -math.inf)], dim=1)


class AttentionProbe(nn.Module):
    """Clark's attention-only probe: one weight per map and direction, plus ROOT weights on [CLS]/[SEP]."""

    def __init__(self, num_maps: int) -> None:
        super().__init__()
        self.pair = nn.Parameter(torch.zeros(2 * num_maps))
        self.root = nn.Parameter(torch.zeros(2 * num_maps))
        self.bias_root = nn.Parameter(torch.zeros(()))

    def forward(self, example: ProbeExample) -> Tensor:
        """Scores ``[n, n + 1]`` of every candidate head (column 0 = ROOT) for every word."""
        pair, root = pair_features(example.maps.to(self.pair.device))
        return _assemble(pair @ self.pair, root @ self.root + self.bias_root)


class AttentionWordProbe(nn.Module):
    """Clark's attention-and-words probe: the map weights are a linear function of the word pair's vectors."""

    def __init__(self, num_maps: int, dim: int) -> None:
        super().__init__()
        self.dependent = nn.Linear(dim, 2 * num_maps)
        self.candidate = nn.Linear(dim, 2 * num_maps, bias=False)
        self.root_vector = nn.Parameter(torch.zeros(dim))
        self.root = nn.Parameter(torch.zeros(2 * num_maps))

    def forward(self, example: ProbeExample) -> Tensor:
        """Scores ``[n, n + 1]``; the weight of pair (d, c) is ``W [v_d ⊕ v_c] + b``."""
        if example.vectors is None:
            raise ValueError("the attention+words probe needs word vectors in every example")
        device = self.root.device
        pair, root = pair_features(example.maps.to(device))
        v = example.vectors.to(device)
        dep = self.dependent(v)
        weights = dep[:, None, :] + self.candidate(v)[None, :, :]
        root_weights = dep + self.candidate(self.root_vector) + self.root
        return _assemble((weights * pair).sum(-1), (root_weights * root).sum(-1))


def train_probe(
    probe: nn.Module,
    examples: Sequence[ProbeExample],
    epochs: int = 1,
    lr: float = 0.002,
    seed: int = 0,
    progress: bool | None = None,
) -> list[float]:
    """Adam, one sentence per step, summed cross-entropy over its words; returns the mean loss per epoch."""
    from tqdm.auto import tqdm

    if not examples:
        raise ValueError("no training sentences for the probe")
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(probe.parameters(), lr=lr)
    probe.train()
    losses = []
    for epoch in range(epochs):
        total = 0.0
        order = torch.randperm(len(examples), generator=generator).tolist()
        for i in tqdm(
            order, desc=f"{type(probe).__name__} epoch {epoch + 1}", disable=progress is False, unit="sent", leave=False
        ):
            example = examples[i]
            scores = probe(example)
            loss = nn.functional.cross_entropy(scores, example.heads.to(scores.device), reduction="sum")
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item()
        losses.append(total / len(examples))
    probe.eval()
    return losses


@torch.no_grad()
def probe_uas(probe: nn.Module, examples: Sequence[ProbeExample]) -> float:
    """Unlabelled attachment score of the probe's argmax heads over the non-punctuation words."""
    correct = total = 0
    for example in examples:
        predicted = probe(example).argmax(-1).cpu()
        correct += int(((predicted == example.heads) & example.scored).sum())
        total += int(example.scored.sum())
    return correct / max(total, 1)


def right_branching_uas(examples: Sequence[ProbeExample]) -> float:
    """UAS of "every word's head is the next word, the last word is the root" (Clark's right-branching row)."""
    correct = total = 0
    for example in examples:
        n = len(example)
        predicted = torch.arange(2, n + 2)
        predicted[-1] = 0
        correct += int(((predicted == example.heads) & example.scored).sum())
        total += int(example.scored.sum())
    return correct / max(total, 1)
