"""Static figures (matplotlib, no display needed): head grids as heatmaps and Clark et al.'s Fig 2 dots."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["grid_heatmap", "mass_gap_figure", "special_token_figure", "png_bytes", "pyplot"]


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def png_bytes(figure) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    plt = pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def grid_heatmap(
    grid: np.ndarray,
    title: str,
    path: str | Path | None = None,
    labels: Sequence[Sequence[str]] | None = None,
    center: float | None = None,
    colorbar_label: str = "",
    cmap: str | None = None,
) -> bytes:
    """A labelled ``[layers, heads]`` heatmap (layers and heads numbered from 1, as in the papers); PNG bytes.

    ``center`` draws a diverging scale (``RdBu_r`` unless ``cmap`` says otherwise) symmetric around that value;
    ``labels`` writes short marks into the cells, white on dark cells. NaN cells are left grey.
    """
    import matplotlib

    plt = pyplot()
    grid = np.asarray(grid, dtype=float)
    layers, heads = grid.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.42 * heads + 2), max(2.6, 0.36 * layers + 1.2)))
    finite = grid[np.isfinite(grid)]
    span = None
    if center is not None and finite.size:
        span = max(float(np.max(np.abs(finite - center))), 1e-12)
        colors = matplotlib.colormaps[cmap or "RdBu_r"].with_extremes(bad="#bbbbbb")
        image = ax.imshow(grid, cmap=colors, vmin=center - span, vmax=center + span, aspect="auto")
    else:
        colors = matplotlib.colormaps[cmap or "viridis"].with_extremes(bad="#bbbbbb")
        image = ax.imshow(grid, cmap=colors, aspect="auto")
    ax.set_xticks(range(heads), [str(h + 1) for h in range(heads)])
    ax.set_yticks(range(layers), [str(l + 1) for l in range(layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=10)
    if labels is not None:
        for l in range(layers):
            for h in range(heads):
                if labels[l][h]:
                    dark = span is None or abs(np.nan_to_num(grid[l, h] - center)) > 0.6 * span
                    color = "white" if dark else "black"
                    ax.text(h, l, labels[l][h][:4], ha="center", va="center", fontsize=8, color=color)
    fig.colorbar(image, ax=ax, label=colorbar_label)
    return _saved(fig, path)


def special_token_figure(grids: Mapping[str, np.ndarray], path: str | Path | None = None) -> bytes:
    """Clark et al. 2019 Fig 2: per layer, each head's mass on [CLS], [SEP] and "."/"," as dots, layer mean as a line."""
    plt = pyplot()
    names = [("cls_mass", "[CLS]"), ("sep_mass", "[SEP]"), ("punct_mass", '"." and ","')]
    names = [(n, t) for n, t in names if n in grids]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2), sharey=True, squeeze=False)
    for ax, (name, label) in zip(axes[0], names):
        grid = np.asarray(grids[name], dtype=float)
        layers, heads = grid.shape
        xs = np.arange(1, layers + 1)
        rng = np.random.default_rng(0)
        for l in range(layers):
            ax.scatter(
                np.full(heads, xs[l]) + rng.uniform(-0.15, 0.15, heads), grid[l], s=12, alpha=0.6, color="#3b6ea8"
            )
        ax.plot(xs, np.nanmean(grid, axis=1), color="#c0392b", lw=1.5, label="layer mean")
        _share_by_layer(ax, f"attention to {label}", xs)
    return _finish_panels(fig, axes, "avg. attention", path)


def mass_gap_figure(targets: Sequence[Mapping], path: str | Path | None = None) -> bytes:
    """Per target ([CLS], [SEP]), the mass per layer by each measure (weights, norms, ALTI), the gap between the
    weights and the contributions shaded; ``targets`` as :func:`bertwatch.tb.measures.mass_by_measure` gives them.
    Layers numbered from 1. PNG bytes."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(targets), figsize=(4.4 * len(targets), 3.2), sharey=True, squeeze=False)
    colors = ("#1565c0", "#e65100", "#2e7d32", "#6a1b9a")
    for ax, target in zip(axes[0], targets):
        lines = [(m["label"], np.asarray(m["layerMeans"], dtype=float)) for m in target["measures"]]
        xs = np.arange(1, len(lines[0][1]) + 1)
        for k, (label, ys) in enumerate(lines):
            ax.plot(xs, ys, marker="o", ms=3, lw=1.6, color=colors[k % len(colors)], label=label)
        if target["gaps"] and len(lines) > 1:
            ax.fill_between(xs, lines[0][1], np.nanmin([ys for _, ys in lines[1:]], axis=0), color="#999", alpha=0.15)
        _share_by_layer(ax, f"mass on {target['target']}", xs)
    return _finish_panels(fig, axes, "share, mean over heads", path)


def _share_by_layer(ax: Any, title: str, xs: np.ndarray) -> None:
    """One panel of shares in [0, 1] against layers ``xs`` (numbered from 1)."""
    ax.set_title(title)
    ax.set_xlabel("layer")
    ax.set_xticks(xs)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)


def _finish_panels(fig: Any, axes: Any, ylabel: str, path: str | Path | None) -> bytes:
    """The first panel's y label and legend; the figure as PNG bytes (:func:`_saved`)."""
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].legend(loc="upper left", fontsize=8)
    return _saved(fig, path)


def _saved(fig: Any, path: str | Path | None) -> bytes:
    """The figure as PNG bytes, also written to ``path`` when given."""
    data = png_bytes(fig)
    if path is not None:
        Path(path).write_bytes(data)
    return data


def reference_value(stat: str) -> float | None:
    """The neutral value of a diverging statistic: 1 for cosine similarity, 0 for divergences."""
    if stat == "drift_cosine":
        return 1.0
    if stat == "drift_js":
        return 0.0
    return None
