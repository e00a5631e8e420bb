"""The report's ``bertwatch ship`` section: the table of ``ship.json`` as ``bertwatch ship`` prints it, escaped, and
``bertwatch report`` finding it in a folder."""

from __future__ import annotations

import json

import pytest

from bertwatch.cli import main
from bertwatch.report.ship_section import ship_columns, ship_files, ship_readings, ship_section
from bertwatch.ship.table import format_table

pytestmark = pytest.mark.fast


def _result() -> dict:
    variant = {"file": "model.onnx", "size_mb": 90.0, "latency_ms": 8.0, "throughput": 100.0, "p": 1.0}
    return {
        "checkpoint": "out/<model>",
        "task": "sst2",
        "metric": "accuracy",
        "num_examples": 64,
        "confidence": 0.95,
        "n_resamples": 1000,
        "timing": {"repeats": 5, "warmup": 2, "batch_size": 32, "batch_tokens": 44},
        "runtime": {"onnxruntime": "1.32.0", "threads": 1},
        "removed_heads": None,
        "variants": [
            {**variant, "name": "fp32", "value": 0.5, "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "agreement": 1.0},
            {
                **variant,
                "name": "int8",
                "file": "model.int8.onnx",
                "size_mb": 22.5,
                "latency_ms": 2.0,
                "throughput": 250.0,
                "value": 0.5,
                "delta": -0.015625,
                "ci_low": -0.0625,
                "ci_high": 0.03125,
                "agreement": 0.96875,
            },
        ],  # fmt: skip
    }


def test_the_section_shows_the_printed_table_and_readings_escaped(tmp_path) -> None:
    path = tmp_path / "ship" / "ship.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_result()), encoding="utf-8")
    assert ship_files(tmp_path) == [path] and ship_files(path) == [path] and ship_files(tmp_path / "none") == []
    page = ship_section(path)
    assert "out/&lt;model&gt;" in page and "<model>" not in page
    columns = ship_columns(_result())
    for _, cells, _ in columns:
        assert all(f"<td>{cell}</td>" in page for cell in cells)
    (reading,) = ship_readings(_result())
    assert reading == (
        "int8: 4.00x smaller; 4.00x faster at batch 1, 2.50x faster at batch 32; accuracy -0.0156 "
        "(95% CI -0.0625 to +0.0312); 96.9% of predictions unchanged"
    )
    assert reading in format_table(_result()) and reading in page


def test_bertwatch_report_adds_the_ship_table_of_a_folder(tmp_path, capsys) -> None:
    (tmp_path / "ship.json").write_text(json.dumps(_result()), encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 0
    assert "1 ship table(s)" in capsys.readouterr().out
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Will it ship?" in page and "model.int8.onnx" in page
