"""The Heads view's stability-alert strip in a real browser (Playwright, Debian's Chromium, a real ``tensorboard``):
the strip lists what ``/alerts`` serves, a click draws the head's trajectory with its reference and threshold and
marks the alert on the Heads trajectory, and a run without alerts shows no strip."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from bertwatch.core.alerts import active_alerts  # noqa: E402
from bertwatch.tb.writer.summary import SummaryWriter  # noqa: E402
from tests.support.tb_helpers import MAX_PNG_BYTES, STEPS, L, synthetic_grids, tensorboard_server
from tests.tb.test_plugin_browser import browser, open_session, shot_dir  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

COLLAPSED, SINK = (1, 4), (3, 2)  # an entropy collapse from step 150, a sink collapse from step 250 (ended at 275)


def _write_runs(root: Path) -> None:
    history = []
    with SummaryWriter(str(root / "diverging")) as w:
        for step in STEPS:
            grids = synthetic_grids(step)
            if step >= 150:
                grids["entropy"][COLLAPSED] = 0.05
            if step == 250:
                grids["cls_mass"][SINK], grids["sep_mass"][SINK] = 0.97, 0.02
            w.add_head_grids(grids, step)
            history.append((step, grids))
            w.add_alerts(active_alerts(history[0][1], history), L, grids["entropy"].shape[1], step)
    with SummaryWriter(str(root / "quiet")) as w:
        for step in STEPS[:3]:
            w.add_head_grids(synthetic_grids(step), step)


@pytest.fixture(scope="module")
def s(browser, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("bw_alerts") / "logs"
    _write_runs(root)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        sess = open_session(browser, base, root)
        sess.frame.select_option("#run-select", "diverging")
        sess.wait_step(STEPS[-1])
        yield sess
        sess.page.close()
        assert not sess.errors, sess.errors


def test_the_strip_lists_the_routes_alerts_and_a_click_draws_the_reference(s, shot_dir) -> None:  # noqa: F811
    route = s.route("alerts", run="diverging")
    assert [(e["layer"], e["head"], e["rule"], e["since"], e["active"]) for e in route["episodes"]] == [
        (*COLLAPSED, "entropy_collapse", 150, True),
        (*SINK, "sink_collapse", 250, False),
    ]
    s.frame.wait_for_selector("#alert-strip:not([hidden]) .alert-item")
    items = s.frame.eval_on_selector_all(
        "#alert-items .alert-item",
        "els => els.map(e => [+e.dataset.layer, +e.dataset.head, e.dataset.rule, +e.dataset.since, e.textContent])",
    )
    assert [tuple(i[:4]) for i in items] == [(*COLLAPSED, "entropy_collapse", 150), (*SINK, "sink_collapse", 250)]
    assert re.fullmatch(r"L1 H4 entropy collapse · since 150", items[0][4])
    assert re.fullmatch(r"L3 H2 sink collapse · since 250 – 250", items[1][4])
    assert "1 head in alert at step 300, 2 alerts in all" in s.frame.text_content("#alert-summary")

    s.frame.select_option("#stat-select", "cls_mass")
    s.frame.click('#alert-items .alert-item[data-rule="entropy_collapse"]')
    s.frame.wait_for_selector("#alert-chart #alert-reference", state="attached")  # a 0-height line
    episode = route["episodes"][0]
    label = s.frame.text_content("#alert-chart .hline-label")
    assert label.startswith("reference ") and np.isclose(float(label.split()[1]), episode["reference"], rtol=5e-3)
    reference_y = float(s.frame.get_attribute("#alert-reference", "y1"))
    threshold_y = float(s.frame.get_attribute("#alert-threshold", "y1"))
    assert threshold_y > reference_y  # the threshold lies below the reference: lower on the chart
    # the Heads view follows: entropy, the alerted head selected, the alert's steps marked on its trajectory
    s.frame.wait_for_function("() => document.querySelector('.grid-card .card-title').textContent === 'entropy'")
    s.frame.wait_for_selector("#trajectory-chart #trajectory-alert-band")
    selected = s.frame.get_attribute(
        f'#heads-heatmap .cell[data-layer="{COLLAPSED[0]}"][data-head="{COLLAPSED[1]}"]', "class"
    )
    assert "selected" in selected
    trajectory = s.route("trajectory", run="diverging", tag="bertwatch/heads/entropy", layer=1, head=4)
    assert np.isclose(trajectory["values"][0], episode["reference"], rtol=1e-6)
    s.page.mouse.move(0, 0)
    path = shot_dir / "alerts.png"
    s.page.screenshot(path=str(path))
    assert 0 < path.stat().st_size <= MAX_PNG_BYTES


def test_the_sink_alert_draws_cls_plus_sep(s) -> None:
    s.frame.click('#alert-items .alert-item[data-rule="sink_collapse"]')
    s.frame.wait_for_function(
        "() => document.querySelector('#alert-detail .card-sub')?.textContent.includes('cls_mass + sep_mass')"
    )
    assert s.frame.is_visible("#alert-chart")


def test_a_run_without_alerts_shows_no_strip(s) -> None:
    s.frame.select_option("#run-select", "quiet")
    s.frame.wait_for_function("() => document.querySelector('#alert-strip').hidden", timeout=20000)
    s.frame.select_option("#run-select", "diverging")
    s.frame.wait_for_selector("#alert-strip:not([hidden])")
