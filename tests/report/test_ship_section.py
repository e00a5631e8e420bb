"""The report's ``bertwatch ship`` section: the table of ``ship.json`` as ``bertwatch ship`` prints it, escaped, and
``bertwatch report`` finding it in a folder."""

from __future__ import annotations

import json

import pytest

from bertwatch.cli import main
from bertwatch.report.ship_section import outlier_lines, ship_columns, ship_files, ship_readings, ship_section
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


def test_the_outlier_lines_rank_the_layers_by_their_largest_feed_forward_output() -> None:
    layer = {"kurtosis": 3.0, "outlier_share": 0.0, "top_dims": [1, 2, 3], "delimiter_share": None}
    result = {**_result(), "outliers": {"examples": 64, "ffn": [{**layer, "inf_norm": 2.0},
              {**layer, "inf_norm": 90.0, "delimiter_share": 0.875, "outlier_share": 0.001}, {**layer, "inf_norm": 5.0}],
              "residual": []}}  # fmt: skip
    lines = outlier_lines(result, count=2)
    assert lines[0] == "activation outliers of the fp32 model (64 examples), the largest feed-forward outputs:"
    assert lines[1].startswith("  layer 1: max |x| 90.0") and "88% of the outlier mass on [CLS]/[SEP]" in lines[1]
    assert lines[2].startswith("  layer 2: max |x| 5.0") and lines[2].endswith("no component reaches 6")
    assert outlier_lines(_result()) == [] and lines[1] in format_table(result)
