"""The GLUE metrics against plain formulas written here (F1, Matthews, Pearson, Spearman with ties), the primary
metric of each task and the predictions from logits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertwatch.data.metrics import glue_metrics, metric_fn, predictions_from_logits, primary_metric


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
