"""What the sweep measures for the resolution (bertwatch.ablation.scoring.one_example_change) against plain
brute force, the 1/√n scaling the "examples that would resolve δ" rest on, and the plan line said before a sweep
(bertwatch.ablation.estimate)."""

from __future__ import annotations

import numpy as np
import pytest

from bertwatch.ablation.bootstrap import paired_bootstrap
from bertwatch.ablation.configs import pruning_masks
from bertwatch.ablation.estimate import max_pruning_steps
from bertwatch.ablation.scoring import make_metric, one_example_change
from bertwatch.core.resolution import typical_half_width

pytestmark = pytest.mark.fast


def plain_f1(preds: np.ndarray, labels: np.ndarray) -> float:
    tp = float(np.sum((preds == 1) & (labels == 1)))
    fp = float(np.sum((preds == 1) & (labels != 1)))
    fn = float(np.sum((preds != 1) & (labels == 1)))
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def plain_matthews(preds: np.ndarray, labels: np.ndarray) -> float:
    """Gorodkin's multi-class MCC from the confusion matrix, in float64 loops."""
    classes = sorted(set(labels.tolist()) | set(preds.tolist()))
    c = np.array([[np.sum((labels == a) & (preds == b)) for b in classes] for a in classes], dtype=np.float64)
    s, correct = c.sum(), np.trace(c)
    t, p = c.sum(1), c.sum(0)
    den = np.sqrt(s * s - p @ p) * np.sqrt(s * s - t @ t)
    return float((correct * s - t @ p) / den) if den else 0.0


def plain_pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    return float((x @ y) / np.sqrt((x @ x) * (y @ y)))


def _logits(preds: np.ndarray, classes: int) -> np.ndarray:
    return np.eye(classes)[preds] * 3.0


def test_accuracy_one_example_is_one_over_n() -> None:
    labels = np.arange(128) % 2
    metric = make_metric(None, None, "accuracy", labels, False)
    assert one_example_change(metric, _logits(labels, 2)) == (1 / 128, "flip")


@pytest.mark.parametrize(
    ("name", "plain", "classes"), [("f1", plain_f1, 2), ("matthews_correlation", plain_matthews, 3)]
)
def test_f1_and_matthews_take_the_largest_change_of_one_flipped_prediction(name, plain, classes) -> None:
    rng = np.random.default_rng(1)
    labels = rng.integers(0, classes, 60)
    preds = np.where(rng.random(60) < 0.7, labels, rng.integers(0, classes, 60))
    metric = make_metric(None, None, name, labels, False)
    value, how = one_example_change(metric, _logits(preds, classes))
    base = plain(preds, labels)
    brute = max(  # every example, every other class: the plain float64 metric
        abs(plain(np.where(np.arange(60) == i, q, preds), labels) - base)
        for i in range(60)
        for q in range(classes)
        if q != preds[i]
    )
    assert how == "flip" and value == pytest.approx(brute, rel=1e-9, abs=1e-12)


def test_pearson_takes_the_largest_change_of_one_example_left_out() -> None:
    rng = np.random.default_rng(2)
    labels = rng.normal(size=300)
    preds = labels + rng.normal(scale=0.8, size=300)
    preds[7] = 9.0  # an outlier weighs most
    metric = make_metric(None, None, "pearson", labels, True)
    value, how = one_example_change(metric, preds[:, None])
    base = plain_pearson(preds, labels)
    brute = max(abs(plain_pearson(np.delete(preds, i), np.delete(labels, i)) - base) for i in range(300))
    assert how == "left out" and value == pytest.approx(brute, rel=1e-7)


def test_the_interval_width_shrinks_as_one_over_root_n() -> None:
    """The rule behind "about N examples would resolve δ": at the same share of changed predictions, four times
    the examples give intervals half as wide (the bootstrap's own, not the formula)."""
    widths = []
    for n in (200, 800, 3200):
        labels = np.arange(n) % 2
        base = labels.copy()
        changed = base.copy()
        flips = np.arange(0, n, 20)  # 5% of predictions change, all for the worse
        changed[flips] = 1 - changed[flips]
        boot = paired_bootstrap(base, changed[None], labels, "accuracy", 2000, 0, 0.95)
        widths.append(typical_half_width(boot.ci_low, boot.ci_high))
    assert widths[0] / widths[1] == pytest.approx(2.0, rel=0.12) and widths[1] / widths[2] == pytest.approx(
        2.0, rel=0.12
    )
    assert widths[1] == pytest.approx(1.96 * np.sqrt(0.05 / 800), rel=0.15)  # the notes' ±1.96·√(d/n)


@pytest.mark.parametrize("heads", [4, 72, 144, 384])
def test_max_pruning_steps_counts_the_masks_until_no_head_is_left(heads: int) -> None:
    importance = np.random.default_rng(0).random((1, heads))
    assert max_pruning_steps(heads, 0.1) == len(pruning_masks(importance, 0.1))


def test_the_sweep_says_what_it_will_run_and_how_long_once_at_its_start(capsys) -> None:
    import torch
    import transformers

    from bertwatch import ablate

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.BertForSequenceClassification(config).eval()
    examples = [{"input_ids": [2, 5 + i % 7, 9 + i % 5, 3], "label": i % 2} for i in range(40)]
    ablate(model, examples, mode="zero", n_resamples=20, prune_random=2, prune_iterative=True, keep_only=True,
           progress=True, batch_size=8)  # fmt: skip
    lines = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if "bertwatch ablate:" in line]
    assert len(lines) == 1
    assert lines[0].startswith(
        "bertwatch ablate: 11 configurations (baseline, 4 heads, 2 layers, 4 keep-one-head) on 40 examples: about "
    )
    assert "then the pruning orders (importance, iterative, 2 random orders) at about" in lines[0]
    assert "up to 4 steps" in lines[0] and "timed on " in lines[0]
    ablate(model, examples, mode="zero", n_resamples=20, prune=False, progress=False)
    assert "bertwatch ablate:" not in capsys.readouterr().err  # quiet: no plan either
