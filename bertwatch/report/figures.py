"""Static figures (matplotlib, no display needed): head grids as heatmaps and Clark et al.'s Fig 2 dots.

Every colour they draw comes from ``bertwatch/tb/static/colours.json`` through :mod:`bertwatch.tb.colours`, the
table the plugin draws with: both ramps (:func:`diverging_cmap`, :func:`sequential_cmap`), the missing-value grey,
the layers, the series and the marks, so a figure and the plugin's chart of the same values look alike."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.report.changes import ROUNDING, grid_change, reference_value, settled
from bertwatch.tb.colours import (
    diverging_stops,
    higher_is_better,
    layer_hex,
    mark_hex,
    nan_hex,
    sequential_stops,
    series_hex,
    text_on,
)

__all__ = [
    "change_panels",
    "diverging_cmap",
    "grid_heatmap",
    "mass_gap_figure",
    "outlier_figure",
    "special_token_figure",
    "png_bytes",
    "pyplot",
    "sequential_cmap",
    "trajectory_figure",
]


def pyplot():
    """matplotlib.pyplot on the Agg backend, imported on first use (no display needed)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _ramp_cmap(name: str, stops: Sequence[str]):
    """A matplotlib colormap through ``stops`` evenly, as ``scales.js``'s ramp: fine enough (256 entries between
    two stops) that a value's colour is the plugin's to within one unit of a channel; NaN in the plugin's grey."""
    import matplotlib

    cmap = matplotlib.colors.LinearSegmentedColormap.from_list(name, list(stops), N=256 * (len(stops) - 1))
    return cmap.with_extremes(bad=nan_hex())


def diverging_cmap(higher_better: bool = False, part: str = "both"):
    """bertwatch's diverging scale (``bertwatch/tb/static/colours.json``, the plugin's) as a matplotlib colormap,
    low values first: blue below the centre and red above it, reversed when ``higher_better`` (red stays the worse,
    more-drift side); ``part="high"`` is the white-to-red half, ``"low"`` the blue-to-white half. NaN is the
    plugin's grey."""
    stops = diverging_stops()
    middle = len(stops) // 2
    stops = {"both": stops, "high": stops[middle:], "low": stops[: middle + 1]}[part]
    return _ramp_cmap("bertwatch_diverging", stops[::-1] if higher_better else stops)


def sequential_cmap():
    """bertwatch's sequential scale (``colours.json``'s ``sequential``, YlGnBu: the plugin's masses, entropies and
    attention) as a matplotlib colormap, low values light; NaN is the plugin's grey."""
    return _ramp_cmap("bertwatch_sequential", sequential_stops())


def _named_cmap(name: str):
    """The matplotlib colormap ``name`` (a caller's choice), NaN in the plugin's grey."""
    import matplotlib

    return matplotlib.colormaps[name].with_extremes(bad=nan_hex())


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
    higher_better: bool = False,
) -> bytes:
    """A labelled ``[layers, heads]`` heatmap (layers and heads numbered from 0, as everywhere in bertwatch); PNG
    bytes.

    ``center`` draws bertwatch's diverging scale (:func:`diverging_cmap`: red above the centre; ``higher_better``:
    red below the centre, for a quantity whose higher values are better or less drift) symmetric around that value,
    never narrower than float32 rounding of it (rounding noise stays pale); without it, the sequential scale
    (:func:`sequential_cmap`). ``cmap`` names a matplotlib colormap to draw with instead. ``labels`` writes short
    marks into the cells in the plugin's text colour for the cell's colour. NaN cells are the plugin's grey.
    """
    plt = pyplot()
    grid = np.asarray(grid, dtype=float)
    layers, heads = grid.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.42 * heads + 2), max(2.6, 0.36 * layers + 1.2)))
    finite = grid[np.isfinite(grid)]
    span = None
    if center is not None and finite.size:
        span = max(float(np.max(np.abs(finite - center))), ROUNDING * max(abs(center), 1.0))
        colors = _named_cmap(cmap) if cmap else diverging_cmap(higher_better)
        image = ax.imshow(grid, cmap=colors, vmin=center - span, vmax=center + span, aspect="auto")
    else:
        image = ax.imshow(grid, cmap=_named_cmap(cmap) if cmap else sequential_cmap(), aspect="auto")
    _grid_axes(ax, layers, heads)
    ax.set_title(title, fontsize=10)
    if labels is not None:
        for l in range(layers):
            for h in range(heads):
                if labels[l][h]:
                    color = text_on(_cell_rgb(image, grid[l, h]))
                    ax.text(h, l, labels[l][h][:4], ha="center", va="center", fontsize=8, color=color)
    fig.colorbar(image, ax=ax, label=colorbar_label)
    return _saved(fig, path)


def _cell_rgb(image: Any, value: float) -> tuple[int, int, int] | None:
    """The colour ``image`` (a matplotlib image) gives ``value``, as integers; None for NaN."""
    if not np.isfinite(value):
        return None
    rgba = image.cmap(image.norm(value))
    return tuple(int(round(255 * c)) for c in rgba[:3])  # type: ignore[return-value]


def _grid_axes(ax: Any, layers: int, heads: int, fontsize: float | None = None) -> None:
    """Head and layer ticks of a ``[layers, heads]`` image, numbered from 0 (``L2 H7`` is row 2, column 7); a
    per-layer grid (one column) has no head axis."""
    if heads > 1:
        ax.set_xticks(range(heads), [str(h) for h in range(heads)], fontsize=fontsize)
        ax.set_xlabel("head", fontsize=fontsize)
    else:
        ax.set_xticks([])
    ax.set_yticks(range(layers), [str(l) for l in range(layers)], fontsize=fontsize)
    ax.set_ylabel("layer", fontsize=fontsize)


def special_token_figure(grids: Mapping[str, np.ndarray], path: str | Path | None = None) -> bytes:
    """Clark et al. 2019 Fig 2: per layer, each head's mass on [CLS], [SEP] and "."/"," as dots, layer mean as a line
    (the first and second series colours)."""
    plt = pyplot()
    names = [("cls_mass", "[CLS]"), ("sep_mass", "[SEP]"), ("punct_mass", '"." and ","')]
    names = [(n, t) for n, t in names if n in grids]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.2), sharey=True, squeeze=False)
    for ax, (name, label) in zip(axes[0], names):
        grid = np.asarray(grids[name], dtype=float)
        layers, heads = grid.shape
        xs = np.arange(layers)
        rng = np.random.default_rng(0)
        for l in range(layers):
            ax.scatter(
                np.full(heads, xs[l]) + rng.uniform(-0.15, 0.15, heads), grid[l], s=12, alpha=0.6, color=series_hex(0)
            )
        ax.plot(xs, np.nanmean(grid, axis=1), color=series_hex(1), lw=1.5, label="layer mean")
        _share_by_layer(ax, f"attention to {label}", xs)
    return _finish_panels(fig, axes, "avg. attention", path)


def mass_gap_figure(targets: Sequence[Mapping], path: str | Path | None = None) -> bytes:
    """Per target ([CLS], [SEP]), the mass per layer by each measure (weights, norms, ALTI), the gap between the
    weights and the contributions shaded; ``targets`` as :func:`bertwatch.tb.views.heads.measures.mass_by_measure` gives
    them. Each measure in its series colour, as in the plugin's Weight vs contribution card. Layers numbered from 0. PNG
    bytes."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(targets), figsize=(4.4 * len(targets), 3.2), sharey=True, squeeze=False)
    for ax, target in zip(axes[0], targets):
        lines = [(m["label"], np.asarray(m["layerMeans"], dtype=float)) for m in target["measures"]]
        xs = np.arange(len(lines[0][1]))
        for k, (label, ys) in enumerate(lines):
            ax.plot(xs, ys, marker="o", ms=3, lw=1.6, color=series_hex(k), label=label)
        if target["gaps"] and len(lines) > 1:
            gap = np.nanmin([ys for _, ys in lines[1:]], axis=0)
            ax.fill_between(xs, lines[0][1], gap, color=mark_hex("gap"), alpha=0.15)
        _share_by_layer(ax, f"mass on {target['target']}", xs)
    return _finish_panels(fig, axes, "share, mean over heads", path)


def _share_by_layer(ax: Any, title: str, xs: np.ndarray) -> None:
    """One panel of shares in [0, 1] against layers ``xs`` (numbered from 0)."""
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


def change_panels(stat: str, first: tuple[int, Any], last: tuple[int, Any], path: str | Path | None = None) -> bytes:
    """One small figure of a statistic: its ``[layers, heads]`` grid at the first and at the last logged step on one
    shared scale (the sequential one; a drift statistic's diverging one), and the change between them on a diverging
    scale centred at 0 (``first``, ``last``: ``(step, grid)``). A drift statistic is drawn around its unchanged
    value, and values (or changes) within float32 rounding read as unchanged (:mod:`bertwatch.report.changes`); a
    change that is zero everywhere says so. PNG bytes."""
    import matplotlib

    plt = pyplot()
    reference = reference_value(stat)
    a, b = (np.asarray(g, dtype=np.float64) for _, g in (first, last))
    if reference is not None:
        a, b = settled(stat, a, reference), settled(stat, b, reference)
    same_step = first[0] == last[0]
    grids = [(f"step {first[0]}", a)] if same_step else [(f"step {first[0]}", a), (f"step {last[0]}", b)]
    layers, heads = a.shape
    count = len(grids) + (0 if same_step else 1)
    size = (0.2 * heads + 1.5, 0.2 * layers + 0.9)
    fig, axes = plt.subplots(1, count, figsize=(size[0] * count, size[1]), squeeze=False, layout="constrained")
    both = np.concatenate([g.ravel() for _, g in grids])
    both = both[np.isfinite(both)]
    if reference is not None:
        scale = _drift_scale(both - reference, reference, higher_is_better(stat))
    else:
        scale = {"cmap": sequential_cmap()}
        if both.size:
            scale.update(vmin=float(both.min()), vmax=float(both.max()))
    low, high = scale.pop("vmin", 0.0), scale.pop("vmax", 1.0)
    if high <= low:  # one value everywhere: a band around it, the same in both panels
        low, high = low - 0.5 * max(abs(low), 1e-12), high + 0.5 * max(abs(high), 1e-12)
    norm = matplotlib.colors.Normalize(low, high)
    for ax, (title, grid) in zip(axes[0], grids):
        image = ax.imshow(grid, aspect="auto", cmap=scale["cmap"], norm=norm)
        _small_grid(ax, title, layers, heads)
    fig.colorbar(image, ax=list(axes[0][: len(grids)]), fraction=0.05, pad=0.02).ax.tick_params(labelsize=6)
    if not same_step:
        _change_panel(axes[0][-1], grid_change(stat, a, b), last[0] - first[0], higher_is_better(stat))
    return _saved(fig, path)


def _drift_scale(offsets: np.ndarray, reference: float, higher_better: bool) -> dict[str, Any]:
    """Colours of drift values around their unchanged ``reference`` (white), more drift red as in the plugin
    (``higher_better``: higher values are less drift, a cosine): one-sided when every value lies on one side of it
    (JS divergences above 0, cosines below 1), else symmetric; never narrower than rounding."""
    low = float(offsets.min()) if offsets.size else 0.0
    high = float(offsets.max()) if offsets.size else 0.0
    span = max(abs(low), abs(high), ROUNDING)
    if low >= 0:
        part = "low" if higher_better else "high"
        return {"cmap": diverging_cmap(higher_better, part), "vmin": reference, "vmax": reference + span}
    if high <= 0:
        part = "high" if higher_better else "low"
        return {"cmap": diverging_cmap(higher_better, part), "vmin": reference - span, "vmax": reference}
    return {"cmap": diverging_cmap(higher_better), "vmin": reference - span, "vmax": reference + span}


def _small_grid(ax: Any, title: str, layers: int, heads: int) -> None:
    ax.set_title(title, fontsize=8)
    _grid_axes(ax, layers, heads, fontsize=6)


def _change_panel(ax: Any, change: np.ndarray, steps: int, higher_better: bool = False) -> None:
    """The last − first panel of :func:`change_panels`, symmetric around 0 ("no change" written when all 0): red
    up, blue down; for a statistic whose higher values are less drift (``higher_better``), red down."""
    finite = change[np.isfinite(change)]
    span = float(np.max(np.abs(finite))) if finite.size else 0.0
    image = ax.imshow(change, cmap=diverging_cmap(higher_better), vmin=-(span or 1.0), vmax=span or 1.0, aspect="auto")
    _small_grid(ax, f"change over {steps} steps", *change.shape)
    if span == 0.0:
        ax.text(0.5, 0.5, "no change", transform=ax.transAxes, ha="center", va="center", fontsize=9)
    else:
        ax.figure.colorbar(image, ax=ax, fraction=0.08, pad=0.02).ax.tick_params(labelsize=6)


def trajectory_figure(
    steps: Sequence[int], values: Any, heads: Sequence[tuple[int, int]], ylabel: str, path: str | Path | None = None
) -> bytes:
    """A small line figure of a statistic over the logged steps, one line per head (``values``: ``[steps, layers,
    heads]``; ``heads``: ``(layer, head)`` pairs, labelled ``L2 H7``, or ``L2`` for a per-layer grid of one column).
    A head's line takes the series colours in order, a layer's its layer's colour. PNG bytes."""
    plt = pyplot()
    values = np.asarray(values, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(3.4, 1.7))
    for k, (layer, head) in enumerate(heads):
        per_layer = values.shape[2] == 1  # a per-layer statistic: each line in its layer's colour
        label = f"L{layer}" if per_layer else f"L{layer} H{head}"
        color = layer_hex(layer, values.shape[1]) if per_layer else series_hex(k)
        ax.plot(steps, values[:, layer, head], marker="o", ms=2.5, lw=1.4, label=label, color=color)
    ax.set_xlabel("training step", fontsize=7)
    ax.set_ylabel(ylabel, fontsize=7)
    ax.tick_params(labelsize=6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="best", frameon=False)
    return _saved(fig, path)


def outlier_figure(
    entries: Mapping[str, Mapping[str, Any]], multiples: Mapping[str, float], path: str | Path | None = None
) -> bytes:
    """One panel per per-layer statistic of ``entries`` (``{stat: {"steps", "values" [steps, layers, 1]}}``, as
    ``report.events`` reads them): each layer's value over its first logged value against the training step, one line
    per layer (numbered from 0), the alert's multiple dashed where ``multiples`` gives one. PNG bytes."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(entries), figsize=(4.4 * len(entries), 3.2), squeeze=False)
    for ax, (stat, entry) in zip(axes[0], entries.items()):
        values = np.asarray(entry["values"], dtype=np.float64)[:, :, 0]  # [steps, layers]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(values[0] > 0, values / values[0], np.nan)
        for layer in range(values.shape[1]):
            color = layer_hex(layer, values.shape[1])  # the plugin's colour of this layer
            ax.plot(entry["steps"], ratios[:, layer], marker="o", ms=3, lw=1.4, label=f"L{layer}", color=color)
        if stat in multiples:
            ax.axhline(multiples[stat], color=mark_hex("alert"), ls="--", lw=1)
            ax.annotate(f"alert ×{multiples[stat]:g}", (0.01, multiples[stat]), xycoords=("axes fraction", "data"),
                        color=mark_hex("alert"), fontsize=8, va="bottom")  # fmt: skip
        ax.axhline(1.0, color=mark_hex("reference"), ls=":", lw=1)
        ax.set_title(f"{stat} / step {entry['steps'][0]}")
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ratio to the first step")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _saved(fig, path)
