"""A run's results read back (``read_run``): the ablation tables, the first and last grid of each statistic, and
every step of a named-values series."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.ablation_results import sample_result, write_sample_run


def test_read_run_takes_ablation_tables_and_first_and_last_grids(tmp_path: Path) -> None:
    write_sample_run(tmp_path / "runs" / "a")
    results, training = read_run(tmp_path)
    assert [r.mode for r in results] == ["zero"]
    np.testing.assert_allclose(results[0].heads, sample_result().heads, rtol=1e-6)
    assert [p["pruned"] for p in results[0].pruning] == [1, 2]
    first, last = training["grids"]["entropy"]["first"], training["grids"]["entropy"]["last"]
    assert first[0] == 0 and last[0] == 10
    np.testing.assert_array_equal(first[1], np.full((3, 4), 1.0))
    np.testing.assert_array_equal(last[1], np.full((3, 4), 3.0))


def test_read_run_takes_every_step_of_named_value_series_into_the_report(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a"
    with SummaryWriter(run) as writer:
        for step, noun in ((0, 0.1), (5, 0.2), (10, 0.4)):
            values = {"noun": noun, "noun_uniform": 0.25, "verb": 1.0 - noun}
            writer.add_named_values("word_classes", values, step, "share on each class")
        writer.add_named_values("word_classes", {"noun": 0.5, "noun_uniform": 0.25, "verb": 0.5}, 10, "again")
    _, training = read_run(tmp_path)
    entry = training["series"]["word_classes"]
    assert entry["names"] == ["noun", "noun_uniform", "verb"] and entry["steps"] == [0, 5, 10]
    expected = [[0.1, 0.25, 0.9], [0.2, 0.25, 0.8], [0.5, 0.25, 0.5]]
    np.testing.assert_allclose(entry["values"], expected, rtol=1e-6)
    page = build_html([], training)
    assert "word_classes over training" in page and "step 10" in page and "0.500" in page
