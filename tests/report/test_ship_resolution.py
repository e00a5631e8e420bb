"""``bertwatch ship``'s readings say what their examples resolve (report/ship_section.py's ``ship_resolution``),
in the printed table and in the report's section."""

from __future__ import annotations

import json

import pytest

from bertwatch.report.ship_section import ship_readings, ship_resolution, ship_section
from bertwatch.ship.table import format_table

pytestmark = pytest.mark.fast


def _result() -> dict:
    """A ship.json of 64 examples: fp32 and int8, int8's change -0.0156 [-0.0625, +0.0312]."""
    variant = {"file": "model.onnx", "size_mb": 90.0, "latency_ms": 8.0, "throughput": 100.0, "p": 1.0}
    fp32 = {**variant, "name": "fp32", "value": 0.5, "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "agreement": 1.0}
    int8 = {**variant, "name": "int8", "file": "model.int8.onnx", "size_mb": 22.5, "latency_ms": 2.0,
            "throughput": 250.0, "value": 0.5, "delta": -0.015625, "ci_low": -0.0625, "ci_high": 0.03125,
            "agreement": 0.96875}  # fmt: skip
    return {
        "checkpoint": "out/model", "task": "sst2", "metric": "accuracy", "num_examples": 64, "confidence": 0.95,
        "n_resamples": 1000, "timing": {"repeats": 5, "warmup": 2, "batch_size": 32, "batch_tokens": 44},
        "runtime": {"onnxruntime": "1.32.0", "threads": 1}, "removed_heads": None, "variants": [fp32, int8],
    }  # fmt: skip


def test_the_readings_say_one_examples_share_and_the_interval_width() -> None:
    result = _result()  # 64 examples, int8's interval [-0.0625, +0.03125]
    assert ship_resolution(result) == [
        "resolution: 64 examples: one example is 0.016; the 95% intervals are about ±0.047"
    ]
    lines = format_table(result).splitlines()
    at = lines.index(ship_resolution(result)[0])
    assert lines[at + 1] == ship_readings(result)[0]  # said before the readings it qualifies


def test_a_metric_without_a_fixed_share_says_so_and_no_interval_says_nothing(tmp_path) -> None:
    result = _result()
    result["metric"] = "matthews_correlation"
    assert "one example's share of Matthews correlation is not known" in ship_resolution(result)[0]  # an old file
    result["one_example"], result["one_example_how"] = 0.0213, "flip"  # what ship.json records now
    assert "one example moves Matthews correlation by up to 0.021;" in ship_resolution(result)[0]
    for row in result["variants"]:
        row["ci_low"] = row["ci_high"] = None
    assert ship_resolution(result) == []
    path = tmp_path / "ship.json"
    path.write_text(json.dumps(_result()), encoding="utf-8")
    assert "resolution: 64 examples: one example is 0.016" in ship_section(path)
