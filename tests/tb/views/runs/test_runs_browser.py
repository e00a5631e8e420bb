"""The Runs view in a real browser (Playwright, Debian's Chromium, a real ``tensorboard``) on a log folder of 32 runs:
every run ranked worst first as ``/runs`` gives them, sorting by a column, filtering by verdict and name, the
failing runs still training under "stop these now", a run that turns failing while the page is open moving up
live, and a click on a run's name opening it in the other views."""

from __future__ import annotations

import pytest

from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.sweep_logs import MAX_STEPS, write_many
from tests.support.tb_helpers import MAX_PNG_BYTES, screenshot_dir, tensorboard_server
from tests.tb.test_plugin_browser import Session, browser  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

COUNT = 32
ROWS = "#runs-table tbody tr"


@pytest.fixture(scope="module")
def shot_dir(tmp_path_factory):
    return screenshot_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def s(browser, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("bw_runs") / "logs"
    write_many(root, COUNT, seed=5)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        page = browser.new_page()
        sess = Session(page, None, base, root)
        page.on("pageerror", lambda e: sess.errors.append(str(e)))
        page.goto(base + "/#bertwatch")
        sess.frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
        sess.tab("runs")
        sess.frame.wait_for_selector(ROWS, timeout=30000)
        yield sess
        page.close()
        assert not sess.errors, sess.errors


def shown(s) -> list[str]:
    return s.frame.eval_on_selector_all(ROWS, "els => els.map(e => e.dataset.run)")


def test_every_run_is_ranked_worst_first_as_the_route_gives_them(s, shot_dir) -> None:
    table = s.route("runs")
    assert len(table["runs"]) == COUNT
    assert shown(s) == [r["run"] for r in table["runs"]]
    labels = s.frame.eval_on_selector_all(ROWS, "els => els.map(e => e.dataset.label)")
    assert labels == [r["label"] for r in table["runs"]]
    first = s.frame.query_selector(f"{ROWS}:first-child")
    cells = first.eval_on_selector_all("td", "els => els.map(e => e.textContent)")
    top = table["runs"][0]
    assert cells[0] == "1" and cells[1] == top["run"] and cells[2].startswith(top["label"])
    assert cells[3] == f"{top['step']}/{MAX_STEPS}" and cells[4] == top["strip"] and cells[7] == top["reasons"][0]
    count = s.frame.text_content("#runs-count")
    assert count.startswith(f"{COUNT} of {COUNT} runs · ")
    stop = s.frame.eval_on_selector_all("#runs-stop-list li", "els => els.map(e => e.dataset.run)")
    assert stop == [r["run"] for r in table["stop_now"]] and stop
    assert f"saves {table['steps_saved']} training steps" in s.frame.text_content("#runs-stop")
    assert s.shot("runs", shot_dir).stat().st_size < MAX_PNG_BYTES


def test_sorting_and_filtering(s) -> None:
    runs = {r["run"]: r for r in s.route("runs")["runs"]}
    s.frame.click('#runs-table th[data-key="lr"]')
    rates = [runs[name]["learning_rate"] for name in shown(s)]
    assert rates == sorted(rates, reverse=True)
    assert s.frame.get_attribute('#runs-table th[data-key="lr"]', "aria-sort") == "descending"
    s.frame.click('#runs-table th[data-key="lr"]')
    assert [runs[name]["learning_rate"] for name in shown(s)] == sorted(rates)
    s.frame.click('#runs-table th[data-key="rank"]')  # back to worst first
    s.frame.select_option("#runs-level", "failing")
    failing = [name for name, r in runs.items() if r["label"] == "failing"]
    assert sorted(shown(s)) == sorted(failing) and failing
    s.frame.select_option("#runs-level", "")
    s.frame.fill("#runs-filter", "run-1")
    assert sorted(shown(s)) == sorted(name for name in runs if "run-1" in name)
    s.frame.fill("#runs-filter", "")
    assert len(shown(s)) == COUNT


def test_a_run_that_turns_failing_moves_up_live(s) -> None:
    runs = s.route("runs")["runs"]
    young = next(r for r in runs if r["label"] == "healthy" and not r["ended"])
    step = young["step"] + 10
    with SummaryWriter(str(s.root / young["run"])) as w:
        w.add_named_values("verdict", {"level": 2.0, "known": 1.0, "evidence": -9.0, "margin": -0.9}, step, "verdict")
        w.add_step_text("verdict", ["the loss went up"], step, "reasons")
    s.frame.wait_for_function(
        "run => document.querySelector(`#runs-stop-list li[data-run='${run}']`) !== null",
        arg=young["run"],
        timeout=30000,
    )
    row = s.frame.query_selector(f'{ROWS}[data-run="{young["run"]}"]')
    assert row.get_attribute("data-label") == "failing"
    assert row.eval_on_selector("td:nth-child(5)", "e => e.textContent").endswith("X")
    failing = sum(r["label"] == "failing" for r in runs) + 1
    assert young["run"] in shown(s)[:failing]  # among the failing runs at the top


def test_a_click_on_a_run_opens_it_in_the_other_views(s) -> None:
    name = shown(s)[3]
    s.frame.click(f'{ROWS}[data-run="{name}"] button.link')
    assert s.frame.eval_on_selector("#run-select", "e => e.value") == name
    s.frame.wait_for_selector(f'{ROWS}.current[data-run="{name}"]')
    assert s.frame.eval_on_selector_all(f"{ROWS}.current", "els => els.length") == 1
