"""Head clustering (Clark et al. 2019, Sec 6): Jensen-Shannon distances between all heads, then 2-D MDS.

D(h1, h2) = Σ over examples Σ over query tokens i of JS(P'_{h1}[i, :], P'_{h2}[i, :]), with Clark's smoothing
P' = 0.999·P + 0.001/n and natural logarithms: a sum over tokens, so its scale grows with the data but the
embedding's shape does not. Heads are numbered row-major, k = layer * heads + head.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bertwatch.heads.maps.row_reductions import JS_SMOOTHING

__all__ = ["JS_SMOOTHING", "HeadDistances", "js_rows", "mds_embedding", "procrustes_align", "clustering_figure"]

_CHUNK_ELEMENTS = 1 << 22


def _smooth(p: Tensor, smoothing: float) -> Tensor:
    n = p.shape[-1]
    return smoothing * p + (1.0 - smoothing) / n


def js_rows(p: Tensor, q: Tensor, smoothing: float = JS_SMOOTHING) -> Tensor:
    """Row-wise JS divergence (nats) of smoothed distributions ``p``, ``q`` ``[..., n]`` → ``[...]``."""
    p, q = _smooth(p.double(), smoothing), _smooth(q.double(), smoothing)
    m = 0.5 * (p + q)
    return 0.5 * (torch.xlogy(p, p) + torch.xlogy(q, q)).sum(-1) - torch.xlogy(m, m).sum(-1)


class HeadDistances:
    """Accumulates Clark's JS distance between every pair of heads over examples: ``[K, K]``, K = layers*heads.

    Only pairs k1 <= k2 are computed (the distance is symmetric), per example in float32, summed in float64.
    """

    def __init__(self, layers: int, heads: int, smoothing: float = JS_SMOOTHING) -> None:
        self.layers, self.heads, self.smoothing = layers, heads, smoothing
        k = layers * heads
        self._sum = torch.zeros(k, k, dtype=torch.float64)
        self.examples = 0
        self.tokens = 0

    def add(self, maps: Tensor) -> None:
        """Add one example's map cropped to its real tokens, ``[layers, heads, n, n]``."""
        if maps.dim() != 4 or tuple(maps.shape[:2]) != (self.layers, self.heads):
            raise ValueError(f"maps must be [{self.layers}, {self.heads}, n, n], got {tuple(maps.shape)}")
        n = maps.shape[-1]
        k = self.layers * self.heads
        p = _smooth(maps.reshape(k, n, n).float(), self.smoothing)
        half_plogp = 0.5 * torch.xlogy(p, p).sum(-1)
        start = 0
        while start < k:
            stop = min(k, start + max(1, _CHUNK_ELEMENTS // max((k - start) * n * n, 1)))
            m = p[start:stop, None] + p[None, start:]
            m.mul_(0.5)
            mlogm = torch.xlogy(m, m, out=m).sum(-1)
            js = (half_plogp[start:stop, None] + half_plogp[None, start:]).sub_(mlogm).clamp_min_(0)
            self._sum[start:stop, start:] += js.sum(-1).double()
            start = stop
        self.examples += 1
        self.tokens += n

    def add_batch(self, attn: Tensor, lengths: Sequence[int]) -> None:
        """Add a padded batch ``[batch, layers, heads, T, T]``; example b has ``lengths[b]`` real tokens."""
        for b, n in enumerate(lengths):
            self.add(attn[b, :, :, :n, :n])

    @property
    def distances(self) -> np.ndarray:
        """The symmetric distance matrix ``[K, K]`` (float64, zero diagonal)."""
        upper = np.triu(self._sum.numpy(), 1)
        d = upper + upper.T
        return d


def mds_embedding(
    distances: np.ndarray, seed: int = 0, n_init: int = 5, eps: float = 1e-10, max_iter: int = 1000
) -> np.ndarray:
    """Metric MDS of a precomputed dissimilarity matrix into 2-D, Clark's settings: ``[K, 2]``."""
    from sklearn.manifold import MDS

    params = inspect.signature(MDS.__init__).parameters
    kwargs: dict[str, Any] = dict(n_components=2, n_init=n_init, eps=eps, max_iter=max_iter, random_state=seed)
    if "metric_mds" in params:  # scikit-learn >= 1.8
        kwargs.update(metric_mds=True, metric="precomputed")
    else:
        kwargs.update(metric=True, dissimilarity="precomputed")
    if "init" in params:
        kwargs["init"] = "random"
    if "normalized_stress" in params:
        kwargs["normalized_stress"] = False
    d = np.asarray(distances, dtype=np.float64)
    scale = float(d.max()) or 1.0
    return MDS(**kwargs).fit_transform(d / scale) * scale


def clustering_figure(
    coords: np.ndarray,
    layers: int,
    heads: int,
    labels: Sequence[Sequence[str]] | None,
    path: str | Path,
    marks: Mapping[tuple[int, int], str] | None = None,
    title: str = "",
) -> Path:
    """Two panels of the embedded heads: coloured by layer, and by behaviour label (Clark Fig 6).

    ``labels`` ``[layers][heads]`` (e.g. ``bertwatch.heads.maps.stats.behaviour_label_lists``; "" = none); ``marks``
    names some heads (e.g. the best head of a relation) with text next to their point.
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    coords = np.asarray(coords)
    layer_of = np.repeat(np.arange(layers), heads)
    fig = Figure(figsize=(12, 5.4))
    FigureCanvasAgg(fig)
    ax_layer, ax_label = fig.subplots(1, 2)
    sc = ax_layer.scatter(coords[:, 0], coords[:, 1], c=layer_of, cmap="viridis", s=22)
    fig.colorbar(sc, ax=ax_layer, label="layer (from 0)")
    ax_layer.set_title("coloured by layer", fontsize=10)
    flat = [lab or "other" for row in (labels or [[""] * heads] * layers) for lab in row]
    names = sorted(set(flat), key=lambda s: (s == "other", s))
    cmap = colormaps["tab10"]
    for i, name in enumerate(names):
        sel = np.array([f == name for f in flat])
        colour = "#bbbbbb" if name == "other" else cmap(i % 10)
        ax_label.scatter(coords[sel, 0], coords[sel, 1], s=22, color=colour, label=name)
    ax_label.legend(fontsize=8, loc="best")
    ax_label.set_title("coloured by behaviour", fontsize=10)
    for (layer, head), text in (marks or {}).items():
        x, y = coords[layer * heads + head]
        for ax in (ax_layer, ax_label):
            ax.annotate(f"L{layer} H{head} {text}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for ax in (ax_layer, ax_label):
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title or "Heads embedded by Jensen-Shannon distance (MDS)", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def procrustes_align(coords: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``coords`` ``[K, 2]`` rotated (or reflected) and shifted onto ``reference`` ``[K, 2]`` by least squares,
    without scaling, so that an MDS map of one step lines up with the previous step's (MDS fixes neither)."""
    a = np.asarray(coords, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"coords {a.shape} and reference {b.shape} differ")
    a_mean, b_mean = a.mean(0), b.mean(0)
    u, _, vt = np.linalg.svd((a - a_mean).T @ (b - b_mean))
    return (a - a_mean) @ (u @ vt) + b_mean
