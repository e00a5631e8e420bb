"""The report tells one story: its first screen leads with what the ablation measured (and, first of all, whether the
model beats always giving one answer), and the card of the heads the loss depends on (gradient importance) never
claims "disabling these should cost most" when the ablation on the same page says otherwise: where the two disagree
it names the heads and says why."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bertwatch.ablation.bootstrap import metric_on_counts, resample_counts
from bertwatch.core.baseline import compare_with_constant
from bertwatch.report.html import build_html
from bertwatch.report.result import AblationResult

L, H = 3, 4


def _training(importance: np.ndarray) -> dict:
    """A training part with one grid, ``head_importance``, at steps 0 and 20."""
    grid = importance.astype(np.float32)
    return {
        "grids": {"head_importance": {"first": (0, grid * 0.5), "last": (20, grid), "steps": None}},
        "source": "run",
    }


def _ablation(improving: tuple[int, int] | None, trivial=None) -> AblationResult:
    """Every head costs 0.03 [−0.05, −0.01]; ``improving`` gains 0.042 [+0.01, +0.07] when disabled."""
    cells = np.zeros((L, H, 5))
    cells[..., 1], cells[..., 2], cells[..., 3], cells[..., 4] = -0.03, -0.05, -0.01, 0.01
    if improving is not None:
        cells[improving][1:5] = [0.042, 0.01, 0.07, 0.01]
    cells[..., 0] = 0.8 + cells[..., 1]
    return AblationResult("mrpc", "uniform", "f1", 408, 0.8, cells, cells[:, 0].copy(), trivial=trivial)


def _importance() -> np.ndarray:
    grid = np.full((L, H), 0.01)
    grid[2, 1], grid[1, 3], grid[0, 2] = 0.9, 0.8, 0.7  # the top three: L2 H1, L1 H3, L0 H2
    return grid


def _card(page: str) -> str:
    match = re.search(r"<h3>The heads the loss depends on</h3>(.*?)</div>", page, re.S)
    assert match, "no card of the heads the loss depends on"
    return match.group(1)


def test_the_gradient_card_names_the_heads_the_ablation_contradicts_and_says_why() -> None:
    page = build_html([_ablation(improving=(2, 1))], _training(_importance()))
    card = _card(page)
    assert "should cost most" not in card
    assert "<b>Gradient importance and ablation disagree on L2 H1</b>: disabling L2 H1 improves F1. They" in card
    assert "the gradient is the loss&#x27;s local slope at the full model" in card or (
        "the gradient is the loss's local slope at the full model" in card
    )
    assert (
        "the metric&#x27;s change when the head is gone" in card or "the metric's change when the head is gone" in card
    )
    assert "<b>L2 H1</b> +0.0420 [+0.0100, +0.0700] (improves)" in card
    assert "<b>L1 H3</b> -0.0300 [-0.0500, -0.0100] (costs)" in card


def test_the_gradient_card_agrees_quietly_and_says_what_it_predicts_without_an_ablation() -> None:
    card = _card(build_html([_ablation(improving=None)], _training(_importance())))
    assert "disagree" not in card and "should cost most" not in card and "(costs)" in card
    alone = _card(build_html([], _training(_importance())))
    assert "By this first-order estimate disabling these should cost most" in alone
    assert "an ablation (bertwatch ablate) measures it" in alone


def test_the_first_screen_leads_with_the_ablation_and_a_useless_model_is_said_first() -> None:
    rng = np.random.default_rng(0)
    labels = (rng.random(408) < 0.684).astype(int)
    f1 = lambda p, y, w: metric_on_counts("f1", p, y, w)  # noqa: E731
    trivial = compare_with_constant(
        np.ones(408, int), labels, f1, resample_counts(408, 200, 0), metric="f1", label="F1",
        classes=("not paraphrase", "paraphrase"),
    ).about("its ablation figures")  # fmt: skip
    page = build_html([_ablation(improving=(2, 1), trivial=trivial)], _training(_importance()))
    summary = page[page.index('<section id="summary">') :]
    verdict, glance, card = (summary.index(s) for s in ("Ablation verdict", 'class="glance"', "loss depends on</h3>"))
    assert verdict < glance < card  # the ablation's measured effect before the glance table and the other cards
    first = re.search(r'<b class="no-better">(.*?)</b>', summary).group(1)
    assert first.startswith("this model is no better than always answering &#x27;paraphrase&#x27; (F1 ")
    assert first.endswith("its ablation figures describe a model not worth shipping")
    assert summary.index("no better than always answering") < summary.index("Ablation verdict") + 400
    gain = "disabling <b>L2 H1</b> alone changes f1 by +0.0420 [+0.0100, +0.0700]: an improvement, which says the "
    assert gain + "model was not at its best (undertrained, or fit to an imbalanced set)" in summary
    assert "always &#x27;paraphrase&#x27; " in summary and "<b>no better</b>" in summary  # the glance row


@pytest.mark.parametrize("improving", [None, (2, 1)])
def test_a_result_without_a_trivial_baseline_still_reads(improving) -> None:
    page = build_html([_ablation(improving=improving)], None)
    assert "no better than" not in page and "Ablation verdict" in page
