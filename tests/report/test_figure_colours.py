"""Every colour the report's figures draw comes from colours.json through bertwatch.tb.colours, the table the plugin
draws with: missing values in its grey (not matplotlib's "#bbbbbb"), grids on its sequential ramp (not viridis),
pruning orders, series and marks in the plugin's colours. The figures are caught as drawn (``png_bytes``) and their
artists read; the plugin's side of the same colours is read in a browser in tests/tb/test_colour_browser.py."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertwatch.report import figures, pruning_section, training_section
from bertwatch.tb import colours as c

pytestmark = pytest.mark.fast

REPORT = Path(__file__).resolve().parents[2] / "bertwatch" / "report"
HEX = re.compile(r"#[0-9a-fA-F]{3,6}\b")


def drawn(monkeypatch: pytest.MonkeyPatch, make: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
    """The matplotlib figures ``make(*args, **kwargs)`` renders, caught as they are turned into PNG bytes."""
    caught: list[Any] = []
    original = figures.png_bytes

    def keep(figure: Any) -> bytes:
        caught.append(figure)
        return original(figure)

    for module in (figures, pruning_section, training_section):
        monkeypatch.setattr(module, "png_bytes", keep)
    make(*args, **kwargs)
    return caught


def as_hex(colour: Any) -> str:
    import matplotlib.colors

    return matplotlib.colors.to_hex(colour)


def rgb_of(colour: Any) -> tuple[int, int, int]:
    """Any matplotlib colour (a name, a hex, an RGB(A) tuple) as integers."""
    import matplotlib.colors

    return tuple(int(round(255 * x)) for x in matplotlib.colors.to_rgb(colour))  # type: ignore[return-value]


def test_the_report_code_writes_no_colour_of_its_own() -> None:
    """A colour written as a literal in a figure (a hex, a named colour, a matplotlib colormap) would be a second
    home: the report's figures name colours only through bertwatch.tb.colours."""
    for path in REPORT.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        literal = re.search(r"\b(color|colors|ecolor|facecolor|edgecolor|bad|cmap)\s*=\s*[\"'(]", text)
        assert literal is None, (path.name, literal and literal.group(0))
        assert "viridis" not in text and ".get_color()" not in text, path.name
    for name in ("figures.py", "pruning_section.py", "training_section.py"):
        assert not HEX.search((REPORT / name).read_text(encoding="utf-8")), name


def test_a_grid_draws_missing_values_grey_and_values_on_the_sequential_ramp(monkeypatch) -> None:
    grid = np.linspace(0.0, 1.0, 12).reshape(3, 4)
    grid[1, 2] = np.nan
    labels = [["" for _ in range(4)] for _ in range(3)]
    labels[0][0], labels[2][3] = "a", "b"  # on the lightest and the darkest cell
    (fig,) = drawn(monkeypatch, figures.grid_heatmap, grid, "t", labels=labels)
    image = fig.axes[0].images[0]
    assert as_hex(image.cmap.get_bad()) == c.nan_hex()
    for t in np.linspace(0.0, 1.0, 101):
        plugin = c.sequential_rgb(float(t), 0.0, 1.0)
        assert max(abs(a - b) for a, b in zip(rgb_of(image.cmap(t)), plugin)) <= 1, t
    texts = {t.get_text(): as_hex(t.get_color()) for t in fig.axes[0].texts}
    assert texts == {"a": c.text_on(c.sequential_rgb(0.0, 0, 1)), "b": c.text_on(c.sequential_rgb(1.0, 0, 1))}
    import matplotlib.image

    png = matplotlib.image.imread(io.BytesIO(figures.grid_heatmap(grid, "t")))
    pixels = np.round(255 * png[..., :3]).astype(int)
    count = lambda rgb: int(np.all(pixels == rgb, axis=-1).sum())  # noqa: E731
    nan = tuple(int(c.nan_hex()[i : i + 2], 16) for i in (1, 3, 5))
    assert count(nan) > 400 and count((187, 187, 187)) < 50  # the NaN cell as rendered, not the grey of before
    (fig,) = drawn(monkeypatch, figures.grid_heatmap, grid - 0.5, "t", center=0.0)
    assert as_hex(fig.axes[0].images[0].cmap.get_bad()) == c.nan_hex()
    assert as_hex(fig.axes[0].images[0].cmap(0.0)) == c.diverging_stops()[0]


@pytest.mark.parametrize("stat", ["cls_mass", "drift_js", "drift_cosine"])
def test_every_panel_of_a_statistic_draws_missing_values_grey(monkeypatch, stat: str) -> None:
    first = np.full((2, 3), 0.2)
    last = np.array([[0.1, np.nan, 0.4], [0.3, 0.2, 0.6]]) if stat != "drift_cosine" else 1 - np.full((2, 3), 0.1)
    (fig,) = drawn(monkeypatch, figures.change_panels, stat, (0, first), (10, last))
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 3 and all(as_hex(i.cmap.get_bad()) == c.nan_hex() for i in images)
    if stat == "cls_mass":  # the first and last steps on the sequential ramp, as the plugin draws masses
        stops = c.sequential_stops()
        assert all(as_hex(i.cmap(0.0)) == stops[0] and as_hex(i.cmap(1.0)) == stops[-1] for i in images[:2])


def test_the_pruning_orders_are_drawn_in_the_plugins_colours(monkeypatch) -> None:
    from tests.support.tb_helpers import curves_result

    (fig,) = drawn(monkeypatch, pruning_section.curves_figure, curves_result(0.86))
    ax = fig.axes[0]
    lines = {line.get_label(): as_hex(line.get_color()) for line in ax.get_lines()}
    assert lines["importance (one-shot)"] == c.pruning_hex("importance")
    assert lines["iterative importance"] == c.pruning_hex("iterative")
    assert lines["random orders: mean"] == c.pruning_hex("randomMean")
    assert lines["δ = 0.01"] == c.mark_hex("delta")
    bands = {band.get_gid(): band for band in ax.collections}
    for order in ("importance", "iterative", "random"):
        band = bands[f"pruning-{order}-band"]
        assert as_hex(band.get_facecolor()[0]) == c.pruning_hex(order)
        assert band.get_alpha() == c.band_opacity(order)


def test_series_and_marks_are_the_plugins(monkeypatch) -> None:
    targets = [
        {
            "target": "[SEP]",
            "measures": [{"label": name, "layerMeans": [0.5, 0.4, 0.3]} for name in ("weights", "norms", "ALTI")],
            "gaps": {"alti": [0.1, 0.1, 0.1]},
        }
    ]
    (fig,) = drawn(monkeypatch, figures.mass_gap_figure, targets)
    assert [as_hex(line.get_color()) for line in fig.axes[0].get_lines()] == [c.series_hex(k) for k in range(3)]
    assert as_hex(fig.axes[0].collections[0].get_facecolor()[0]) == c.mark_hex("gap")
    values = np.random.default_rng(0).random((4, 2, 3))
    (fig,) = drawn(monkeypatch, figures.trajectory_figure, [0, 1, 2, 3], values, [(0, 1), (1, 2)], "x")
    assert [as_hex(line.get_color()) for line in fig.axes[0].get_lines()] == [c.series_hex(0), c.series_hex(1)]
    entries = {"ffn_inf_norm": {"steps": [0, 5], "values": np.ones((2, 3, 1)) * [[[1.0]], [[2.0]]]}}
    (fig,) = drawn(monkeypatch, figures.outlier_figure, entries, {"ffn_inf_norm": 4.0})
    lines = [as_hex(line.get_color()) for line in fig.axes[0].get_lines()]
    assert lines == [c.layer_hex(l, 3) for l in range(3)] + [c.mark_hex("alert"), c.mark_hex("reference")]
    series = {"names": ["noun", "verb", "noun_uniform"], "steps": [0, 5], "values": [[0.1, 0.2, 0.1], [0.3, 0.1, 0.1]]}
    (fig,) = drawn(monkeypatch, training_section.details_section, {"series": {"word_classes": series}})
    lines = [as_hex(line.get_color()) for line in fig.axes[0].get_lines()]
    assert lines == [c.series_hex(0), c.series_hex(1), c.series_hex(0)]  # the uniform head dashed in its class's
