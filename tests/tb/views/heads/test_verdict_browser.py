"""The Heads view's run-verdict strip in a real browser (Playwright, Debian's Chromium, a real ``tensorboard``): the
level now and since when, its reasons, one square per judged step whose click shows that step's own reasons, the
run-health charts with the thresholds drawn; a healthy run says so, and a run without a verdict shows no strip."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertwatch.core.verdict import NOTHING_YET
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import MAX_PNG_BYTES, STEPS, synthetic_grids, tensorboard_server
from tests.tb.test_plugin_browser import Session, browser  # noqa: F401 (fixtures)
from tests.tb.views.heads.test_verdict_route import write_verdict_run

pytestmark = pytest.mark.browser


def _write_runs(root: Path) -> dict:
    verdicts = {}
    for name in ("failing", "healthy", "plain"):
        with SummaryWriter(str(root / name)) as w:
            for step in STEPS:
                w.add_head_grids({"entropy": synthetic_grids(step)["entropy"]}, step)
        if name != "plain":
            verdicts[name] = write_verdict_run(root / name, failing=name == "failing")
    return verdicts


@pytest.fixture(scope="module")
def s(browser, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("bw_verdict") / "logs"
    verdicts = _write_runs(root)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        page = browser.new_page()
        sess = Session(page, None, base, root)
        sess.verdicts = verdicts
        page.on("pageerror", lambda e: sess.errors.append(str(e)))
        page.goto(base + "/#bertwatch")
        sess.frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
        sess.frame.wait_for_selector("#heads-heatmap .cell", timeout=30000)
        sess.frame.select_option("#run-select", "failing")
        sess.wait_step(STEPS[-1])
        yield sess
        page.close()
        assert not sess.errors, sess.errors


def test_the_strip_gives_the_level_since_when_and_the_reasons(s, tmp_path) -> None:
    verdicts = s.verdicts["failing"]
    first_failing = next(v.step for v in verdicts if v.level == 2)
    s.frame.wait_for_selector("#verdict-strip:not([hidden]) #verdict-level")
    assert s.frame.text_content("#verdict-level") == "failing"
    summary = s.frame.text_content("#verdict-summary")
    assert f"since step {first_failing} · judged at step {STEPS[-1]}" in summary
    reasons = s.frame.eval_on_selector_all("#verdict-reasons li", "els => els.map(e => e.textContent)")
    assert reasons == list(verdicts[-1].reasons)
    squares = s.frame.eval_on_selector_all(
        "#verdict-timeline .verdict-step", "els => els.map(e => [+e.dataset.step, +e.dataset.level])"
    )
    assert squares == [[v.step, v.level] for v in verdicts]
    # a level 0 that no evidence of learning backs is grey, "cannot tell", not the healthy green
    classes = s.frame.eval_on_selector_all("#verdict-timeline .verdict-step", "els => els.map(e => e.className)")
    grey = {"healthy": "healthy", "cannot tell": "cannot-tell", "at risk": "at-risk", "failing": "failing"}
    assert [c.replace("verdict-step ", "").replace(" picked", "") for c in classes] == [grey[v.label] for v in verdicts]
    assert verdicts[0].label == "cannot tell"
    # an earlier step's square gives that step's own reasons
    risky = next(v for v in verdicts if v.level == 1)
    s.frame.click(f'#verdict-timeline .verdict-step[data-step="{risky.step}"]')
    reasons = s.frame.eval_on_selector_all("#verdict-reasons li", "els => els.map(e => e.textContent)")
    assert reasons == [f"at step {risky.step}: at risk", *risky.reasons]
    s.frame.click(f'#verdict-timeline .verdict-step[data-step="{risky.step}"]')  # back to the latest
    # the three charts, each with its thresholds
    for chart, lines in (("gradient", 2), ("share", 1), ("loss", 2)):
        assert len(s.frame.query_selector_all(f"#verdict-chart-{chart} .hline")) == lines
    loss_labels = s.frame.eval_on_selector_all("#verdict-chart-loss .hline-label", "els => els.map(e => e.textContent)")
    assert loss_labels == [
        "the constant prediction's: learning when the band is below",
        "not learning when the band is above 0.95",
    ]
    assert "also weighs the Trainer's evaluations" in s.frame.text_content("#verdict-more")
    labels = s.frame.eval_on_selector_all("#verdict-chart-gradient .hline-label", "els => els.map(e => e.textContent)")
    assert labels == ["at risk < 10%", "vanished < 1%"]
    # the vanishing threshold lies below the at-risk one on the (log) chart
    risk_y, fail_y = (
        float(e.get_attribute("y1")) for e in s.frame.query_selector_all("#verdict-chart-gradient .hline")
    )
    assert fail_y > risk_y
    assert s.frame.query_selector_all("#verdict-chart-share .band")  # the steps at risk or failing shaded
    s.page.mouse.move(0, 0)
    path = tmp_path / "verdict.png"  # docs/img/verdict_*.png come from examples/failing_run.py's real runs
    s.frame.locator("#verdict-strip").screenshot(path=str(path))
    assert 0 < path.stat().st_size <= MAX_PNG_BYTES


def test_a_healthy_run_says_so(s) -> None:
    s.frame.select_option("#run-select", "healthy")
    s.frame.wait_for_function("() => document.querySelector('#verdict-level')?.textContent === 'healthy'")
    assert not s.frame.query_selector_all(
        "#verdict-timeline .verdict-step.failing, #verdict-timeline .verdict-step.at-risk"
    )
    reasons = s.frame.eval_on_selector_all("#verdict-reasons li", "els => els.map(e => e.textContent)")
    assert reasons == list(s.verdicts["healthy"][-1].reasons) and reasons[0].startswith("probe loss 0.347")
    s.frame.click('#verdict-timeline .verdict-step[data-step="0"]')  # step 0: nothing to tell yet, and it says so
    assert NOTHING_YET in s.frame.text_content("#verdict-reasons")
    s.frame.click('#verdict-timeline .verdict-step[data-step="0"]')
    assert not s.frame.query_selector_all("#verdict-chart-share .band")


def test_the_loss_charts_labels_never_overlap(s) -> None:
    s.frame.select_option("#run-select", "healthy")
    s.frame.wait_for_function("() => document.querySelector('#verdict-level')?.textContent === 'healthy'")
    # a learning run's loss chart spans ~0.3 to 1, so the constant's rule (1) and the not-learning one (0.95) lie
    # closer than a label's height: each label stays beside its own rule, apart from the other, within the chart
    rules = [float(e.get_attribute("y1")) for e in s.frame.query_selector_all("#verdict-chart-loss .hline")]
    boxes = s.frame.eval_on_selector_all(
        "#verdict-chart-loss .hline-label",
        "els => els.map(e => { const b = e.getBBox(); return [b.y, b.y + b.height]; })",
    )
    height = float(s.frame.get_attribute("#verdict-chart-loss", "height"))
    (upper_rule, upper), (lower_rule, lower) = sorted(zip(rules, boxes))
    assert 0 < lower_rule - upper_rule < upper[1] - upper[0]
    assert upper[1] <= lower[0]
    for rule, (top, bottom) in ((upper_rule, upper), (lower_rule, lower)):
        assert top - 5 <= rule <= bottom + 5 and 0 <= top and bottom <= height


def test_a_run_without_a_verdict_shows_no_strip(s) -> None:
    s.frame.select_option("#run-select", "plain")
    s.frame.wait_for_function("() => document.querySelector('#verdict-strip').hidden", timeout=20000)
    s.frame.select_option("#run-select", "failing")
    s.frame.wait_for_selector("#verdict-strip:not([hidden])")
