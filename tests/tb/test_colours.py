"""One home for every colour (bertwatch/tb/static/colours.json): the plugin's scales.js and Python's
bertwatch.tb.colours read it, neither keeps a copy, and Python's ramp gives scales.js's colours (checked against a
plain float64 interpolation here, and against scales.js itself in tests/tb/test_colour_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bertwatch.tb import colours as c
from tests.support.tb_helpers import frontend_file

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]

HEX = re.compile(r"#[0-9a-fA-F]{6}\b")


def rgb_of(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def test_the_json_is_the_one_table() -> None:
    table = json.loads(frontend_file("colours.json").read_text())
    assert table == c.colours()
    stops = table["diverging"]["stops"]
    assert len(stops) % 2 == 1 and stops[len(stops) // 2] == "#f7f7f7"  # white in the middle: no change
    red, blue = np.array(rgb_of(stops[-1])), np.array(rgb_of(stops[0]))
    assert red[0] > red[2] and blue[2] > blue[0]  # the last stop is the red (worse) end
    assert all(HEX.fullmatch(x) for x in [*stops, *table["sequential"], *table["layers"], table["nan"]])
    pruning = {k: v for k, v in table["pruning"].items() if k != "bandOpacity"}
    assert all(HEX.fullmatch(x) for x in [*table["series"], *pruning.values(), *table["marks"].values()])
    assert set(table["pruning"]["bandOpacity"]) == {"importance", "iterative", "random"}


def test_scales_js_keeps_no_copy_of_the_colours() -> None:
    """The test that fails when the plugin and Python diverge: a hex colour back in scales.js, or a per-layer chart
    with its own palette, would give a layer or a head another colour in the plugin than in the report."""
    scales = frontend_file("scales.js").read_text()
    assert "from './colours.json' with {type: 'json'}" in scales and not HEX.search(scales)
    for name in ("panel_outliers.js", "view_heads.js", "view_clusters.js"):
        text = frontend_file(name).read_text()
        assert "layerColor(" in text, name  # every per-layer series takes its layer's colour
    assert "COLORS" not in frontend_file("panel_outliers.js").read_text()


def test_the_charts_the_report_also_draws_keep_no_copy_of_their_colours() -> None:
    """The pruning curves, the series (mass gap, patterns, word classes, trajectories), the marks (zero, δ, an
    alert's multiple, the step marker, whiskers) and the NaN swatch read colours.json in the plugin as in the report:
    no hex colour in those modules, and style.css leaves those strokes to charts.js."""
    for name in ("charts.js", "view_ablation.js", "panel_mass_gap.js", "panel_outliers.js", "view_heads.js",
                 "alert_strip.js", "heatmap.js"):  # fmt: skip
        assert not HEX.search(frontend_file(name).read_text()), name
    css = re.sub(r"/\*.*?\*/", "", frontend_file("style.css").read_text(), flags=re.S)
    for selector in (".chart .zero", ".chart .marker", ".chart .whisker", ".chart .hline.zero", ".chart .hline.delta",
                     ".chart .hline.hline-alert", ".chart .hline.hline-soft"):  # fmt: skip
        block = re.search(re.escape(selector) + r" \{([^}]*)\}", css)
        assert block and not re.search(r"(^|[\s;])stroke\s*:", block.group(1)), selector
    assert c.nan_hex() not in css.lower()


def test_python_figures_name_no_colormap_of_their_own() -> None:
    for folder in ("report", "linguistics", "analysis"):
        for path in (ROOT / "bertwatch" / folder).rglob("*.py"):
            assert not re.search(r"RdBu|Blues|Reds", path.read_text()), path


def _plain(value: float, mid: float, half: float, higher_better: bool) -> tuple[int, ...]:
    """An independent float64 reading of the diverging scale: numpy's interp per channel, rounded half up."""
    stops = np.array([rgb_of(x) for x in c.diverging_stops()], dtype=np.float64)
    t = 0.5 + (-1 if higher_better else 1) * (value - mid) / (2 * half)
    t = min(max(t, 0.0), 1.0)
    grid = np.linspace(0.0, 1.0, len(stops))
    return tuple(int(np.floor(np.interp(t, grid, stops[:, k]) + 0.5)) for k in range(3))


@pytest.mark.parametrize("higher_better", [False, True])
def test_diverging_rgb_matches_a_plain_interpolation(higher_better: bool) -> None:
    rng = np.random.default_rng(0)
    for value in [*rng.uniform(-0.2, 0.2, 200), -0.1, 0.0, 0.1, 5.0, -5.0]:
        got = c.diverging_rgb(float(value), 0.0, 0.1, higher_better)
        assert max(abs(a - b) for a, b in zip(got, _plain(float(value), 0.0, 0.1, higher_better))) <= 1
    assert c.diverging_rgb(float("nan"), 0.0, 0.1) is None and c.diverging_hex(float("nan"), 0, 1) == c.nan_hex()


def test_worse_is_red_whichever_way_the_metric_points() -> None:
    last, first = rgb_of(c.diverging_stops()[-1]), rgb_of(c.diverging_stops()[0])
    assert c.diverging_rgb(-0.05, 0.0, 0.05, higher_better=True) == last  # accuracy fell: worse
    assert c.diverging_rgb(0.05, 0.0, 0.05, higher_better=False) == last  # a loss rose: worse
    assert c.diverging_rgb(0.05, 0.0, 0.05, higher_better=True) == first
    assert c.higher_is_better("drift_cosine") and not c.higher_is_better("drift_js")


def test_layer_colours_follow_the_layer_ramp() -> None:
    layers = c.colours()["layers"]
    assert c.layer_hex(0, 6) == layers[0] and c.layer_hex(5, 6) == layers[-1] and c.layer_hex(0, 1) == layers[0]
    assert len({c.layer_hex(l, 12) for l in range(12)}) == 12


def test_the_matplotlib_colormap_is_the_same_scale() -> None:
    from bertwatch.report.figures import diverging_cmap

    stops = c.diverging_stops()
    as_hex = lambda rgba: "#%02x%02x%02x" % tuple(round(255 * x) for x in rgba[:3])  # noqa: E731
    assert as_hex(diverging_cmap()(0.0)) == stops[0] and as_hex(diverging_cmap()(1.0)) == stops[-1]
    assert as_hex(diverging_cmap(higher_better=True)(1.0)) == stops[0]
    assert as_hex(diverging_cmap(part="high")(0.0)) == stops[len(stops) // 2]


def test_the_sequential_colormap_is_the_plugins_ramp() -> None:
    """The report's sequential grids (figures.sequential_cmap) and scales.js's sequential(lo, hi) (here as
    colours.sequential_rgb, checked against scales.js in the browser test) agree to one unit of a channel; NaN is
    the plugin's grey in both ramps."""
    from bertwatch.report.figures import diverging_cmap, sequential_cmap

    rgb = lambda rgba: tuple(round(255 * x) for x in rgba[:3])  # noqa: E731
    for t in np.linspace(0.0, 1.0, 1001):
        got, want = rgb(sequential_cmap()(t)), c.sequential_rgb(float(t), 0.0, 1.0)
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1, t
        got, want = rgb(diverging_cmap()(t)), c.diverging_rgb(float(t) - 0.5, 0.0, 0.5)
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1, t
    grey = rgb_of(c.nan_hex())
    assert rgb(sequential_cmap().get_bad()) == grey == rgb(diverging_cmap(True, "low").get_bad())
    assert c.sequential_rgb(float("nan"), 0.0, 1.0) is None and c.sequential_rgb(2.0, 0.0, 1.0) == rgb_of(
        c.sequential_stops()[-1]
    )
