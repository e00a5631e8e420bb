"""bertwatch's colours for Python (the report, its HTML grids and its PNG figures), read from the plugin's own
``static/colours.json``: the one home of every colour, so a value, a line or a mark has the same colour in the
plugin and the report (the missing-value grey, both ramps, the layers, the series, the pruning orders, the marks).

The diverging scale runs from its first stop (blue: better, less drift, down) through white (no change) to its
last (red: worse, more drift, up). :func:`diverging_rgb` is ``scales.js``'s ``diverging(mid, half, {invert})``
to the integer, and :func:`sequential_rgb` its ``sequential(lo, hi)``: the same ramp, the same arithmetic, the same
rounding. Torch-free; matplotlib is not imported here.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
from typing import Any

__all__ = [
    "band_opacity",
    "colours",
    "diverging_hex",
    "diverging_rgb",
    "diverging_stops",
    "higher_is_better",
    "layer_hex",
    "mark_hex",
    "nan_hex",
    "pruning_hex",
    "sequential_rgb",
    "sequential_stops",
    "series_hex",
    "text_on",
]

RGB = tuple[int, int, int]


@functools.cache
def colours() -> dict[str, Any]:
    """The parsed ``bertwatch/tb/static/colours.json``."""
    text = importlib.resources.files("bertwatch.tb").joinpath("static", "colours.json").read_text(encoding="utf-8")
    return json.loads(text)


def _rgb(hex_colour: str) -> RGB:
    n = int(hex_colour[1:], 16)
    return (n >> 16) & 255, (n >> 8) & 255, n & 255


def _hex(rgb: RGB) -> str:
    return "#%02x%02x%02x" % rgb


def diverging_stops() -> list[str]:
    """The diverging scale's stops as ``#rrggbb``, from the better / less / down end to the worse / more / up end."""
    return list(colours()["diverging"]["stops"])


def sequential_stops() -> list[str]:
    """The sequential scale's stops as ``#rrggbb`` (YlGnBu), from low to high: masses, entropies, attention."""
    return list(colours()["sequential"])


def nan_hex() -> str:
    """The colour of an undefined (NaN) cell."""
    return str(colours()["nan"])


def text_on(rgb: RGB | None) -> str:
    """Dark or light text on a background (``scales.js``'s ``textOn``)."""
    text = colours()["text"]
    if rgb is None:
        return str(text["onLight"])
    light = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255 > text["lightAbove"]
    return str(text["onLight"] if light else text["onDark"])


def higher_is_better(stat: str) -> bool:
    """Whether higher values of a diverging statistic sit at the better (blue) end (``drift_cosine``: 1 is
    unchanged)."""
    return stat in colours()["diverging"]["higherIsBetter"]


def _ramp(stops: list[RGB], t: float) -> RGB:
    """``scales.js``'s ``ramp``: linear between neighbouring stops, each channel rounded half up."""
    if not t >= 0:
        t = 0.0
    if t > 1:
        t = 1.0
    x = t * (len(stops) - 1)
    i = min(len(stops) - 2, math.floor(x))
    f = x - i
    a, b = stops[i], stops[i + 1]
    return tuple(math.floor(a[k] + (b[k] - a[k]) * f + 0.5) for k in range(3))  # type: ignore[return-value]


def diverging_rgb(value: float, mid: float, half: float, higher_better: bool = False) -> RGB | None:
    """The colour of ``value`` on the diverging scale centred at ``mid`` and full at ``mid ± half``: red above
    ``mid`` (below it when ``higher_better``: red is always the worse side); None for NaN.

    Example:
        >>> diverging_rgb(-0.1, 0.0, 0.1, higher_better=True), diverging_rgb(0.0, 0.0, 0.1)
        ((103, 0, 31), (247, 247, 247))
    """
    if value is None or math.isnan(value):
        return None
    if not (half > 0 and math.isfinite(half)):
        half = 1.0
    sign = -1 if higher_better else 1
    return _ramp([_rgb(c) for c in diverging_stops()], 0.5 + (sign * (value - mid)) / (2 * half))


def sequential_rgb(value: float, lo: float, hi: float) -> RGB | None:
    """The colour of ``value`` on the sequential scale over ``[lo, hi]`` (``scales.js``'s ``sequential(lo, hi)``:
    clamped at both ends; a scale of no width is ``[lo, lo + 1]``); None for NaN.

    Example:
        >>> sequential_rgb(0.0, 0.0, 1.0), sequential_rgb(1.0, 0.0, 1.0)
        ((255, 255, 217), (8, 29, 88))
    """
    if value is None or math.isnan(value):
        return None
    if not hi > lo:
        hi = lo + 1
    return _ramp([_rgb(c) for c in sequential_stops()], (value - lo) / (hi - lo))


def diverging_hex(value: float, mid: float, half: float, higher_better: bool = False) -> str:
    """:func:`diverging_rgb` as ``#rrggbb`` (:func:`nan_hex` for NaN)."""
    rgb = diverging_rgb(value, mid, half, higher_better)
    return nan_hex() if rgb is None else _hex(rgb)


def layer_hex(layer: int, layers: int) -> str:
    """The colour of layer ``layer`` of ``layers`` in every per-layer chart (``scales.js``'s ``layerColor``).

    Example:
        >>> layer_hex(0, 6), layer_hex(5, 6)
        ('#4a148c', '#ad1457')
    """
    stops = [_rgb(c) for c in colours()["layers"]]
    return _hex(_ramp(stops, 0.0 if layers <= 1 else layer / (layers - 1)))


def series_hex(k: int) -> str:
    """The colour of the ``k``-th line of a chart whose lines are not layers (measures, classes, heads), in the
    plugin's order, starting again after the last (``scales.js``'s ``seriesColor``).

    Example:
        >>> series_hex(0) == series_hex(len(colours()["series"]))
        True
    """
    series = colours()["series"]
    return str(series[k % len(series)])


def pruning_hex(order: str) -> str:
    """The colour of a pruning order's line and band: ``"importance"``, ``"iterative"``, ``"random"`` (the random
    orders' range) or ``"randomMean"`` (their mean)."""
    return str(colours()["pruning"][order])


def band_opacity(order: str) -> float:
    """The opacity of a pruning order's band (``"importance"``, ``"iterative"``, ``"random"``)."""
    return float(colours()["pruning"]["bandOpacity"][order])


def mark_hex(name: str) -> str:
    """The colour of a mark drawn across a chart: ``"zero"``, ``"delta"`` (the ``±δ`` line), ``"alert"`` (an
    alert's multiple), ``"reference"`` (a reference value), ``"marker"`` (the step marker, the pruning answer),
    ``"gap"`` (a shaded gap between lines), ``"whisker"`` (an interval's whiskers)."""
    return str(colours()["marks"][name])
