"""``bertwatch report PATH``: the ablation and the training grids of a run in one page, the linguistic analyses
beside them, and a message that says what is missing."""

from __future__ import annotations

import json
from pathlib import Path

from bertwatch.cli.report import cli_report
from bertwatch.report.html import write_outputs
from tests.support.ablation_results import sample_result, write_sample_run


def test_cli_report_combines_ablation_json_and_training_grids(tmp_path: Path, capsys) -> None:
    write_sample_run(tmp_path / "runs" / "a", with_ablation=False)
    write_outputs(sample_result(), tmp_path / "bertwatch_ablation")
    assert cli_report([str(tmp_path), "--out", str(tmp_path / "full.html")]) == 0
    page = (tmp_path / "full.html").read_text()
    assert "<h1>bertwatch report: training run and ablation</h1>" in page
    assert 'id="stat-entropy"' in page and 'id="stat-cls_mass"' in page
    assert "Mode <code>uniform</code>" in page
    # ablation (2: layer bars and the pruning curve, again in the verdict; Δ per head is HTML) + one figure per grid
    # (2) + the trajectories of the two families' cards (Spread, Special tokens)
    assert page.count("data:image/png;base64,") == 2 + 1 + 2 + 2
    assert "2 head statistics and" in capsys.readouterr().out


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
