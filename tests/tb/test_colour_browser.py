"""One colour rule, seen in a browser (Playwright, Debian's Chromium, a real ``tensorboard``): the plugin's Ablation
view and the report of the SAME run give the most harmful head the same colour (red: worse), the plugin's Layer
means and Activation outliers give each layer one colour, the report's figures draw each layer in it, and
scales.js, run in the page, gives the colours Python's bertwatch.tb.colours gives; a missing value, a mass and each
pruning order have the colour the plugin renders in the report's figures too (their matplotlib colormaps and lines,
caught as drawn).

On the code before the one rule this fails: the plugin drew the most harmful head blue (rgb(5, 48, 97) at the far
end) and the report drew it red in a PNG (RdBu), and the outlier panel drew L0 #1565c0 where Layer means drew it
#4a148c. Before the report read every colour from colours.json it drew missing values #bbbbbb where the plugin
draws #d4d4d4, masses on viridis where the plugin draws YlGnBu, and the importance order #08519c where the plugin
draws #6a1b9a."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bertwatch.report import figures, pruning_section
from bertwatch.report.html import write_outputs
from bertwatch.report.result import AblationResult
from bertwatch.report.run_report import write_run_report
from bertwatch.tb import colours
from bertwatch.tb.writer.summary import SummaryWriter
from tests.report.test_figure_colours import as_hex, drawn, rgb_of
from tests.support.tb_helpers import STEPS, H, L, curves_result, synthetic_grids, tensorboard_server
from tests.tb.test_plugin_browser import browser, open_session, shot_dir  # noqa: F401 (fixtures)
from tests.tb.views.heads.test_outliers_browser import outlier_grids

pytestmark = pytest.mark.browser

WORST, BEST = (3, 7), (1, 2)  # the most harmful head is not the one with the largest |Δ|: a mid-scale colour
MISSING = (2, 5)  # punct_mass is undefined on this head at every step


def _result() -> AblationResult:
    rng = np.random.default_rng(4)
    delta = rng.uniform(-0.012, 0.008, (L, H))
    delta[WORST], delta[BEST] = -0.031, 0.047
    cells = np.stack([0.86 + delta, delta, delta - 0.01, delta + 0.01, np.full((L, H), 0.2)], -1)
    ldelta = np.array([-0.08, -0.02, 0.01, -0.004, 0.003, -0.012])
    layers = np.stack([0.86 + ldelta, ldelta, ldelta - 0.01, ldelta + 0.01, np.full(L, 0.1)], -1)
    curves = curves_result(0.86)
    return AblationResult(
        task="sst2", mode="uniform", metric="accuracy", num_examples=872, baseline=0.86, heads=cells,
        layers=layers, pruning=curves.pruning, pruning_iterative=curves.pruning_iterative,
        pruning_random=curves.pruning_random, config={"delta": 0.01, "confidence": 0.95, "greater_is_better": True},
        task_type="sequence-classification",
    )  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run: head grids and per-layer outlier grids over training, then its ablation (summaries in the event
    file, ablation.json in its folder), and the report ``bertwatch report RUN`` writes."""
    root = tmp_path_factory.mktemp("bw_colours") / "logs"
    run_dir = root / "run"
    result = _result()
    with SummaryWriter(str(run_dir)) as w:
        for step in STEPS:
            grids = {**synthetic_grids(step), **outlier_grids(step)}
            grids["punct_mass"] = grids["punct_mass"].copy()
            grids["punct_mass"][MISSING] = np.nan
            w.add_head_grids(grids, step)
        w.add_ablation_result(result, step=STEPS[-1])
    write_outputs(result, run_dir / "bertwatch_ablation")
    report = write_run_report(run_dir)
    assert report is not None and report.path == run_dir / "report.html"
    return root, report.path, result


@pytest.fixture(scope="module")
def s(browser, run):  # noqa: F811
    root = run[0]
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        sess = open_session(browser, base, root)
        yield sess
        sess.page.close()
        assert not sess.errors, sess.errors


def _rgb(css: str) -> tuple[int, int, int]:
    return tuple(int(x) for x in re.findall(r"\d+", css)[:3])  # type: ignore[return-value]


def test_the_most_harmful_head_has_one_colour_in_the_plugin_and_the_report(s, run, shot_dir) -> None:  # noqa: F811
    _, report, result = run
    s.tab("ablation")
    s.frame.wait_for_selector("#ablation-heatmap .cell")
    assert s.frame.text_content("#ablation-worst .stat-value").startswith(f"L{WORST[0]} H{WORST[1]}")
    cell = f'.cell[data-layer="{WORST[0]}"][data-head="{WORST[1]}"]'
    plugin = _rgb(s.frame.eval_on_selector(f"#ablation-heatmap {cell}", "e => getComputedStyle(e).backgroundColor"))
    page = s.page.context.new_page()
    try:
        page.goto(report.as_uri())
        td = f'table.hm td[data-layer="{WORST[0]}"][data-head="{WORST[1]}"]'
        page.wait_for_selector(td, timeout=10000)
        shown = _rgb(page.eval_on_selector(td, "e => getComputedStyle(e).backgroundColor"))
        grids = page.eval_on_selector_all("table.hm", "els => els.length")
    finally:
        page.close()
    assert shown == plugin, (shown, plugin)
    assert plugin[0] > plugin[2] + 60  # red: worse
    half = float(np.max(np.abs(result.heads[..., 1].astype(np.float32))))
    assert plugin == colours.diverging_rgb(float(np.float32(-0.031)), 0.0, half, higher_better=True)
    assert grids == 1
    s.shot("ablation_colours", shot_dir)


def test_the_headline_is_the_reports_sentence(s, run) -> None:
    _, report, result = run
    s.tab("ablation")
    s.frame.wait_for_selector("#ablation-headline")
    headline = s.frame.text_content("#ablation-headline")
    assert headline.startswith("872 examples resolve a change of 0.01 (one example is 0.0011")
    assert headline in report.read_text(encoding="utf-8")


def test_a_layer_has_one_colour_in_every_chart(s) -> None:
    s.tab("heads")
    s.frame.wait_for_selector("#layer-means-chart path.series", state="attached", timeout=20000)
    s.frame.wait_for_selector("#outlier-chart path.series", state="attached", timeout=20000)
    strokes = "els => els.map(e => e.getAttribute('stroke'))"
    means = [_rgb(x) for x in s.frame.eval_on_selector_all("#layer-means-chart path.series", strokes)]
    outliers = [_rgb(x) for x in s.frame.eval_on_selector_all("#outlier-chart path.series", strokes)]
    expected = [_rgb_hex(colours.layer_hex(l, L)) for l in range(L)]
    assert means == expected and outliers == expected


def _rgb_hex(value: str) -> tuple[int, int, int]:
    n = int(value[1:], 16)
    return (n >> 16) & 255, (n >> 8) & 255, n & 255


def test_scales_js_gives_pythons_colours(s) -> None:
    """scales.js and bertwatch.tb.colours read one table; this runs both on the same values."""
    values = [float(v) for v in np.linspace(-0.06, 0.06, 49)]
    got = s.frame.evaluate(
        """async ([url, values]) => {
            const m = await import(url);
            const up = m.diverging(0, 0.05), down = m.changeScale(0.05, true);
            const seq = m.sequential(-0.06, 0.06);
            return {up: values.map((v) => up.color(v)), down: values.map((v) => down.color(v)),
                    seq: values.map((v) => seq.color(v)), series: [...Array(10).keys()].map(m.seriesColor),
                    layers: [0, 1, 2, 3, 4, 5].map((l) => m.layerColor(l, 6)), nan: m.NAN_COLOR,
                    pruning: m.PRUNING, marks: m.MARKS};
        }""",
        [f"{s.base}/data/plugin/bertwatch/static/scales.js", values],
    )
    assert [_rgb(x) for x in got["up"]] == [colours.diverging_rgb(v, 0.0, 0.05) for v in values]
    assert [_rgb(x) for x in got["down"]] == [colours.diverging_rgb(v, 0.0, 0.05, True) for v in values]
    assert [_rgb(x) for x in got["layers"]] == [_rgb_hex(colours.layer_hex(l, 6)) for l in range(6)]
    assert got["nan"] == colours.nan_hex()
    assert [_rgb(x) for x in got["seq"]] == [colours.sequential_rgb(v, -0.06, 0.06) for v in values]
    assert got["series"] == [colours.series_hex(k) for k in range(10)]
    assert got["pruning"] == colours.colours()["pruning"] and got["marks"] == colours.colours()["marks"]


def test_a_missing_value_and_a_mass_have_one_colour_in_the_plugin_and_the_report(s, monkeypatch) -> None:
    """The Heads view's cells of a mass as rendered (sequential(0, 1), NaN grey) against the colormap the report's
    panels of the same statistic draw with: the NaN cell exactly, every other cell within one unit of a channel
    (matplotlib's colormap is a table of 256 colours between two stops)."""
    s.tab("heads")
    s.frame.select_option("#stat-select", "punct_mass")
    s.frame.wait_for_selector(f'#heads-heatmap .cell.nan[data-layer="{MISSING[0]}"][data-head="{MISSING[1]}"]')
    s.frame.wait_for_selector("#view-heads .legend-nan .swatch.nan")
    shown = s.frame.evaluate(  # in one call: a live redraw between two calls would leave a detached element
        """() => ({
            cells: [...document.querySelectorAll('#heads-heatmap .cell')].map(
                (e) => [e.dataset.value, getComputedStyle(e).backgroundColor]),
            swatch: getComputedStyle(document.querySelector('#view-heads .legend-nan .swatch.nan')).backgroundColor,
        })"""
    )
    cells, swatch = shown["cells"], shown["swatch"]
    values = [float(v) for v, _ in cells]
    grid = np.array(values).reshape(L, H)
    (fig,) = drawn(monkeypatch, figures.change_panels, "punct_mass", (STEPS[0], grid), (STEPS[-1], grid))
    image = fig.axes[0].images[0]  # the report's panel of the statistic
    assert _rgb(swatch) == rgb_of(image.cmap.get_bad()) == _rgb_hex(colours.nan_hex()), swatch
    for value, (_, css) in zip(values, cells):
        plugin = _rgb(css)
        if np.isnan(value):
            assert plugin == rgb_of(image.cmap.get_bad())
            continue
        assert plugin == colours.sequential_rgb(value, 0.0, 1.0)
        assert max(abs(a - b) for a, b in zip(plugin, rgb_of(image.cmap(value)))) <= 1, (value, plugin)
    assert sum(np.isnan(values)) == 1


def test_the_pruning_orders_have_one_colour_in_the_plugin_and_the_report(s, run, monkeypatch) -> None:
    """Each order's line and band, the δ line, the zero line and the answer's marker as the plugin renders them,
    against the report's pruning figure of the same result."""
    result = run[2]
    s.tab("ablation")
    s.frame.wait_for_selector("#pruning-chart path.series", state="attached")
    shown = s.frame.evaluate(  # in one call: a live redraw between two calls would leave a detached element
        """() => {
            const all = (sel) => [...document.querySelectorAll(`#pruning-chart ${sel}`)];
            const stroke = (sel) => getComputedStyle(document.querySelector(`#pruning-chart ${sel}`)).stroke;
            return {
                lines: all('path.series').map((e) => [e.dataset.name, getComputedStyle(e).stroke]),
                bands: all('path.band').map((e) => [e.id, getComputedStyle(e).fill, Number(getComputedStyle(e).fillOpacity)]),
                delta: stroke('#pruning-delta-line'), zero: stroke('line.hline.zero'), marker: stroke('line.marker'),
            };
        }"""
    )
    lines, bands = dict(shown["lines"]), shown["bands"]
    delta, zero, marker = shown["delta"], shown["zero"], shown["marker"]
    (fig,) = drawn(monkeypatch, pruning_section.curves_figure, result)
    ax = fig.axes[0]
    report = {line.get_label(): rgb_of(line.get_color()) for line in ax.get_lines() if not line.get_gid()}
    assert {name: _rgb(css) for name, css in lines.items()} == report
    assert set(report) == {"importance (one-shot)", "iterative importance", "random orders: mean"}
    filled = {band.get_gid(): (rgb_of(band.get_facecolor()[0]), band.get_alpha()) for band in ax.collections}
    assert {id_: (_rgb(css), pytest.approx(opacity)) for id_, css, opacity in bands} == filled
    assert len(filled) == 3
    rules = {line.get_gid(): as_hex(line.get_color()) for line in ax.get_lines() if line.get_gid()}
    assert _rgb(delta) == _rgb_hex(rules["pruning-delta-line"]) == _rgb_hex(colours.mark_hex("delta"))
    assert _rgb(zero) == _rgb_hex(rules["pruning-zero"])
    assert _rgb(marker) == _rgb_hex(rules["pruning-answer"]) == _rgb_hex(colours.mark_hex("marker"))
