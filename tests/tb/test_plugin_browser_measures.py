"""The measure selector of the Attention maps view and the weight-vs-contribution panel of the Heads view, in a real
browser (Playwright driving Debian's Chromium against a real ``tensorboard`` process), on event files written here
with the summary writer: synthetic maps per measure and synthetic [CLS]/[SEP] masses by weight, norm and ALTI.

Fails (never skips) when /usr/bin/chromium is missing; never run ``playwright install``. BERTWATCH_SCREENSHOTS=DIR
keeps the screenshots (the docs use them: BERTWATCH_SCREENSHOTS=docs/img).
"""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest

from bertwatch.tb.writer.summary import SummaryWriter  # noqa: E402
from tests.support.tb_helpers import (  # noqa: E402
    MAX_PNG_BYTES,
    TOKENS_A,
    VIEWPORT,
    chromium_context,
    http_json,
    screenshot_dir,
    segments_of,
    synthetic_grids,
    synthetic_maps,
    tensorboard_server,
)

pytestmark = pytest.mark.browser

L, H = 6, 12
STEPS = (0, 50, 100)
RUN = "mixing"


def layer_map(seed: int) -> np.ndarray:
    """``[L, T, T]`` rows summing to one, most of each row on the token itself (a residual-heavy measure)."""
    T = len(TOKENS_A)
    rng = np.random.default_rng(seed)
    m = rng.random((L, T, T)) * 0.2 + 3.0 * np.eye(T)
    return (m / m.sum(-1, keepdims=True)).astype(np.float32)


def mass_grids(step: int) -> dict[str, np.ndarray]:
    """Clark-like weight masses with [SEP] high in the middle layers, norms and ALTI a fraction of them."""
    grids = synthetic_grids(step, max_step=STEPS[-1])
    out = {k: grids[k] for k in ("cls_mass", "sep_mass", "entropy")}
    rng = np.random.default_rng(step + 3)
    for key in ("cls", "sep"):
        weights = out[f"{key}_mass"]
        out[f"{key}_mass_norm"] = (weights * (0.2 + 0.1 * rng.random((L, H)))).astype(np.float32)
        out[f"{key}_mass_alti"] = (weights * (0.1 + 0.1 * rng.random((L, H)))).astype(np.float32)
        out[f"{key}_mass_alti_layer"] = (weights.mean(1, keepdims=True) * 0.15).astype(np.float32)
    return out


def write_mixing_run(run_dir) -> None:
    """Weights and norms at every step, ALTI and rollout from step 50 on, value zeroing at the last step only (with
    one undefined row in layer 2)."""
    seg = segments_of(TOKENS_A)
    with SummaryWriter(str(run_dir)) as w:
        for step in STEPS:
            wall = 1_700_000_000 + step
            w.add_head_grids(mass_grids(step), step, walltime=wall)
            w.add_attention_maps([(TOKENS_A, synthetic_maps(TOKENS_A, seed=step), seg)], step, walltime=wall)
            norms = synthetic_maps(TOKENS_A, seed=step + 500)
            w.add_attention_maps([(TOKENS_A, norms, seg)], step, walltime=wall, measure="norms")
            if step >= 50:
                w.add_attention_maps([(TOKENS_A, layer_map(step), seg)], step, walltime=wall, measure="alti")
                w.add_attention_maps([(TOKENS_A, layer_map(step + 1), seg)], step, walltime=wall, measure="rollout")
        zeroing = layer_map(7)
        zeroing[2, 4] = np.nan  # a row where nothing changed: undefined
        w.add_attention_maps([(TOKENS_A, zeroing, seg)], STEPS[-1], measure="value_zeroing")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("bw_measures") / "logs"
    write_mixing_run(root / RUN)
    with tensorboard_server(root, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        yield base


@pytest.fixture(scope="module")
def frame(server, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as pw:
        ctx = chromium_context(pw, tmp_path_factory.mktemp("chromium_profile"))
        try:
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server + "/#bertwatch")
            fr = page.wait_for_selector("iframe", timeout=30000).content_frame()
            fr.wait_for_selector("#heads-heatmap .cell", timeout=30000)
            fr.page_ = page
            yield fr
        finally:
            ctx.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def shot_dir(tmp_path_factory):
    return screenshot_dir(tmp_path_factory)


def route(server, name, **params):
    return http_json(f"{server}/data/plugin/bertwatch/{name}?{urllib.parse.urlencode(params)}")


def card_title(frame) -> str:
    return frame.eval_on_selector(".map-card .card-title", "e => e.textContent")


def hover_cell(frame, i, j, T):
    box = frame.query_selector("#attn-canvas").bounding_box()
    frame.page_.mouse.move(box["x"] + (j + 0.5) * box["width"] / T, box["y"] + (i + 0.5) * box["height"] / T)
    frame.wait_for_function(
        "([i, j]) => { const r = document.querySelector('#attn-readout');"
        " return r.dataset.query === String(i) && r.dataset.key === String(j); }",
        arg=[i, j],
    )
    return frame.query_selector("#attn-readout")


def select_measure(frame, measure):
    frame.select_option("#measure-select", measure)
    frame.wait_for_function(
        "m => document.querySelector('#measure-note').dataset.measure === m && !!document.querySelector('#attn-canvas')",
        arg=measure,
    )


def test_selector_offers_every_logged_measure_with_its_label(frame, server):
    frame.click('button.tab[data-view="attention"]')
    frame.wait_for_selector("#measure-select option", state="attached")
    options = frame.eval_on_selector_all("#measure-select option", "els => els.map(e => [e.value, e.textContent])")
    listed = route(server, "attention_measures", run=RUN, index=0)["measures"]
    assert options == [[m["measure"], m["label"]] for m in listed]
    assert [o[0] for o in options] == ["weights", "norms", "alti", "rollout", "value_zeroing"]


def test_a_per_head_measure_keeps_example_layer_and_head(frame, server):
    frame.select_option("#layer-select", "2")
    frame.wait_for_function("() => document.querySelector('.map-card .card-title').textContent.includes('L2')")
    frame.select_option("#head-select", "5")
    frame.wait_for_function("() => document.querySelector('.map-card .card-title').textContent.includes('L2 H5')")
    select_measure(frame, "norms")
    assert "Norms · L2 H5" in card_title(frame)
    want = route(server, "attention", run=RUN, tag="bertwatch/attention/00/norms", layer=2)
    T = want["length"]
    readout = hover_cell(frame, 5, 11, T)
    assert float(readout.get_attribute("data-value")) == want["maps"][5][5][11]
    assert frame.eval_on_selector_all(".attn-rows .tok", "els => els.map(e => e.textContent)") == TOKENS_A
    assert frame.eval_on_selector_all("#attn-multiples .mini", "els => els.length") == H
    assert not frame.eval_on_selector("#head-select", "e => e.disabled")


def test_a_per_layer_measure_shows_the_layer_map_with_the_head_picker_off(frame, server, shot_dir):
    select_measure(frame, "alti")
    note = frame.query_selector("#measure-note")
    assert note.get_attribute("data-unit") == "layer"
    assert frame.query_selector("#measure-layer-note") is not None
    assert frame.eval_on_selector("#head-select", "e => e.disabled")
    assert "ALTI · L2 (whole layer)" in card_title(frame)
    assert frame.query_selector("#attn-multiples") is None  # no per-head small multiples of a layer measure
    want = route(server, "attention", run=RUN, tag="bertwatch/attention/00/alti", layer=2)
    assert (want["unit"], want["heads"]) == ("layer", 1)
    np.testing.assert_array_equal(np.array(want["maps"], np.float16)[0], layer_map(STEPS[-1])[2].astype(np.float16))
    T = want["length"]
    readout = hover_cell(frame, 11, 3, T)
    assert float(readout.get_attribute("data-value")) == want["maps"][0][11][3]
    assert frame.eval_on_selector(".attn-rows .tok.hl", "e => e.textContent") == TOKENS_A[11]
    assert frame.eval_on_selector("#row-sum-pill", "e => e.dataset.stochastic") == "true"
    frame.page_.screenshot(path=str(shot_dir / "attention_measures.png"))
    assert (shot_dir / "attention_measures.png").stat().st_size < MAX_PNG_BYTES


def test_a_measure_missing_at_the_pinned_step_says_so(frame, server):
    select_measure(frame, "weights")
    frame.select_option("#attn-step-select", str(STEPS[0]))
    frame.wait_for_function("() => document.querySelector('.map-card .card-sub').textContent.includes('step 0')")
    select_measure(frame, "value_zeroing")
    frame.wait_for_selector("#measure-step-note")
    assert "not logged at step 0" in frame.text_content("#measure-step-note")
    assert frame.eval_on_selector("#attn-step-select", "e => e.value") == ""  # latest
    assert frame.text_content(".map-card .card-sub").endswith(f"step {STEPS[-1]}")
    pill = frame.query_selector("#row-sum-pill")  # layer 2: the other rows sum to one, one row is NaN
    assert (pill.get_attribute("data-stochastic"), pill.get_attribute("data-undefined-rows")) == ("true", "1")


def test_gap_panel_numbers_equal_the_route_and_the_written_grids(frame, server, shot_dir):
    frame.click('button.tab[data-view="heads"]')
    frame.wait_for_selector("#mass-gap-card:not([hidden]) .mass-gap-table")
    body = route(server, "mass_gap", run=RUN)
    grids = mass_grids(STEPS[-1])
    tables = frame.query_selector_all(".mass-gap-table")
    assert [t.get_attribute("data-target") for t in tables] == ["[CLS]", "[SEP]"]
    for table, target in zip(tables, body["targets"]):
        weight = target["measures"][0]["stat"]
        for cell in table.query_selector_all("td.mass"):
            layer = int(cell.evaluate("e => e.parentElement.dataset.layer"))
            m = next(m for m in target["measures"] if m["stat"] == cell.get_attribute("data-stat"))
            assert float(cell.get_attribute("data-value")) == m["layerMeans"][layer]
        gap_cells = table.query_selector_all("td.gap")
        assert len(gap_cells) == L * (len(target["measures"]) - 1)
        for cell in gap_cells:
            layer = int(cell.evaluate("e => e.parentElement.dataset.layer"))
            stat = cell.get_attribute("data-stat")
            want = np.mean(grids[weight][layer], dtype=np.float64) - np.mean(grids[stat][layer], dtype=np.float64)
            assert float(cell.get_attribute("data-value")) == pytest.approx(
                want, rel=2 * float(np.finfo(np.float32).eps)
            )
            assert float(cell.get_attribute("data-value")) == target["gaps"][stat][layer]
    assert frame.eval_on_selector("#mass-gap-step", "e => e.dataset.step") == str(STEPS[-1])
    frame.eval_on_selector("#mass-gap-card", "e => { e.scrollIntoView({block: 'start'}); window.scrollBy(0, -64); }")
    frame.page_.mouse.move(0, 0)
    frame.page_.screenshot(path=str(shot_dir / "mass_gap.png"))
    assert (shot_dir / "mass_gap.png").stat().st_size < MAX_PNG_BYTES


def test_gap_panel_follows_the_step_slider(frame, server):
    frame.eval_on_selector(
        "#step-slider", "e => { e.value = '0'; e.dispatchEvent(new Event('input', {bubbles: true})); }"
    )
    frame.wait_for_function("() => document.querySelector('#mass-gap-step').dataset.step === '0'")
    body = route(server, "mass_gap", run=RUN, step=0)
    sep = body["targets"][1]
    assert [m["stat"] for m in sep["measures"]] == ["sep_mass", "sep_mass_norm", "sep_mass_alti", "sep_mass_alti_layer"]
    grids = mass_grids(STEPS[0])
    want = np.mean(grids["sep_mass"][3], dtype=np.float64) - np.mean(grids["sep_mass_norm"][3], dtype=np.float64)
    table = frame.query_selector('.mass-gap-table[data-target="[SEP]"]')
    cell = table.query_selector('tr[data-layer="3"] td.gap[data-stat="sep_mass_norm"]')
    assert float(cell.get_attribute("data-value")) == sep["gaps"]["sep_mass_norm"][3]
    assert float(cell.get_attribute("data-value")) == pytest.approx(want, rel=2 * float(np.finfo(np.float32).eps))


def move_slider(frame, index):
    """Move the Heads view's step slider; returns once the heatmap and its behaviour labels show that step."""
    frame.eval_on_selector(
        "#step-slider",
        "(e, i) => { e.value = String(i); e.dispatchEvent(new Event('input', {bubbles: true})); }",
        index,
    )
    frame.wait_for_function(
        "s => document.querySelector('#grid-step').dataset.step === s"
        " && document.querySelector('#labels-legend')?.dataset.pending === 'false'",
        arg=str(STEPS[index]),
    )


def test_gap_panel_out_of_view_fetches_nothing_until_it_comes_into_view(frame, server):
    page = frame.page_
    asked: list[str] = []

    def on_request(request):
        if "/mass_gap" in request.url:
            asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(request.url).query).get("step", [""])[0])

    page.set_viewport_size({"width": 1440, "height": 480})
    page.on("request", on_request)
    try:
        frame.evaluate("() => window.scrollTo(0, 0)")
        assert frame.eval_on_selector("#mass-gap-card", "e => e.getBoundingClientRect().top > innerHeight")
        for index in (2, 1):
            move_slider(frame, index)
        page.wait_for_timeout(1000)  # the panels that follow the step ask once it has rested (150 ms)
        assert asked == []
        assert frame.eval_on_selector("#mass-gap-step", "e => e.dataset.step") != str(STEPS[1])
        frame.eval_on_selector("#mass-gap-card", "e => e.scrollIntoView()")
        frame.wait_for_function("s => document.querySelector('#mass-gap-step').dataset.step === s", arg=str(STEPS[1]))
        assert asked == [str(STEPS[1])]
    finally:
        page.remove_listener("request", on_request)
        page.set_viewport_size(VIEWPORT)
        frame.evaluate("() => window.scrollTo(0, 0)")
