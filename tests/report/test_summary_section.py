"""The report's first screen and its details: the heads that changed most against a plain float64 reading of the
event file, float32 rounding noise shown as no change, statistics without values left out with a note, the title of
each kind of page, and layers and heads numbered from 0 in every figure."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from bertwatch.cli.report import cli_report
from bertwatch.report import figures, html
from bertwatch.report.changes import ROUNDING, biggest_changes, grid_change, settled
from bertwatch.report.events import read_run, verdict_steps
from bertwatch.report.html import build_html
from bertwatch.report.result import AblationResult
from bertwatch.tb.writer.summary import SummaryWriter

L, H = 3, 4
STEPS = (0, 10, 20, 30)


def _grids(step: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float32 grids whose drift starts at rounding noise (1e-9, as a step-0 drift reads) and grows."""
    out = {
        "entropy": rng.uniform(0.5, 3.0, (L, H)),
        "cls_mass": rng.uniform(0.0, 1.0, (L, H)),
        "sep_mass": rng.uniform(0.0, 1.0, (L, H)),
        "cls_mass_norm": rng.uniform(0.0, 1.0, (L, H)),
        "max_logit": rng.uniform(2.0, 20.0, (L, H)),
        "head_importance": rng.uniform(0.0, 0.1, (L, H)),
        "drift_js": np.full((L, H), 1e-9) if step == 0 else rng.uniform(0.0, 0.2, (L, H)),
        "intra_segment_mass": np.full((L, H), np.nan),
    }
    return {k: v.astype(np.float32) for k, v in out.items()}


def _result() -> AblationResult:
    """A sweep of the same shape, every head costing a little (head L1 H2 the most)."""
    cells = np.zeros((L, H, 5))
    cells[..., 1] = -0.01
    cells[1, 2, 1] = -0.05
    cells[..., 0] = 0.8 + cells[..., 1]
    cells[..., 2], cells[..., 3], cells[..., 4] = cells[..., 1] - 0.01, cells[..., 1] + 0.01, 0.5
    return AblationResult("sst2", "uniform", "accuracy", 50, 0.8, cells, cells[:, 0].copy())


def _write_run(run: Path) -> None:
    rng = np.random.default_rng(7)
    with SummaryWriter(str(run)) as writer:
        for step in STEPS:
            writer.add_head_grids(_grids(step, rng), step=step)


def _plain_top_heads(event_dir: Path, stat: str, count: int = 3) -> list[tuple[int, int]]:
    """|last − first| per head in float64, read straight from the event file with TensorBoard's own reader; the
    ``count`` largest (ties by layer, then head), heads without a value or without a change left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(event_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    events = sorted(accumulator.Tensors(f"bertwatch/heads/{stat}"), key=lambda e: e.step)
    first = tensor_util.make_ndarray(events[0].tensor_proto).astype(np.float64)
    last = tensor_util.make_ndarray(events[-1].tensor_proto).astype(np.float64)
    cells = []
    for layer in range(first.shape[0]):
        for head in range(first.shape[1]):
            change = abs(last[layer, head] - first[layer, head])
            if np.isfinite(change) and change > 0:
                cells.append((-change, layer, head))
    return [(layer, head) for _, layer, head in sorted(cells)[:count]]


def _listed(page: str, stat: str) -> list[tuple[int, int]]:
    """The heads the page's details list as changed most for ``stat``, in order."""
    match = re.search(rf'<p class="changed" data-stat="{stat}">(.*?)</p>', page)
    assert match, f"no 'changed most' line for {stat}"
    return [(int(l), int(h)) for l, h in re.findall(r"<b>L(\d+) H(\d+)</b>", match.group(1))]


def test_the_heads_that_changed_most_are_those_of_a_plain_reading_of_the_event_file(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a"
    _write_run(run)
    assert cli_report([str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    for stat in ("entropy", "cls_mass", "sep_mass", "cls_mass_norm", "max_logit", "head_importance", "drift_js"):
        expected = _plain_top_heads(run, stat)
        assert len(expected) == 3
        assert _listed(page, stat) == expected, stat
    summary = page[page.index('<section id="summary">') : page.index("</section>")]
    drift = re.search(r'data-stat="drift_js">(.*?)</span>', summary).group(1)
    assert [(int(l), int(h)) for l, h in re.findall(r"<b>L(\d+) H(\d+)</b>", drift)] == _plain_top_heads(
        run, "drift_js"
    )
    assert "0.000 →" in drift  # the step-0 drift of 1e-9 is written as none
    # each family card names its statistic and the same heads as the details
    for stat in re.findall(r'<span data-stat="(\w+)">', summary):
        card = re.search(rf'<span data-stat="{stat}">(.*?)</span>', summary).group(1)
        assert [(int(l), int(h)) for l, h in re.findall(r"<b>L(\d+) H(\d+)</b>", card)] == _listed(page, stat)
    assert "7 with values" in summary and "4, from step 0 to step 30" in summary


def test_a_change_within_float32_rounding_shows_as_no_change() -> None:
    assert settled("drift_js", [[1e-9, 0.05]], 0.0).tolist() == [[0.0, 0.05]]
    assert settled("drift_cosine", [[np.float32(0.99999994), 0.9]], 1.0).tolist() == [[1.0, 0.9]]
    noise = {"first": (0, np.full((2, 2), 1e-9)), "last": (10, np.full((2, 2), 2e-9))}
    assert np.all(grid_change("drift_js", noise["first"][1], noise["last"][1]) == 0.0)
    assert biggest_changes("drift_js", noise) == []
    # the rule scales with the values: one rounding of 1000 is noise, the same step on 1e-6 is not
    big = np.array([[1000.0]])
    assert grid_change("max_logit", big, big * (1 + ROUNDING / 2))[0, 0] == 0.0
    small = np.array([[1e-6]])
    assert grid_change("attn_grad_sep", small, small + 1e-7)[0, 0] == pytest.approx(1e-7)
    page = build_html([], {"grids": {"drift_js": noise}, "source": "a run"})
    assert '<p class="changed" data-stat="drift_js">Changed most: no head changed beyond float32 rounding' in page


def test_a_statistic_without_values_is_left_out_with_a_note(tmp_path: Path) -> None:
    _write_run(tmp_path)
    _, training = read_run(tmp_path)
    page = build_html([], training)
    note = re.search(r'<p class="note" id="left-out">(.*?)</p>', page).group(1)
    assert "<code>intra_segment_mass</code>" in note
    assert 'id="stat-intra_segment_mass"' not in page and 'data-stat="intra_segment_mass"' not in page
    assert 'id="stat-entropy"' in page


def test_the_title_says_what_the_page_holds(tmp_path: Path) -> None:
    _write_run(tmp_path)
    _, training = read_run(tmp_path)
    titles = {
        "training run": build_html([], training),
        "training run and ablation": build_html([_result()], training),
        "ablation": build_html([_result()]),
    }
    for what, page in titles.items():
        assert f"<title>bertwatch report: {what}</title>" in page and f"<h1>bertwatch report: {what}</h1>" in page
    assert "Ablation verdict (uniform)" in titles["ablation"] and "Drift from" not in titles["ablation"]
    assert "disabling <b>L1 H2</b> alone costs most" in titles["ablation"]
    assert "<title>bertwatch report</title>" in build_html([], None, extra_sections=["<p>x</p>"])


def test_every_figure_numbers_layers_and_heads_from_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The tick labels of every figure the report draws: heads 0..H-1 across, layers 0..L-1 down or along."""
    seen: list[tuple[str, list[str], list[str]]] = []
    real = figures.png_bytes

    def recording(figure) -> bytes:
        figure.canvas.draw()  # tick labels left to the formatter exist once drawn
        for ax in figure.axes:
            if ax.get_label() != "<colorbar>":
                xs = [t.get_text() for t in ax.get_xticklabels()]
                ys = [t.get_text() for t in ax.get_yticklabels()]
                seen.append((ax.get_xlabel(), xs, ys))
        return real(figure)

    monkeypatch.setattr(figures, "png_bytes", recording)
    monkeypatch.setattr(html, "png_bytes", recording)
    _write_run(tmp_path)
    _, training = read_run(tmp_path)
    build_html([_result()], training)
    heads = [str(h) for h in range(H)]
    layers = [str(l) for l in range(L)]
    grids = [(x, y) for label, x, y in seen if label == "head"]
    assert grids and all(x == heads and y == layers for x, y in grids)
    bars = [x for label, x, _ in seen if label == "layer disabled"]
    assert bars == [layers]
    masses = [x for label, x, _ in seen if label == "layer"]
    assert masses and all(x == layers for x in masses)


def test_a_per_layer_statistic_names_layers_not_heads() -> None:
    first = np.array([[0.2], [0.5], [0.3]])
    last = np.array([[0.25], [0.1], [0.3]])
    grids = {"mixing_ratio": {"first": (0, first), "last": (10, last), "steps": [0, 10], "values": [first, last]}}
    page = build_html([], {"grids": grids, "source": "a run"})
    assert re.findall(r"<b>(L\d+(?: H\d+)?)</b>", re.search(r'data-stat="mixing_ratio">(.*?)</p>', page).group(1)) == [
        "L1",
        "L0",
    ]


def test_the_glance_gives_the_run_verdict_at_its_last_step_and_the_steps_that_were_not_healthy(tmp_path: Path) -> None:
    from bertwatch.core.verdict import LEVELS, VERDICT_SERIES

    run = tmp_path / "run"
    _write_run(run)
    levels = {0: 0, 10: 1, 20: 2, 30: 1}
    reasons = {0: [], 10: ["a collapse <now>"], 20: ["a collapse since step 10", "stuck since step 10"], 30: ["x"]}
    with SummaryWriter(str(run)) as writer:
        for step, level in levels.items():
            writer.add_named_values(VERDICT_SERIES, {"level": float(level)}, step, description=LEVELS[level])
            writer.add_step_text(VERDICT_SERIES, reasons[step], step, levels=list(LEVELS))
    training = read_run(run)[1]
    # every step's reasons come back, not only the first write's
    assert verdict_steps(training) == [(step, levels[step], reasons[step]) for step in levels]
    page = build_html([], training)
    (row,) = re.findall(r"run verdict</dt><dd>(.*?)</dd>", page)
    assert re.sub(r"<[^>]+>", "|", row) == (
        "||at risk| at step 30, the last judged|||x||||Failing at 1 of 4 judged steps (20); at risk at 2 of 4 "
        "judged steps (10, 30)|"
    )
    assert "since step" not in row  # step 30 alone is at risk now
    writer_steps = read_run(run)[1]
    writer_steps["series"][VERDICT_SERIES]["values"][-2, 0] = 1.0  # steps 10 to 30 at risk: since step 10
    assert "the last judged, since step 10" in build_html([], writer_steps)
    assert "a collapse &lt;now&gt;" not in row  # an earlier step's reasons are not the last step's
    assert 'class="run-verdict at-risk"' in row
    plain = tmp_path / "plain"
    _write_run(plain)
    assert "run verdict" not in build_html([], read_run(plain)[1])
