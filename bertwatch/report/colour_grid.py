"""The report's ``[layers, heads]`` grid of Δ as HTML cells on the plugin's diverging scale
(:mod:`bertwatch.tb.colours`): a head has the colour it has in the plugin's Ablation view (red = worse, whichever
way the metric points), its exact value in ``data-value`` and its interval in the cell's title."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertwatch.report.markup import escape, head_name, number
from bertwatch.tb.colours import diverging_hex, diverging_rgb, text_on

__all__ = ["GRID_STYLE", "change_grid", "change_scale_half"]

#: The grid's CSS (the report's page style adds it).
GRID_STYLE = (
    "table.hm{border-collapse:separate;border-spacing:1px}table.hm td{width:30px;height:20px;padding:0;border:0;"
    "text-align:center;font-size:0.72em}table.hm th{border:0;background:none;font-weight:normal;color:#555;"
    "font-size:0.75em;padding:0 4px}.hm-legend{display:flex;align-items:center;gap:8px;font-size:0.8em;color:#555;"
    "margin:4px 0 10px}.hm-bar{width:220px;height:10px;border-radius:2px}"
)


def change_scale_half(values: np.ndarray) -> float:
    """The scale's half-width as the plugin computes it (``scales.js`` ``halfWidth``): the largest |value| among
    the finite values as float32 (the route's precision), at least 1e-6."""
    values = np.asarray(values, dtype=np.float32).astype(np.float64)
    finite = np.abs(values[np.isfinite(values)])
    return max(float(finite.max()) if finite.size else 0.0, 1e-6)


def _legend(half: float, greater_is_better: bool, title: str) -> str:
    """A gradient bar over [-half, half] with the words at its ends, as the plugin's legend."""
    points = [-half + 2 * half * i / 16 for i in range(17)]
    stops = ", ".join(
        f"{diverging_hex(v, 0.0, half, greater_is_better)} {100 * i / 16:g}%" for i, v in enumerate(points)
    )
    low, high = ("worse", "better") if greater_is_better else ("better", "worse")
    return (
        f'<div class="hm-legend"><span>{escape(title)}</span><span>{low} {number(-half, 3)}</span>'
        f'<span class="hm-bar" style="background:linear-gradient(to right, {stops})"></span>'
        f"<span>{number(half, 3)} {high}</span><span>(white: no change)</span></div>"
    )


def change_grid(
    cells: np.ndarray,
    marks: Sequence[Sequence[str]],
    metric: str,
    greater_is_better: bool,
    grid_id: str,
    q: np.ndarray,
) -> str:
    """Δ per head (``cells`` ``[layers, heads, 5]``: value, Δ, interval, p) as an HTML table coloured like the
    plugin's grid, ``marks`` written in the cells, each cell's Δ, interval, p and BH ``q`` in its title."""
    delta = np.asarray(cells[..., 1], dtype=np.float64)
    shown = delta.astype(np.float32).astype(np.float64)  # the plugin colours the route's float32 values
    half = change_scale_half(delta)
    layers, heads = delta.shape
    head_row = "<tr><th></th>" + "".join(f"<th>{h}</th>" for h in range(heads)) + "</tr>"
    rows = []
    for l in range(layers):
        tds = []
        for h in range(heads):
            rgb = diverging_rgb(float(shown[l, h]), 0.0, half, greater_is_better)
            colour = diverging_hex(float(shown[l, h]), 0.0, half, greater_is_better)
            c = cells[l, h]
            title = (
                f"{head_name(l, h)} disabled: Δ {metric} {number(c[1])} [{number(c[2])}, {number(c[3])}], "
                f"p {number(c[4], 3)}, q {number(q[l, h], 3)}"
            )
            tds.append(
                f'<td data-layer="{l}" data-head="{h}" data-value="{number(c[1], 6)}" '
                f'style="background:{colour};color:{text_on(rgb)}" title="{escape(title)}">'
                f"{escape(marks[l][h])}</td>"
            )
        rows.append(f"<tr><th>L{l}</th>{''.join(tds)}</tr>")
    return (
        f'<table class="hm" id="{escape(grid_id)}"><thead>{head_row}</thead><tbody>{"".join(rows)}</tbody></table>'
        + _legend(half, greater_is_better, f"Δ {metric}")
    )
