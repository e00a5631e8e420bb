"""The Heads view's activation-outlier panel in a real browser (Playwright, Debian's Chromium, a real
``tensorboard``): each layer's ``ffn_inf_norm`` over its first value with the alert's multiple drawn, a table at the
view's step with the delimiters' share beside the layer's mean [SEP] mass, the outlier alert in the alert strip
naming the layer, and no panel for a run without the outlier statistics."""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from bertwatch.core.alerts import AlertSettings, active_alerts
from bertwatch.tb.writer.summary import SummaryWriter, layer_means
from tests.support.tb_helpers import MAX_PNG_BYTES, STEPS, L, synthetic_grids, tensorboard_server
from tests.tb.test_plugin_browser import browser, open_session, shot_dir  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

GROWING, FROM = 4, 150  # layer 4's largest activation grows 4x from step 150


def outlier_grids(step: int) -> dict[str, np.ndarray]:
    """Per-layer ``[L, 1]`` outlier grids: a steady reference, layer 4 growing past the alert's multiple."""
    reference = np.linspace(4.0, 14.0, L)[:, None]
    ffn = reference * (1 + 0.05 * np.sin(step / 40.0) * np.cos(np.arange(L)[:, None]))
    if step >= FROM:
        ffn[GROWING] = reference[GROWING] * (1 + 3 * (step - FROM + 25) / (STEPS[-1] - FROM + 25))
    share = np.full((L, 1), 0.4)
    share[GROWING] = 0.9
    return {
        "ffn_inf_norm": ffn,
        "residual_inf_norm": ffn * 1.5,
        "delimiter_share": share,
        "outlier_dim": np.full((L, 1), 308.0),
        "outlier_dim_overlap": np.ones((L, 1)),
    }


def _write_runs(root: Path) -> None:
    history = []
    with SummaryWriter(str(root / "growing")) as w:
        for step in STEPS:
            grids = {**synthetic_grids(step), **outlier_grids(step)}
            grids["sep_mass"][GROWING] = 0.8
            w.add_head_grids(grids, step)
            history.append((step, grids))
            w.add_alerts(active_alerts(history[0][1], history), L, grids["entropy"].shape[1], step)
    history = []
    with SummaryWriter(str(root / "strict")) as w:  # judged with a multiple of 3
        for step in STEPS:
            grids = outlier_grids(step)
            w.add_head_grids(grids, step)
            history.append((step, grids))
            w.add_alerts(active_alerts(history[0][1], history, AlertSettings(outlier_multiple=3.0)), L, 1, step)
    with SummaryWriter(str(root / "plain")) as w:
        for step in STEPS[:3]:
            w.add_head_grids(synthetic_grids(step), step)


@pytest.fixture(scope="module")
def s(browser, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("bw_outliers") / "logs"
    _write_runs(root)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        sess = open_session(browser, base, root)
        sess.frame.select_option("#run-select", "growing")
        sess.wait_step(STEPS[-1])
        yield sess
        sess.page.close()
        assert not sess.errors, sess.errors


def test_the_route_gives_each_layers_ratio_to_its_first_value_and_the_masses(s) -> None:
    body = s.route("outliers", run="growing")
    assert body["stat"] == "ffn_inf_norm" and body["steps"] == STEPS and body["referenceStep"] == 0
    assert body["multiple"] == AlertSettings().outlier_multiple and body["step"] == STEPS[-1]
    values = np.array([outlier_grids(step)["ffn_inf_norm"][:, 0] for step in STEPS])
    ratios = np.array([[float(v) for v in row] for row in body["ratios"]])
    assert np.allclose(ratios, (values / values[0]).T, rtol=1e-5)
    assert ratios[GROWING, -1] == pytest.approx(4.0, rel=1e-5)
    columns = {c["stat"]: np.array([float(v) for v in c["values"]]) for c in body["columns"]}
    assert np.allclose(columns["delimiter_share"], outlier_grids(STEPS[-1])["delimiter_share"][:, 0])
    sep = synthetic_grids(STEPS[-1])["sep_mass"]
    sep[GROWING] = 0.8
    assert np.allclose(columns["sep_mass"], layer_means(sep), rtol=1e-6)
    earlier = s.route("outliers", run="growing", step=FROM - 1)
    assert earlier["step"] == FROM - 25 and len(earlier["steps"]) == len(STEPS)
    assert s.route("outliers", run="strict")["multiple"] == pytest.approx(3.0)  # the run's own, from its alerts
    with pytest.raises(urllib.error.HTTPError) as missing:
        s.route("outliers", run="plain")
    assert missing.value.code == 404


def test_the_panel_draws_the_ratios_the_multiple_and_marks_the_layer_in_alert(s, shot_dir) -> None:  # noqa: F811
    s.frame.wait_for_selector("#outlier-card:not([hidden]) #outlier-chart", timeout=20000)
    s.frame.wait_for_function(
        "step => document.querySelector('#outlier-step')?.dataset.step === String(step)", arg=STEPS[-1]
    )
    assert s.frame.get_attribute("#outlier-multiple", "y1") is not None
    rows = s.frame.eval_on_selector_all(
        ".outlier-table tbody tr",
        "els => els.map(e => [+e.dataset.layer, e.classList.contains('outlier-over'), "
        "e.querySelector('td.ratio').textContent])",
    )
    assert [r[0] for r in rows] == list(range(L))
    assert [r[0] for r in rows if r[1]] == [GROWING] and rows[GROWING][2] == "×4"
    headers = s.frame.eval_on_selector_all(".outlier-table th", "els => els.map(e => e.textContent)")
    assert "outliers on delimiters" in headers and "[SEP] mass" in headers
    items = s.frame.eval_on_selector_all(
        "#alert-items .alert-item", "els => els.map(e => [e.dataset.rule, e.textContent])"
    )
    outlier = [text for rule, text in items if rule == "outlier_growth"]
    assert len(outlier) == 1 and re.fullmatch(rf"L{GROWING} outlier growth · since \d+", outlier[0])
    card = s.frame.query_selector("#outlier-card")
    card.scroll_into_view_if_needed()
    s.page.mouse.move(0, 0)
    path = shot_dir / "outliers.png"
    card.screenshot(path=str(path))
    assert 0 < path.stat().st_size <= MAX_PNG_BYTES


def test_clicking_the_outlier_alert_draws_the_layers_trajectory(s, shot_dir) -> None:  # noqa: F811
    s.frame.wait_for_selector("#heads-heatmap .mark", state="attached")  # a head statistic: behaviour labels
    s.frame.click('#alert-items .alert-item[data-rule="outlier_growth"]')
    s.frame.wait_for_selector("#alert-chart #alert-threshold", state="attached")
    assert f"L{GROWING} · outlier growth" in s.frame.text_content("#alert-detail")
    assert "1 layer in alert at step 300" in s.frame.text_content("#alert-summary")
    s.frame.wait_for_function("() => document.querySelector('.grid-card .card-title').textContent === 'ffn_inf_norm'")
    # a per-layer statistic's cells are whole layers: no head's behaviour label is drawn on them
    assert s.frame.query_selector_all("#heads-heatmap .mark") == [] and s.frame.query_selector("#labels-legend") is None
    s.frame.wait_for_function(
        f"() => document.querySelector('.chart-card .card-title').textContent === 'Trajectory · L{GROWING}'"
    )
    s.page.mouse.move(0, 0)
    s.page.screenshot(path=str(shot_dir / "outlier_alert.png"))


def test_a_run_without_the_outlier_statistics_shows_no_panel(s) -> None:
    s.frame.select_option("#run-select", "plain")
    s.frame.wait_for_function("() => document.querySelector('#outlier-card').hidden", timeout=20000)
    s.frame.select_option("#run-select", "growing")
    s.frame.wait_for_selector("#outlier-card:not([hidden])", timeout=20000)
