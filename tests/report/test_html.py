"""The HTML report: self-contained (no scripts, no external assets), every user string escaped, and the task and
its metrics named in the report and the TensorBoard tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertwatch.cli.report import cli_report
from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.ablation_results import HOSTILE, sample_result, token_result


def test_html_is_self_contained_and_escapes_user_strings() -> None:
    page = build_html([sample_result(task=HOSTILE, metric="acc<b>")])
    assert "<script" not in page.lower()
    assert HOSTILE not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "acc<b>" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert page.count("data:image/png;base64,") == 3  # layer bars, pruning curve (also in the verdict)
    assert page.count('<table class="hm"') == 1  # Δ per head: HTML cells in the plugin's colours
    assert "hurts most" in page and "helps most" in page and "Keep only the best head" in page


def test_report_and_tensorboard_tables_name_the_task_and_metrics(tmp_path: Path) -> None:
    result = token_result()
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
