"""The result of an ablation sweep: JSON (NaN as null) and CSV round trips, its task type and metrics named, and the
files of earlier versions read."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from bertwatch.report.html import write_outputs
from bertwatch.report.result import AblationResult
from tests.support.ablation_results import sample_result, token_result


def test_json_round_trip_keeps_every_cell_and_writes_nan_as_null(tmp_path: Path) -> None:
    result = sample_result()
    paths = write_outputs(result, tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["heads"][2][3] == {"value": None, "delta": None, "ci_low": None, "ci_high": None, "p": None}
    assert doc["keep_best"][1]["head"] == 2 and doc["keep_best"][1]["value"] == 0.95
    back = AblationResult.from_json(doc)
    np.testing.assert_array_equal(back.heads, result.heads)
    np.testing.assert_array_equal(back.layers, result.layers)
    np.testing.assert_array_equal(back.keep_only, result.keep_only)
    assert back.pruning[1]["value"] == 0.7 and back.pruning[1]["heads"] == [[0, 1], [2, 0]]
    np.testing.assert_allclose(result.pruning_curve(), [[0, 0.8], [1 / 12, 0.79], [2 / 12, 0.7]], rtol=1e-6)


def test_csv_has_one_row_per_unit(tmp_path: Path) -> None:
    paths = write_outputs(sample_result(), tmp_path)
    rows = list(csv.DictReader(paths["csv"].open()))
    units = [r["unit"] for r in rows]
    assert units.count("baseline") == 1 and units.count("head") == 12 and units.count("layer") == 3
    assert units.count("keep_only") == 12 and units.count("pruning") == 2
    head = next(r for r in rows if r["unit"] == "head" and r["layer"] == "1" and r["head"] == "2")
    assert float(head["delta"]) == pytest.approx(sample_result().heads[1, 2, 1])
    missing = next(r for r in rows if r["unit"] == "head" and r["layer"] == "2" and r["head"] == "3")
    assert missing["value"] == ""


def test_the_result_names_its_task_type_and_metrics_and_reads_older_files(tmp_path: Path) -> None:
    result = token_result()
    assert result.task_type == "token-classification"
    assert result.description == "token classification · entity F1 (seqeval), token accuracy"
    doc = json.loads(write_outputs(result, tmp_path)["json"].read_text())
    assert doc["version"] == 5 and doc["task_type"] == "token-classification"
    assert [(m["name"], m["label"]) for m in doc["metrics"]] == [
        ("entity_f1", "entity F1 (seqeval)"),
        ("token_accuracy", "token accuracy"),
    ]
    assert "seqeval" in doc["metrics"][0]["description"]
    doc["metrics"][0]["label"] = "the label the file was written with"
    assert AblationResult.from_json(doc).metrics[0]["label"] == "the label the file was written with"
    old = {k: v for k, v in doc.items() if k not in ("task_type", "metrics")} | {"version": 1}
    back = AblationResult.from_json(old)  # version 1: the task type from config, the names from core
    assert back.task_type == "token-classification" and back.description == result.description
    older = {**old, "config": {}}
    assert AblationResult.from_json(older).task_type is None and AblationResult.from_json(older).description == (
        "entity F1 (seqeval), token accuracy"
    )
    with pytest.raises(ValueError, match="newer"):
        AblationResult.from_json({**doc, "version": 6})


def test_metrics_of_compute_metrics_say_so() -> None:
    result = sample_result()
    result.config["metric_source"] = "compute_metrics"
    again = AblationResult(**{k: getattr(result, k) for k in AblationResult.__dataclass_fields__ if k != "metrics"})
    assert again.metrics == [
        {"name": "accuracy", "label": "accuracy", "description": "Computed by the Trainer's compute_metrics."}
    ]
