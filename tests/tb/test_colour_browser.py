"""One colour rule, seen in a browser (Playwright, Debian's Chromium, a real ``tensorboard``): the plugin's Ablation
view and the report of the SAME run give the most harmful head the same colour (red: worse), the plugin's Layer
means and Activation outliers give each layer one colour, the report's figures draw each layer in it, and
scales.js, run in the page, gives the colours Python's bertwatch.tb.colours gives.

On the code before the one rule this fails: the plugin drew the most harmful head blue (rgb(5, 48, 97) at the far
end) and the report drew it red in a PNG (RdBu), and the outlier panel drew L0 #1565c0 where Layer means drew it
#4a148c."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bertwatch.report.html import write_outputs
from bertwatch.report.result import AblationResult
from bertwatch.report.run_report import write_run_report
from bertwatch.tb import colours
from bertwatch.tb.summary import SummaryWriter
from tests.support.tb_helpers import STEPS, H, L, curves_result, synthetic_grids, tensorboard_server
from tests.tb.test_outliers_browser import outlier_grids
from tests.tb.test_plugin_browser import browser, open_session, shot_dir  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

WORST, BEST = (3, 7), (1, 2)  # the most harmful head is not the one with the largest |Δ|: a mid-scale colour


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
            w.add_head_grids({**synthetic_grids(step), **outlier_grids(step)}, step)
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
            return {up: values.map((v) => up.color(v)), down: values.map((v) => down.color(v)),
                    layers: [0, 1, 2, 3, 4, 5].map((l) => m.layerColor(l, 6)), nan: m.NAN_COLOR};
        }""",
        [f"{s.base}/data/plugin/bertwatch/static/scales.js", values],
    )
    assert [_rgb(x) for x in got["up"]] == [colours.diverging_rgb(v, 0.0, 0.05) for v in values]
    assert [_rgb(x) for x in got["down"]] == [colours.diverging_rgb(v, 0.0, 0.05, True) for v in values]
    assert [_rgb(x) for x in got["layers"]] == [_rgb_hex(colours.layer_hex(l, 6)) for l in range(6)]
    assert got["nan"] == colours.nan_hex()
