"""The report's outlier trajectories: a run that wrote the per-layer outlier statistics gets a figure and a table of
each layer's last values; a run without them gets no such section."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer.summary import SummaryWriter

pytestmark = pytest.mark.fast


def test_a_run_with_outliers_gets_their_trajectories_and_one_without_does_not(tmp_path) -> None:
    with SummaryWriter(str(tmp_path / "run")) as writer:
        for step in (0, 10, 20):
            growth = 1 + step / 10
            writer.add_head_grids(
                {
                    "ffn_inf_norm": np.array([[2.0], [5.0 * growth], [7.0]]),
                    "residual_inf_norm": np.array([[3.0], [9.0], [11.0]]),
                    "delimiter_share": np.array([[0.1], [0.85], [0.3]]),
                    "outlier_dim": np.array([[7.0], [308.0], [308.0]]),
                    "entropy": np.full((3, 2), 2.0),
                },
                step,
            )
    _, training = read_run(tmp_path / "run")
    page = build_html([], training)
    assert '<h3 id="outliers">' in page
    section = page[page.index('<h3 id="outliers">') :]
    section = section[: section.index("</table>")]
    assert "data:image/png;base64," in section and "×2" in section
    cell = r"<td[^>]*>([^<]*)</td>"
    rows = re.findall(r"<tr>" + cell * 5, section)
    assert [r[0] for r in rows] == ["L0", "L1", "L2"]
    assert float(rows[1][1]) == pytest.approx(15.0) and float(rows[1][3]) == pytest.approx(0.85)
    assert rows[1][4] == "308"

    with SummaryWriter(str(tmp_path / "plain")) as writer:
        writer.add_head_grids({"entropy": np.full((3, 2), 2.0)}, 0)
    _, plain = read_run(tmp_path / "plain")
    assert '<h3 id="outliers">' not in build_html([], plain)
