"""Ablation outputs: JSON/CSV round trips, a self-contained escaped HTML report, and ``bertwatch report`` on logs."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from bertwatch.cli.report import cli_report
from bertwatch.report.events import read_run
from bertwatch.report.html import build_html, write_outputs
from bertwatch.report.result import AblationResult
from bertwatch.tb.summary import SummaryWriter

HOSTILE = '<img src=x onerror="alert(1)">'


def _result(task: str | None = "sst2", metric: str = "accuracy", mode: str = "uniform") -> AblationResult:
    rng = np.random.default_rng(0)
    layers, heads = 3, 4
    cells = np.zeros((layers, heads, 5))
    cells[..., 1] = rng.normal(0, 0.02, (layers, heads))
    cells[..., 0] = 0.8 + cells[..., 1]
    cells[..., 2] = cells[..., 1] - 0.01
    cells[..., 3] = cells[..., 1] + 0.01
    cells[..., 4] = rng.uniform(0, 1, (layers, heads))
    cells[0, 0, 4] = 1e-4
    cells[2, 3] = [np.nan, np.nan, np.nan, np.nan, np.nan]
    layer_cells = cells[:, 0].copy()
    keep = cells.copy()
    keep[1, 2, 0] = 0.95
    pruning = [
        {
            "pruned": 1,
            "fraction": 1 / 12,
            "value": 0.79,
            "delta": -0.01,
            "ci_low": -0.02,
            "ci_high": 0.0,
            "p": 0.04,
            "heads": [[0, 1]],
        },
        {
            "pruned": 2,
            "fraction": 2 / 12,
            "value": 0.7,
            "delta": -0.1,
            "ci_low": -0.12,
            "ci_high": -0.08,
            "p": 0.001,
            "heads": [[0, 1], [2, 0]],
        },
    ]
    return AblationResult(
        task=task,
        mode=mode,
        metric=metric,
        num_examples=50,
        baseline=0.8,
        heads=cells,
        layers=layer_cells,
        keep_only=keep,
        pruning=pruning,
        importance=rng.random((layers, heads)),
        baseline_metrics={metric: 0.8},
        config={"model": HOSTILE, "n_resamples": 1000},
    )


def test_json_round_trip_keeps_every_cell_and_writes_nan_as_null(tmp_path: Path) -> None:
    result = _result()
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
    paths = write_outputs(_result(), tmp_path)
    rows = list(csv.DictReader(paths["csv"].open()))
    units = [r["unit"] for r in rows]
    assert units.count("baseline") == 1 and units.count("head") == 12 and units.count("layer") == 3
    assert units.count("keep_only") == 12 and units.count("pruning") == 2
    head = next(r for r in rows if r["unit"] == "head" and r["layer"] == "1" and r["head"] == "2")
    assert float(head["delta"]) == pytest.approx(_result().heads[1, 2, 1])
    missing = next(r for r in rows if r["unit"] == "head" and r["layer"] == "2" and r["head"] == "3")
    assert missing["value"] == ""


def test_html_is_self_contained_and_escapes_user_strings() -> None:
    page = build_html([_result(task=HOSTILE, metric="acc<b>")])
    assert "<script" not in page.lower()
    assert HOSTILE not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "acc<b>" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert page.count("data:image/png;base64,") == 3  # layer bars, pruning curve (also in the verdict)
    assert page.count('<table class="hm"') == 1  # Δ per head: HTML cells in the plugin's colours
    assert "hurts most" in page and "helps most" in page and "Keep only the best head" in page


def _write_run(run: Path, with_ablation: bool = True) -> None:
    with SummaryWriter(str(run)) as writer:
        writer.add_head_grids({"entropy": np.full((3, 4), 1.0), "cls_mass": np.zeros((3, 4))}, step=0)
        writer.add_head_grids({"entropy": np.full((3, 4), 2.0)}, step=5)
        writer.add_head_grids({"entropy": np.full((3, 4), 3.0), "cls_mass": np.ones((3, 4))}, step=10)
        if with_ablation:
            r = _result(mode="zero")
            writer.add_ablation("zero", "accuracy", 0.8, 50, r.heads, r.layers, r.pruning_curve(), step=10)


def test_read_run_takes_ablation_tables_and_first_and_last_grids(tmp_path: Path) -> None:
    _write_run(tmp_path / "runs" / "a")
    results, training = read_run(tmp_path)
    assert [r.mode for r in results] == ["zero"]
    np.testing.assert_allclose(results[0].heads, _result().heads, rtol=1e-6)
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


def test_cli_report_combines_ablation_json_and_training_grids(tmp_path: Path, capsys) -> None:
    _write_run(tmp_path / "runs" / "a", with_ablation=False)
    write_outputs(_result(), tmp_path / "bertwatch_ablation")
    assert cli_report([str(tmp_path), "--out", str(tmp_path / "full.html")]) == 0
    page = (tmp_path / "full.html").read_text()
    assert "<h1>bertwatch report: training run and ablation</h1>" in page
    assert 'id="stat-entropy"' in page and 'id="stat-cls_mass"' in page
    assert "Mode <code>uniform</code>" in page
    # ablation (2: layer bars and the pruning curve, again in the verdict; Δ per head is HTML) + one figure per grid
    # (2) + the trajectories of the two families' cards (Spread, Special tokens)
    assert page.count("data:image/png;base64,") == 2 + 1 + 2 + 2
    assert "2 training grids" in capsys.readouterr().out


def test_cli_report_says_what_is_missing(tmp_path: Path, capsys) -> None:
    assert cli_report([str(tmp_path)]) == 2
    assert "no ablation.json" in capsys.readouterr().out
    assert cli_report([str(tmp_path / "nope")]) == 2


def test_cli_report_adds_the_linguistic_analyses(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "linguistics"
    folder.mkdir()
    relation = {
        "count": 7,
        "best_layer": 2,
        "best_head": 5,
        "best_accuracy": 0.8125,
        "direction": "dep->head",
        "baseline_accuracy": 0.5,
        "baseline_offset": 1,
    }
    (folder / "syntax.json").write_text(json.dumps({"relations": {"det<b>": relation}}), encoding="utf-8")
    assert cli_report([str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Linguistic analyses" in page and "det&lt;b&gt;" in page and "L2 H5" in page
    assert cli_report([str(tmp_path), "--linguistics", str(tmp_path / "missing")]) == 2
    assert "no syntax.json" in capsys.readouterr().out


def _token_result() -> AblationResult:
    result = _result(task="ner", metric="entity_f1")
    result.baseline_metrics = {"entity_f1": 0.8, "token_accuracy": 0.9}
    result.config["task_type"] = "token-classification"
    return AblationResult(**{k: getattr(result, k) for k in AblationResult.__dataclass_fields__ if k != "metrics"})


def test_the_result_names_its_task_type_and_metrics_and_reads_older_files(tmp_path: Path) -> None:
    result = _token_result()
    assert result.task_type == "token-classification"
    assert result.description == "token classification · entity F1 (seqeval), token accuracy"
    doc = json.loads(write_outputs(result, tmp_path)["json"].read_text())
    assert doc["version"] == 4 and doc["task_type"] == "token-classification"
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
        AblationResult.from_json({**doc, "version": 5})


def test_metrics_of_compute_metrics_say_so() -> None:
    result = _result()
    result.config["metric_source"] = "compute_metrics"
    again = AblationResult(**{k: getattr(result, k) for k in AblationResult.__dataclass_fields__ if k != "metrics"})
    assert again.metrics == [
        {"name": "accuracy", "label": "accuracy", "description": "Computed by the Trainer's compute_metrics."}
    ]


def test_report_and_tensorboard_tables_name_the_task_and_metrics(tmp_path: Path) -> None:
    result = _token_result()
    page = build_html([result])
    assert "Task: <b>token classification · entity F1 (seqeval), token accuracy</b>" in page
    assert '<td class="l">token accuracy</td><td class="l">token_accuracy</td>' in page
    assert '<td class="">0.9000</td>' in page and "conlleval" in page
    assert "<h2>Mode <code>uniform</code>: entity F1 (seqeval) on 50 examples of ner</h2>" in page
    with SummaryWriter(str(tmp_path / "run")) as writer:
        writer.add_ablation(
            "zero",
            "entity_f1",
            0.8,
            50,
            result.heads,
            result.layers,
            task_type=result.task_type,
            metrics=result.metrics,
            baseline_metrics=result.baseline_metrics,
        )
    (back,), _ = read_run(tmp_path / "run")
    assert back.task_type == "token-classification" and back.metrics == result.metrics
    assert back.baseline_metrics == pytest.approx(result.baseline_metrics)
    assert cli_report([str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 0
    assert (
        "Task: <b>token classification · entity F1 (seqeval), token accuracy</b>" in (tmp_path / "r.html").read_text()
    )
