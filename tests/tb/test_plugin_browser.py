"""The plugin in a real browser: Playwright driving Debian's Chromium against a real ``tensorboard`` process.

These tests fail (never skip) when /usr/bin/chromium is missing: ``make test`` installs it
(``apt-get install -y chromium``). Never run ``playwright install``. Set BERTWATCH_SCREENSHOTS=DIR to keep
the screenshots of every view (the docs use them: BERTWATCH_SCREENSHOTS=docs/img).
"""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from bertwatch.tb.writer.summary import SummaryWriter  # noqa: E402
from tests.support.tb_helpers import (  # noqa: E402
    MAX_PNG_BYTES,
    PROBE,
    STEPS,
    XSS,
    XSS_RUN,
    chromium_context,
    http_json,
    screenshot_dir,
    synthetic_grids,
    tensorboard_server,
    write_demo_logdir,
)

pytestmark = pytest.mark.browser

#: A run whose drift is measured from a reference model of its own (``reference_model=``): not nil at its first step.
REFERENCE_RUN = "with-reference-model"
REFERENCE_STEPS = (0, 100, 200)


def reference_drift(step: int) -> dict[str, np.ndarray]:
    """Drift grids (6 x 12) away from a reference that is not the run's own start: 0.1 at step 0, growing."""
    base = 0.1 + 0.3 * step / REFERENCE_STEPS[-1]
    drift = base * (0.5 + np.random.default_rng(step).random((6, 12)))
    return {"drift_cosine": 1 - drift, "drift_js": 0.4 * drift}


def write_reference_run(run_dir) -> None:
    with SummaryWriter(str(run_dir)) as w:
        for step in REFERENCE_STEPS:
            w.add_head_grids(reference_drift(step), step, walltime=1_600_000_000 + step)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bw_browser") / "logs"
    write_demo_logdir(root)
    write_reference_run(root / REFERENCE_RUN)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        yield base, root


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        ctx = chromium_context(pw, tmp_path_factory.mktemp("chromium_profile"))
    except Exception:
        pw.stop()
        raise
    yield ctx
    ctx.close()
    pw.stop()


class Session:
    def __init__(self, page, frame, base, root):
        self.page, self.frame, self.base, self.root = page, frame, base, root
        self.dialogs, self.errors = [], []

    def route(self, name, **params):
        return http_json(f"{self.base}/data/plugin/bertwatch/{name}?{urllib.parse.urlencode(params)}")

    def cells(self, heatmap_id):
        return self.frame.eval_on_selector_all(
            f"#{heatmap_id} .cell",
            "els => els.map(e => [Number(e.dataset.layer), Number(e.dataset.head), e.dataset.value, e.textContent])",
        )

    def grid_from_page(self, heatmap_id):
        cells = self.cells(heatmap_id)
        L = max(c[0] for c in cells) + 1
        H = max(c[1] for c in cells) + 1
        out = np.full((L, H), np.nan)
        for l, h, v, _ in cells:
            out[l, h] = float(v)
        return out

    def tab(self, view):
        self.frame.click(f'button.tab[data-view="{view}"]')
        self.frame.wait_for_selector(f"#view-{view}:not([hidden])")

    def wait_step(self, step, selector="#grid-step", timeout=20000):
        self.frame.wait_for_function(
            "([sel, step]) => { const e = document.querySelector(sel); return e && e.dataset.step === String(step); }",
            arg=[selector, step],
            timeout=timeout,
        )

    def shot(self, name, shot_dir):
        path = shot_dir / f"{name}.png"
        if name not in ("heads", "attention"):  # those two show a hover state on purpose
            self.page.mouse.move(0, 0)
        self.page.screenshot(path=str(path))
        return path


def open_session(browser, base, root):
    """A new page on the plugin at ``base``, its frame loaded (the Heads view's grid drawn), page errors collected in
    ``errors``; the caller closes ``page``."""
    page = browser.new_page()
    sess = Session(page, None, base, root)
    page.on("pageerror", lambda e: sess.errors.append(str(e)))
    page.goto(base + "/#bertwatch")
    sess.frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    sess.frame.wait_for_selector("#heads-heatmap .cell", timeout=30000)
    return sess


def as_array(values):
    return np.array([[float(v) for v in row] for row in values])  # float("NaN") / float("Infinity") parse


@pytest.fixture(scope="module")
def s(browser, server):
    base, root = server
    page = browser.pages[0] if browser.pages else browser.new_page()
    sess = Session(page, None, base, root)
    page.on("dialog", lambda d: (sess.dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: sess.errors.append(str(e)))
    page.goto(base + "/#bertwatch")
    sess.frame = page.wait_for_selector("iframe", timeout=30000).content_frame()
    sess.frame.wait_for_selector("#heads-heatmap .cell", timeout=30000)
    sess.frame.select_option("#run-select", "finetune-a")  # runs are listed alphabetically: choose explicitly
    sess.wait_step(STEPS[-1])
    yield sess
    assert not sess.errors, sess.errors


@pytest.fixture(scope="module")
def shot_dir(tmp_path_factory):
    return screenshot_dir(tmp_path_factory)


# ------------------------------------------------------------------------------------------------------ heads


def test_heatmap_numbers_equal_the_route(s):
    s.tab("heads")
    s.frame.select_option("#stat-select", "cls_mass")
    s.wait_step(STEPS[-1])
    route = s.route("grid", run="finetune-a", tag="bertwatch/heads/cls_mass")
    assert route["step"] == STEPS[-1]
    np.testing.assert_array_equal(s.grid_from_page("heads-heatmap"), as_array(route["values"]))
    assert s.frame.text_content("#step-label").strip() == str(STEPS[-1])


def test_heads_view_shows_the_recorded_probe_length(s):
    s.tab("heads")
    s.frame.select_option("#stat-select", "cls_mass")
    s.wait_step(STEPS[-1])
    route = s.route("grid", run="finetune-a", tag="bertwatch/heads/cls_mass")
    assert route["probe"] == PROBE
    s.frame.wait_for_selector("#probe-length")
    pill = s.frame.query_selector("#probe-length")
    assert pill.text_content() == f"{PROBE['truncated']} of {PROBE['examples']} cut to {PROBE['max_length']} tokens"
    assert pill.get_attribute("data-max-length") == str(PROBE["max_length"])
    assert "were cut (ProbeOptions(max_length=...))" in pill.get_attribute("title")
    s.frame.select_option("#run-select", "finetune-b")  # a run that records no probe length shows none
    s.frame.wait_for_function("() => !document.querySelector('#probe-length')", timeout=20000)
    assert s.route("grid", run="finetune-b", tag="bertwatch/heads/cls_mass")["probe"] is None
    s.frame.select_option("#run-select", "finetune-a")
    s.frame.wait_for_selector("#probe-length")


def test_slider_changes_the_numbers(s):
    s.tab("heads")
    s.frame.focus("#step-slider")
    s.page.keyboard.press("Home")
    for _ in range(3):
        s.page.keyboard.press("ArrowRight")
    s.wait_step(STEPS[3])
    assert not s.frame.is_checked("#follow-latest")
    route = s.route("grid", run="finetune-a", tag="bertwatch/heads/cls_mass", step=STEPS[3])
    page_grid = s.grid_from_page("heads-heatmap")
    np.testing.assert_array_equal(page_grid, as_array(route["values"]))
    latest = as_array(s.route("grid", run="finetune-a", tag="bertwatch/heads/cls_mass")["values"])
    assert not np.array_equal(page_grid, latest)
    # another statistic at the same (pinned) step
    s.frame.select_option("#stat-select", "entropy")
    s.frame.wait_for_function("() => document.querySelector('.grid-card .card-title').textContent === 'entropy'")
    s.wait_step(STEPS[3])
    route = s.route("grid", run="finetune-a", tag="bertwatch/heads/entropy", step=STEPS[3])
    np.testing.assert_array_equal(s.grid_from_page("heads-heatmap"), as_array(route["values"]))
    # back to following the latest step
    s.frame.check("#follow-latest")
    s.wait_step(STEPS[-1])
    s.frame.select_option("#stat-select", "cls_mass")
    s.frame.wait_for_function("() => document.querySelector('.grid-card .card-title').textContent === 'cls_mass'")


def test_behaviour_labels_and_trajectory(s):
    s.tab("heads")
    labels = s.route("labels", run="finetune-a", step=STEPS[-1])["labels"]
    glyphs = {"cls": "C", "sep": "S", "punct": "P", "prev": "←", "next": "→", "broad": "B"}
    s.frame.wait_for_selector("#heads-heatmap .cell .mark")
    marks = s.frame.eval_on_selector_all(
        "#heads-heatmap .cell",
        "els => els.map(e => { const m = e.querySelector('.mark'); return m ? m.textContent : null; })",
    )
    expected = [glyphs[l] if l else None for row in labels for l in row]
    assert marks == expected
    s.frame.click('#heads-heatmap .cell[data-layer="2"][data-head="7"]')
    s.frame.wait_for_function("() => document.querySelector('.chart-card .card-title').textContent.includes('L2 H7')")
    assert s.frame.is_visible("#trajectory-chart") and s.frame.is_visible("#layer-means-chart")
    assert "selected" in s.frame.get_attribute('#heads-heatmap .cell[data-layer="2"][data-head="7"]', "class")


def test_nan_infinity_and_hostile_names_render_as_text(s):
    options = s.frame.eval_on_selector_all("#run-select option", "os => os.map(o => o.textContent)")
    assert XSS_RUN in options
    s.frame.select_option("#run-select", XSS_RUN)
    s.tab("heads")
    s.frame.select_option("#stat-select", "sep_to_sep")
    s.frame.wait_for_function(
        "() => { const c = document.querySelector('#heads-heatmap .cell[data-layer=\"0\"][data-head=\"0\"]'); return c && c.dataset.value === 'NaN'; }"
    )
    cell = s.frame.query_selector('#heads-heatmap .cell[data-layer="0"][data-head="0"]')
    assert cell.query_selector(".cell-text").text_content() == "NaN" and "nan" in cell.get_attribute("class")
    s.frame.select_option("#stat-select", "head_importance")
    s.frame.wait_for_function(
        "() => { const c = document.querySelector('#heads-heatmap .cell[data-layer=\"5\"][data-head=\"11\"]'); return c && c.dataset.value === 'Infinity'; }"
    )
    assert s.frame.text_content('#heads-heatmap .cell[data-layer="5"][data-head="11"] .cell-text') == "∞"
    assert s.frame.text_content('#heads-heatmap .cell[data-layer="5"][data-head="10"] .cell-text') == "−∞"
    s.tab("attention")
    s.frame.wait_for_selector(".tok.row")
    tokens = s.frame.eval_on_selector_all(".attn-rows .tok", "els => els.map(e => e.textContent)")
    assert tokens == s.route("attention", run=XSS_RUN, tag="bertwatch/attention/00")["tokens"]
    assert XSS in tokens and "<script>window.__xss=1</script>" in tokens
    assert s.frame.evaluate("document.querySelectorAll('img, script:not([type=module])').length") == 0
    assert s.frame.evaluate("window.__xss") is None
    assert s.page.evaluate("window.__xss") is None
    assert s.dialogs == []
    s.frame.select_option("#run-select", "finetune-a")
    s.tab("heads")
    s.frame.select_option("#stat-select", "cls_mass")
    s.wait_step(STEPS[-1])


# ------------------------------------------------------------------------------------------------------ others


def test_attention_map_hover_shows_the_routes_number(s, shot_dir):
    s.tab("attention")
    s.frame.select_option("#layer-select", "2")
    s.frame.wait_for_function("() => document.querySelector('.map-card .card-title').textContent.includes('L2')")
    s.frame.select_option("#head-select", "5")
    s.frame.wait_for_function("() => document.querySelector('.map-card .card-title').textContent.includes('L2 H5')")
    route = s.route("attention", run="finetune-a", tag="bertwatch/attention/00", layer=2)
    T = route["length"]
    box = s.frame.query_selector("#attn-canvas").bounding_box()
    i, j = 5, 11  # query "jumps", key "[SEP]"
    s.page.mouse.move(box["x"] + (j + 0.5) * box["width"] / T, box["y"] + (i + 0.5) * box["height"] / T)
    s.frame.wait_for_function(f"() => document.querySelector('#attn-readout').dataset.query === '{i}'")
    readout = s.frame.query_selector("#attn-readout")
    assert readout.get_attribute("data-key") == str(j)
    assert float(readout.get_attribute("data-value")) == route["maps"][5][i][j]
    assert s.frame.eval_on_selector(".attn-rows .tok.hl", "e => e.textContent") == route["tokens"][i]
    assert s.frame.eval_on_selector(".attn-cols .tok.hl", "e => e.textContent") == route["tokens"][j]
    assert s.frame.eval_on_selector_all("#attn-multiples .mini", "els => els.length") == route["heads"]
    # a [SEP]-attending head for the picture: pick it in the small multiples
    s.frame.click('#attn-multiples .mini[data-head="10"]')
    s.frame.wait_for_function("() => document.querySelector('.map-card .card-title').textContent.includes('L2 H10')")
    box = s.frame.query_selector("#attn-canvas").bounding_box()
    s.page.mouse.move(box["x"] + (j + 0.5) * box["width"] / T, box["y"] + (i + 0.5) * box["height"] / T)
    s.frame.wait_for_function(
        "v => Number(document.querySelector('#attn-readout').dataset.value) === v", arg=route["maps"][10][i][j]
    )
    assert s.shot("attention", shot_dir).stat().st_size < MAX_PNG_BYTES


def test_ablation_numbers_equal_the_route(s, shot_dir):
    s.tab("ablation")
    s.frame.wait_for_selector("#ablation-heatmap .cell")
    route = s.route("ablation", run="finetune-a", mode="uniform")
    deltas = np.array([[c[1] for c in row] for row in route["heads"]])
    np.testing.assert_array_equal(s.grid_from_page("ablation-heatmap"), deltas)
    flag_js = "els => els.map(e => !!e.querySelector('.sig'))"
    flags = s.frame.eval_on_selector_all("#ablation-heatmap .cell", flag_js)
    by_q = [q < 0.05 for row in route["headsQ"] for q in row]  # default: Benjamini-Hochberg q-values
    assert flags == by_q and "Benjamini" in s.frame.text_content("#ablation-sig-note")
    s.frame.select_option("#ablation-marks", "ci")
    s.frame.wait_for_function("() => document.querySelector('#ablation-sig-note').textContent.includes('uncorrected')")
    flags = s.frame.eval_on_selector_all("#ablation-heatmap .cell", flag_js)
    expected = [(c[2] > 0 or c[3] < 0) for row in route["heads"] for c in row]
    assert flags == expected and any(flags) and flags != by_q
    assert s.frame.text_content("#ablation-marked .stat-label") == "Heads with interval excluding 0"
    assert s.frame.text_content("#ablation-baseline .stat-value") == "0.8612"
    # the constant answer beside the baseline, and the verdict against it in Python's words under the headline
    assert s.frame.text_content("#ablation-constant .stat-label") == "Always 'positive'"
    assert s.frame.text_content("#ablation-constant .stat-value") == "0.5092"
    assert s.frame.text_content("#ablation-trivial") == "".join(route["trivial"]["lines"])
    assert "no-better" not in s.frame.get_attribute("#ablation-trivial", "class")
    assert s.frame.text_content("#ablation-metric .stat-value") == "accuracy"
    assert (
        s.frame.text_content("#ablation-description")
        == route["description"]
        == "sequence classification · accuracy, F1"
    )
    assert s.frame.text_content("#ablation-other-metrics") == "Also at baseline: F1 0.8125"
    assert "predicted class" in s.frame.get_attribute("#ablation-metric", "title")
    s.frame.select_option("#ablation-mode", "zero")  # tables that name no task type
    s.frame.wait_for_function("() => document.querySelector('#ablation-description').textContent === 'accuracy'")
    assert s.frame.query_selector("#ablation-other-metrics") is None
    assert s.frame.query_selector("#ablation-trivial") is None  # tables written without a constant answer
    assert s.frame.text_content("#ablation-constant .stat-value") == "—"
    s.frame.select_option("#ablation-mode", "uniform")
    s.frame.wait_for_function("() => document.querySelector('#ablation-description').textContent !== 'accuracy'")
    assert s.frame.eval_on_selector_all("#ablation-layers .bar", "els => els.length") == len(route["layers"])
    assert s.frame.is_visible("#pruning-chart")
    # the pruning curves: the answers in words (as Python writes them: the route's headline and lines), the random
    # orders' band and the interval band, the -δ line
    answer = s.frame.text_content("#pruning-answer")
    assert route["headline"] in answer and route["headline"] == s.frame.text_content("#ablation-headline")
    assert route["headline"].startswith("872 examples resolve a change of 0.01 (one example is 0.0011;")
    assert "up to 40% of heads (29 of 72) removed with accuracy within 0.01 of the baseline (95% interval)" in answer
    assert "random orders (3): median 10% of heads, range 0%-19%" in answer
    assert s.frame.text_content("#ablation-removable .stat-value") == "up to 40%"
    for band in ("#pruning-random-band", "#pruning-importance-band", "#pruning-iterative-band"):
        assert s.frame.get_attribute(band, "d").count("Z") >= 1, band
    assert "δ = 0.01" in s.frame.text_content("#pruning-chart")
    assert s.frame.get_attribute("#pruning-chart .marker", "visibility") == "visible"
    assert s.shot("ablation", shot_dir).stat().st_size < MAX_PNG_BYTES


def test_drift_compare_and_clusters(s, shot_dir):
    """Drift from the model at step 0 is nil there: the view shows the latest step, the change over the last logged
    interval and each layer's mean over the steps, and says why step 0 is not shown."""
    s.tab("drift")
    s.frame.wait_for_selector("#drift-recent-drift_js .cell")
    for stat in ("drift_cosine", "drift_js"):
        tag = f"bertwatch/heads/{stat}"
        first = as_array(s.route("grid", run="finetune-a", tag=tag, step=STEPS[0])["values"])
        assert np.allclose(first, 1.0 if stat == "drift_cosine" else 0.0)  # nil, as a real run's step 0
        latest = as_array(s.route("grid", run="finetune-a", tag=tag)["values"])
        previous = as_array(s.route("grid", run="finetune-a", tag=tag, step=STEPS[-2])["values"])
        np.testing.assert_array_equal(s.grid_from_page(f"drift-latest-{stat}"), latest)
        np.testing.assert_allclose(s.grid_from_page(f"drift-recent-{stat}"), latest - previous, rtol=1e-6, atol=1e-7)
        assert not s.frame.query_selector(f"#drift-first-{stat}") and not s.frame.query_selector(f"#drift-delta-{stat}")
        means = s.route("layer_means", run="finetune-a", tag=tag)
        assert len(s.frame.query_selector_all(f"#drift-means-{stat} path.series")) == len(means["means"]) == 6
        note = s.frame.text_content(f"#drift-nil-note-{stat}")
        assert note == "Step 0 is not shown: drift is measured from the model at that step, so it is nil there."
    panel_titles = s.frame.eval_on_selector_all(".drift-card .panel-title", "els => els.map(e => e.textContent)")
    assert f"still movingstep {STEPS[-2]} → {STEPS[-1]}" in panel_titles
    assert s.shot("drift", shot_dir).stat().st_size < MAX_PNG_BYTES

    s.tab("compare")
    s.frame.select_option("#compare-a", "finetune-a")
    s.frame.select_option("#compare-b", "finetune-b")
    s.frame.wait_for_function("() => document.querySelector('#compare-b-heatmap') !== null")
    s.frame.wait_for_function(
        "() => [...document.querySelectorAll('.compare-card .card-title')].some(e => e.textContent.includes('finetune-b'))"
    )
    b = s.route("grid", run="finetune-b", tag="bertwatch/heads/cls_mass")
    np.testing.assert_array_equal(s.grid_from_page("compare-b-heatmap"), as_array(b["values"]))
    assert s.shot("compare", shot_dir).stat().st_size < MAX_PNG_BYTES
    s.frame.click("#compare-mode-diff")
    s.frame.wait_for_selector("#compare-diff .cell")
    a = s.route("grid", run="finetune-a", tag="bertwatch/heads/cls_mass")
    np.testing.assert_array_equal(s.grid_from_page("compare-diff"), as_array(a["values"]) - as_array(b["values"]))
    assert s.shot("compare-diff", shot_dir).stat().st_size < MAX_PNG_BYTES
    s.frame.click("#compare-mode-side")

    s.tab("clusters")
    s.frame.wait_for_selector("#cluster-scatter .pt")
    assert s.frame.eval_on_selector_all("#cluster-scatter .pt", "els => els.length") == 72
    assert s.shot("clusters", shot_dir).stat().st_size < MAX_PNG_BYTES


def hover_until_tooltip(s, selector, attempts=10):
    """Hover `selector` until its tooltip shows. A heatmap rebuilt by a later fetch or a live poll hides the
    tooltip (the cell under the mouse is replaced), and a mouse that does not move sends no new mousemove."""
    for _ in range(attempts):
        s.page.mouse.move(0, 0)
        s.frame.hover(selector)
        try:
            s.frame.wait_for_selector(".bw-tooltip", state="visible", timeout=3000)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"no tooltip after hovering {selector} {attempts} times")


def test_heads_screenshot(s, shot_dir):
    s.tab("heads")
    s.wait_step(STEPS[-1])
    s.frame.click('#heads-heatmap .cell[data-layer="4"][data-head="7"]')
    s.frame.wait_for_function("() => document.querySelector('.chart-card .card-title').textContent.includes('L4 H7')")
    s.frame.wait_for_selector("#heads-heatmap .cell .mark")  # labels arrive after the heatmap
    hover_until_tooltip(s, '#heads-heatmap .cell[data-layer="1"][data-head="11"]')
    assert s.shot("heads", shot_dir).stat().st_size < MAX_PNG_BYTES
    s.page.mouse.move(0, 0)


# ------------------------------------------------------------------------------------------------------ live


def test_a_step_written_while_the_page_is_open_appears(s):
    s.tab("heads")
    s.frame.select_option("#stat-select", "cls_mass")
    assert s.frame.is_checked("#follow-latest")
    new_step = STEPS[-1] + 25
    grids = synthetic_grids(new_step, seed=0, max_step=new_step)
    with SummaryWriter(str(s.root / "finetune-a")) as w:
        w.add_head_grids(grids, new_step)
    # TensorBoard reloads every 1 s, the page polls every 3 s
    s.wait_step(new_step, timeout=20000)
    np.testing.assert_array_equal(s.grid_from_page("heads-heatmap").astype(np.float32), grids["cls_mass"])
    assert s.frame.get_attribute("#live-status", "data-state") == "live"


def test_reload_button_sends_data_reloaded(s):
    before = s.frame.evaluate("window.__bertwatch.live.stats.dataReloaded")
    s.page.click("button.reload-button")
    s.frame.wait_for_function(f"() => window.__bertwatch.live.stats.dataReloaded > {before}", timeout=15000)


def test_polling_pauses_while_the_tab_is_hidden(s):
    s.page.get_by_role("tab", name="Scalars").click()
    s.frame.wait_for_function("() => window.frameElement.style.visibility === 'hidden'", timeout=10000)
    before = s.frame.evaluate("window.__bertwatch.live.stats.polls")
    s.frame.wait_for_function("() => document.querySelector('#live-status').dataset.state === 'paused'", timeout=10000)
    s.frame.wait_for_timeout(3500)
    assert s.frame.evaluate("window.__bertwatch.live.stats.polls") == before
    s.page.get_by_role("tab", name="BERT heads").click()
    s.frame.wait_for_function("() => document.querySelector('#live-status').dataset.state === 'live'", timeout=10000)
    s.frame.wait_for_function(f"() => window.__bertwatch.live.stats.polls > {before}", timeout=10000)  # polling resumed


def test_pattern_class_shares_chart(s):
    s.tab("heads")
    s.frame.wait_for_selector("#pattern-card #pattern-chart")
    assert s.frame.is_visible("#pattern-chart")
    assert s.frame.eval_on_selector_all("#pattern-chart path.series", "els => els.length") == 5


def test_word_class_chart(s):
    s.tab("heads")
    s.frame.wait_for_selector("#word-class-card #word-class-chart")
    assert s.frame.is_visible("#word-class-chart")
    assert s.frame.eval_on_selector_all("#word-class-chart path.series", "els => els.length") == 8
    assert s.frame.eval_on_selector_all("#word-class-chart path.series.dashed", "els => els.length") == 4
    legend = s.frame.inner_text("#word-class-card .chart-legend")
    assert "noun" in legend and "noun (uniform)" in legend


def test_cluster_map_moves_with_the_step_slider(s):
    s.tab("clusters")
    s.frame.select_option("#cluster-select", "bertwatch/clustering/js_mds_training")
    s.frame.wait_for_selector("#cluster-step-slider:not([disabled])")
    s.frame.wait_for_selector("#cluster-scatter line.trail")
    assert s.frame.eval_on_selector_all("#cluster-scatter line.trail", "els => els.length") == 72
    s.frame.eval_on_selector("#cluster-step-slider", "e => { e.value = '0'; e.dispatchEvent(new Event('input')); }")
    s.frame.wait_for_function("() => document.querySelectorAll('#cluster-scatter line.trail').length === 0")
    assert s.frame.eval_on_selector_all("#cluster-scatter .pt", "els => els.length") == 72
    s.frame.select_option("#cluster-select", "bertwatch/clustering/js_mds")
    s.frame.wait_for_function("() => document.querySelector('#cluster-step-slider').closest('.stepper').hidden")


def test_drift_against_a_reference_model_shows_the_first_step_too(s, shot_dir):
    """With a reference model of its own the first step's drift is information: first, latest and the change."""
    s.frame.select_option("#run-select", REFERENCE_RUN)
    s.tab("drift")
    s.frame.wait_for_selector("#drift-delta-drift_js .cell")
    try:
        for stat in ("drift_cosine", "drift_js"):
            first, latest = reference_drift(REFERENCE_STEPS[0])[stat], reference_drift(REFERENCE_STEPS[-1])[stat]
            np.testing.assert_allclose(s.grid_from_page(f"drift-first-{stat}"), first, rtol=1e-6)
            np.testing.assert_allclose(s.grid_from_page(f"drift-latest-{stat}"), latest, rtol=1e-6)
            np.testing.assert_allclose(s.grid_from_page(f"drift-delta-{stat}"), latest - first, rtol=1e-5, atol=1e-6)
            assert not s.frame.query_selector(f"#drift-nil-note-{stat}")
        assert s.shot("drift-reference", shot_dir).stat().st_size < MAX_PNG_BYTES
    finally:
        s.frame.select_option("#run-select", "finetune-a")
