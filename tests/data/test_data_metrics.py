"""GLUE loading against the documented row counts and quirks; metrics against plain formulas."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bertwatch.data.glue import glue_task, load_glue, read_texts
from bertwatch.data.metrics import glue_metrics, metric_fn, predictions_from_logits, primary_metric

DEV_ROWS = {"cola": 1043, "sst2": 872, "mrpc": 408, "rte": 277, "stsb": 1500, "qnli": 5463}


@pytest.mark.parametrize("task,rows", DEV_ROWS.items())
def test_dev_files_have_the_documented_rows(glue_dir: Path, task: str, rows: int) -> None:
    examples = load_glue(task, "dev", glue_dir)
    assert len(examples) == rows
    spec = glue_task(task)
    assert all((e["text_pair"] is not None) == spec.pair for e in examples)
    labels = {e["label"] for e in examples}
    if spec.is_regression:
        assert min(labels) >= 0 and max(labels) <= 5
    else:
        assert labels == {0, 1}


def test_quoting_is_off_and_bom_dropped(glue_dir: Path) -> None:
    mrpc = load_glue("MRPC", "dev", glue_dir)
    assert mrpc[0]["text_pair"].startswith('" The foodservice')
    assert mrpc[0]["label"] == 1
    train = load_glue("rte", "train", glue_dir)
    assert len(train) == 2490
    assert sum('"' in e["text"] for e in train) > 50


def test_limit_keeps_file_order(glue_dir: Path) -> None:
    first = load_glue("sst-2", "dev", glue_dir, limit=3)
    assert [e["text"] for e in first] == [e["text"] for e in load_glue("sst2", "dev", glue_dir)[:3]]
    assert first[0]["text"] == "it 's a charming and often affecting journey ."


def test_bad_task_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_task("squad")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_glue("sst2", "dev", tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="SST-2"):
        load_glue("sst2", "dev", tmp_path)


def test_read_texts(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("a b\n\nfirst\tsecond\n", encoding="utf-8")
    assert read_texts(f) == [("a b", None), ("first", "second")]
    (tmp_path / "e.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no examples"):
        read_texts(tmp_path / "e.txt")


def _plain_f1(p: list[int], y: list[int]) -> float:
    tp = sum(1 for a, b in zip(p, y) if a == 1 and b == 1)
    fp = sum(1 for a, b in zip(p, y) if a == 1 and b == 0)
    fn = sum(1 for a, b in zip(p, y) if a == 0 and b == 1)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def _plain_mcc(p: list[int], y: list[int]) -> float:
    tp = sum(1 for a, b in zip(p, y) if a == 1 and b == 1)
    tn = sum(1 for a, b in zip(p, y) if a == 0 and b == 0)
    fp = sum(1 for a, b in zip(p, y) if a == 1 and b == 0)
    fn = sum(1 for a, b in zip(p, y) if a == 0 and b == 1)
    denom = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denom == 0 else (tp * tn - fp * fn) / denom


def _plain_pearson(p: list[float], y: list[float]) -> float:
    mp, my = sum(p) / len(p), sum(y) / len(y)
    cov = sum((a - mp) * (b - my) for a, b in zip(p, y))
    return cov / math.sqrt(sum((a - mp) ** 2 for a in p) * sum((b - my) ** 2 for b in y))


def _ranks(x: list[float]) -> list[float]:
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def test_metrics_match_plain_formulas() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    p = np.where(rng.random(200) < 0.8, y, 1 - y)
    assert glue_metrics("sst2", p, y) == {"accuracy": pytest.approx(sum(p == y) / 200)}
    mrpc = glue_metrics("mrpc", p, y)
    assert mrpc["f1"] == pytest.approx(_plain_f1(p.tolist(), y.tolist()))
    assert glue_metrics("cola", p, y)["matthews_correlation"] == pytest.approx(_plain_mcc(p.tolist(), y.tolist()))
    scores, gold = rng.random(100) * 5, np.round(rng.random(100) * 5, 1)
    sts = glue_metrics("stsb", scores, gold)
    assert sts["pearson"] == pytest.approx(_plain_pearson(scores.tolist(), gold.tolist()))
    assert sts["spearmanr"] == pytest.approx(_plain_pearson(_ranks(scores.tolist()), _ranks(gold.tolist())))
    assert primary_metric("MRPC") == "f1" and primary_metric("sts-b") == "pearson"
    assert metric_fn("cola")(p, y) == pytest.approx(_plain_mcc(p.tolist(), y.tolist()))
    logits = rng.normal(size=(5, 2))
    assert predictions_from_logits("rte", logits).tolist() == logits.argmax(1).tolist()
    assert predictions_from_logits("stsb", logits[:, :1]).tolist() == logits[:, 0].tolist()
