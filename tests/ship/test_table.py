"""``bertwatch.ship.table``: the printed table has one aligned row per variant, a reading per non-reference
variant, and says at which batch the metric was measured and which predictions sorted batches of 32 change (a
``ship.json`` that does not record its batching says how it was measured then); ``ship.json`` is strict JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertwatch.ship.table import SHIP_FILE, format_table, write_ship_json

pytestmark = pytest.mark.fast


ONE = {"batch_size": 1, "padded": False, "sorted": False}
SORTED = {"batch_size": 32, "padded": True, "sorted": True}


def _result() -> dict:
    """A ship.json of the current version: the batching recorded, each variant run again in sorted batches."""
    result = _unrecorded()
    result["batching"] = {"metric": ONE, "sorted_batches": SORTED, "latency": ONE, "attribution": None}
    changed = {"fp32": (0, 0.9), "int8": (3, 0.8922018348623854), "pruned": (0, 0.9)}
    for row in result["variants"]:
        row["sorted_batches"] = dict(zip(("changed", "value"), changed[row["name"]]))
    return result


def _unrecorded() -> dict:
    """A ship.json of the first version: no batching recorded (bertwatch ship measured in sorted batches of 32)."""
    row = dict(p=1.0, agreement=1.0, max_abs_logit_diff=0.0)
    return {
        "metric": "accuracy",
        "num_examples": 872,
        "confidence": 0.95,
        "n_resamples": 1000,
        "timing": {"repeats": 20, "warmup": 2, "batch_size": 32, "batch_tokens": 55},
        "runtime": {"onnxruntime": "1.2.3", "threads": "auto"},
        "export_check": {"fp32": {"max_abs_diff": 2e-7, "max_abs_logit": 4.0, "rows": 32}},
        "variants": [
            {**row, "name": "fp32", "file": "model.onnx", "size_mb": 90.0, "value": 0.9, "delta": 0.0,
             "ci_low": 0.0, "ci_high": 0.0, "latency_ms": 10.0, "throughput": 100.0},
            {**row, "name": "int8", "file": "model.int8.onnx", "size_mb": 22.5, "value": 0.89, "delta": -0.01,
             "ci_low": -0.02, "ci_high": 0.004, "agreement": 0.975, "latency_ms": 4.0, "throughput": 80.0},
            {**row, "name": "pruned", "file": "model.pruned.onnx", "size_mb": 0.5, "value": 0.9, "delta": 0.0,
             "ci_low": float("nan"), "ci_high": float("nan"), "latency_ms": 5.0, "throughput": 200.0},
        ],
    }  # fmt: skip


def test_the_table_reads_at_a_glance() -> None:
    lines = format_table(_result()).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("variant"))
    assert lines[0].startswith("872 examples, accuracy with its paired-bootstrap 95% interval against fp32")
    assert "ONNX logits within 2.0e-07 of torch's on 32 examples" in lines[2]
    rows = lines[header + 1 : header + 4]
    assert [r.split()[0] for r in rows] == ["fp32", "int8", "pruned"]
    assert "(reference)" in rows[0] and "-0.0100 [-0.0200, +0.0040]" in rows[1] and "97.5%" in rows[1]
    assert "0.500" in rows[2] and "[" not in rows[2].split("0.9000")[1]  # no interval where it is undefined
    end = lines[header].index("size MB") + len("size MB")  # right-aligned under its header
    assert all(r[end - 1].isdigit() and r[end] == " " for r in rows)
    assert "accuracy, batch 1" in lines[header]
    resolution = lines.index("", header + 1) + 1
    assert lines[resolution].startswith("resolution: 872 examples: one example is 0.0011")
    readings = resolution + 1
    assert lines[readings] == (
        "int8: 4.00x smaller; 2.50x faster at batch 1, 1.25x slower at batch 32; accuracy one request at a time "
        "-0.0100 (95% CI -0.0200 to +0.0040); 97.5% of predictions unchanged"
    )
    assert lines[readings + 1].startswith("pruned: 180.00x smaller; 2.00x faster at batch 1, 2.00x faster at batch 32")
    assert lines[readings + 3 :] == [
        "accuracy measured one request at a time (batch 1, each example at its own length, no padding); run again "
        "in length-sorted batches of 32, each padded to its longest example:",
        "  int8: 3 of 872 predictions differ; accuracy 0.8922 in these batches (0.8900 one request at a time)",
        "  fp32, pruned: the same predictions",
        "dynamic INT8 computes each activation's scale from the whole batch at run time, so an INT8 prediction "
        "depends on the examples batched with it; the table's accuracy is measured at the serving batch "
        "(--serve-batch)",
    ]


def test_a_ship_json_without_its_batching_says_how_it_was_measured() -> None:
    lines = format_table(_unrecorded()).splitlines()
    assert any(line.startswith("variant") and "accuracy, sorted batch 32" in line for line in lines)
    assert any(line.startswith("int8: ") and "accuracy in sorted batches of 32 -0.0100" in line for line in lines)
    assert lines[-1] == (
        "accuracy measured in length-sorted batches of 32, each padded to its longest example; this ship.json "
        "records no other batching"
    )


def test_ship_json_is_strict(tmp_path: Path) -> None:
    path = write_ship_json(tmp_path / "out", _result())
    assert path == tmp_path / "out" / SHIP_FILE
    loaded = json.loads(path.read_text())
    assert loaded["variants"][2]["ci_low"] is None
    assert format_table(loaded) == format_table(_result())
