"""Each reading of the verdict against a plain float64 implementation: Wilson's interval (the roots of its
quadratic), the normal quantile (scipy), the probe loss's standard error (numpy over per-example losses), the noise
of logged losses (a known white noise), and what each reading says at the edges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from bertwatch.core.evidence import Constant
from bertwatch.core.health_names import LOSS_EXAMPLES, LOSS_MEAN, LOSS_STD, PREDICTED, PRIOR_LOSS
from bertwatch.core.readings import (
    evaluation,
    interval_words,
    loss_noise,
    loss_trend,
    probe_loss,
    training_loss,
    wilson,
    z_value,
)

pytestmark = pytest.mark.fast


def test_z_is_the_normal_quantile() -> None:
    for confidence in (0.5, 0.9, 0.95, 0.99):
        assert z_value(confidence) == pytest.approx(norm.ppf(0.5 + confidence / 2), rel=1e-9)


@pytest.mark.parametrize("share,n", [(0.648, 500), (0.523, 500), (0.0, 40), (1.0, 40), (0.3, 7)])
def test_wilsons_interval_holds_the_proportions_its_score_test_keeps(share: float, n: int) -> None:
    """Wilson's interval is the set of p with |share − p| ≤ z √(p(1 − p)/n): the roots of a quadratic in p."""
    z = 1.959963984540054
    # (share − p)² = z² p (1 − p) / n  ⇔  (1 + z²/n) p² − (2 share + z²/n) p + share² = 0
    roots = np.sort(np.roots([1 + z * z / n, -(2 * share + z * z / n), share * share]).real)
    low, high = wilson(share, n, z)
    assert (low, high) == pytest.approx((max(0.0, roots[0]), min(1.0, roots[1])), abs=1e-12)


def test_the_probe_loss_interval_is_the_standard_error_of_its_examples() -> None:
    rng = np.random.default_rng(0)
    losses = rng.gamma(2.0, 0.35, 32)
    health = {LOSS_MEAN: losses.mean(), LOSS_STD: losses.std(), LOSS_EXAMPLES: 32.0, PRIOR_LOSS: 0.621}
    reading = probe_loss(health, 40)
    half = 1.959963984540054 * losses.std(ddof=1) / math.sqrt(32)
    assert (reading.low, reading.high) == pytest.approx((losses.mean() - half, losses.mean() + half), rel=1e-6)
    assert reading.step == 40 and reading.baseline == 0.621 and reading.learning is None
    # older records count the examples predicted; a head without a constant prediction's loss gives no reading
    assert probe_loss({**health, LOSS_EXAMPLES: math.nan, PREDICTED: 32.0}) is not None
    assert probe_loss({**health, PRIOR_LOSS: math.nan}) is None


def test_the_probe_loss_says_learning_only_when_its_whole_interval_is_past_the_line() -> None:
    def says(mean: float, std: float) -> bool | None:
        return probe_loss({LOSS_MEAN: mean, LOSS_STD: std, LOSS_EXAMPLES: 32.0, PRIOR_LOSS: 0.693}).learning

    assert says(0.40, 0.3) is True  # 0.40 ± 0.11: below 0.693
    assert says(0.60, 0.3) is None  # 0.60 ± 0.11: cannot tell
    assert says(0.69, 0.02) is False  # 0.69 ± 0.007: at 0.95 × 0.693 or above
    assert says(0.69, 0.3) is None  # the same mean with the spread of a model that predicts: cannot tell


def test_an_evaluation_reads_its_accuracy_against_the_majority() -> None:
    constant = Constant(share=0.523, loss=0.692, examples=500)
    up = evaluation(100, {"eval_accuracy": 0.648, "eval_loss": 0.7}, constant)
    assert up.learning is True and up.source == "eval accuracy" and up.low > 0.523
    at = evaluation(100, {"eval_acc": 0.523}, constant)
    assert at.learning is False and at.text.startswith("eval accuracy 0.523 over 500 examples, the majority's share")
    near = evaluation(100, {"eval_accuracy": 0.55}, constant)
    assert near.learning is None  # 0.55 [0.506, 0.593]: its interval reaches the majority's 0.523
    assert evaluation(100, {"eval_accuracy": 0.9}, None) is None  # no labels, nothing to compare with


def test_an_evaluation_without_accuracy_reads_its_loss_with_the_probe_spread() -> None:
    constant = Constant(share=0.5, loss=0.693, examples=872)
    probe = {LOSS_STD: 0.4}
    reading = evaluation(50, {"eval_loss": 0.45}, constant, probe)
    assert reading.source == "eval loss" and reading.learning is True
    assert reading.high - reading.value == pytest.approx(1.959963984540054 * 0.4 / math.sqrt(871), rel=1e-9)
    assert evaluation(50, {"eval_loss": 0.45}, constant, None) is None  # no spread, no interval: no reading


def test_the_noise_of_logged_losses_is_the_noise_about_their_trend() -> None:
    rng = np.random.default_rng(1)
    trend = np.linspace(0.69, 0.30, 4000)
    for sigma in (0.01, 0.05, 0.2):
        estimate = loss_noise(list(trend + sigma * rng.standard_normal(4000)))
        assert estimate == pytest.approx(sigma, rel=0.06)
    assert math.isnan(loss_noise([0.7, 0.6]))


def test_the_training_loss_reads_its_recent_logs_against_the_constant_prediction() -> None:
    losses = [(10 * k, v) for k, v in enumerate([0.70, 0.69, 0.71, 0.70, 0.69, 0.70, 0.70, 0.71], start=1)]
    reading = training_loss(losses, since=50, constant=0.693)
    assert reading.learning is False and reading.step == 80
    assert reading.value == pytest.approx(np.mean([0.70, 0.70, 0.71]))  # the logs after step 50
    noise = loss_noise([v for _, v in losses])
    assert reading.high - reading.value == pytest.approx(1.959963984540054 * noise / math.sqrt(3))
    assert "against 0.693 for the constant prediction (its start: 0.700)" in reading.text
    # without the constant prediction: against the first log, itself noisy
    alone = training_loss(losses, since=50, constant=None)
    assert alone.baseline == 0.70 and alone.high - alone.value == pytest.approx(
        1.959963984540054 * noise * 2 / math.sqrt(3)
    )
    falling = [(10 * k, 0.69 * 0.9**k) for k in range(1, 9)]
    assert training_loss(falling, since=50, constant=0.693).learning is True
    assert training_loss(losses[:2], since=0, constant=0.693) is None  # too few logs for their noise


def test_each_readings_evidence_is_its_distance_past_the_line_in_standard_errors() -> None:
    constant = Constant(share=0.523, loss=0.692, examples=500)
    up = evaluation(100, {"eval_accuracy": 0.648}, constant)
    assert up.evidence == pytest.approx((0.648 - 0.523) / math.sqrt(0.523 * 0.477 / 500), rel=1e-12)
    rng = np.random.default_rng(2)
    losses = rng.gamma(2.0, 0.3, 32)
    health = {LOSS_MEAN: losses.mean(), LOSS_STD: losses.std(), LOSS_EXAMPLES: 32.0, PRIOR_LOSS: 0.693}
    error = losses.std(ddof=1) / math.sqrt(32)
    assert probe_loss(health).evidence == pytest.approx((0.95 * 0.693 - losses.mean()) / error, rel=1e-9)
    logged = [(10 * k, 0.69 - 0.01 * k + 0.003 * (-1) ** k) for k in range(1, 11)]
    reading = training_loss(logged, 60, 0.693)
    window = [v for s, v in logged[1:] if s > 60]
    noise = loss_noise([v for _, v in logged])
    assert reading.evidence == pytest.approx((0.95 * 0.693 - np.mean(window)) / (noise / math.sqrt(4)), rel=1e-9)


def test_each_readings_margin_is_its_share_of_what_the_constant_leaves_to_learn() -> None:
    constant = Constant(share=0.523, loss=0.692, examples=500)
    assert evaluation(100, {"eval_accuracy": 0.648}, constant).margin == pytest.approx((0.648 - 0.523) / 0.477)
    assert evaluation(100, {"eval_accuracy": 0.4}, constant).margin < 0  # worse than the majority
    assert evaluation(9, {"eval_mcc": -0.1}, constant).margin == pytest.approx(-0.1)
    health = {LOSS_MEAN: 0.52, LOSS_STD: 0.3, LOSS_EXAMPLES: 32.0, PRIOR_LOSS: 0.65}
    assert probe_loss(health).margin == pytest.approx((0.65 - 0.52) / 0.65)
    logged = [(10 * k, 0.69 - 0.01 * k + 0.003 * (-1) ** k) for k in range(1, 11)]
    window = [v for s, v in logged[1:] if s > 60]
    assert training_loss(logged, 60, 0.693).margin == pytest.approx((0.693 - np.mean(window)) / 0.693, rel=1e-12)
    # the margin does not grow with the sample, the evidence does
    small, large = (Constant(share=0.523, loss=0.692, examples=n) for n in (50, 5000))
    a, b = (evaluation(1, {"eval_accuracy": 0.6}, c) for c in (small, large))
    assert a.margin == b.margin and b.evidence == pytest.approx(a.evidence * 10)


def test_an_evaluation_reads_matthews_correlation_against_zero() -> None:
    constant = Constant(share=0.7, loss=0.61, examples=400)
    up = evaluation(9, {"eval_matthews_correlation": 0.2, "eval_loss": 0.9}, constant)
    assert up.source == "eval Matthews" and up.learning is True  # 0.2 ± 1.96/20 = [0.102, 0.298]
    assert (up.low, up.high) == pytest.approx((0.2 - 1.959963984540054 / 20, 0.2 + 1.959963984540054 / 20))
    assert up.evidence == pytest.approx(0.2 * 20)
    assert evaluation(9, {"eval_mcc": 0.05}, constant).learning is None
    assert evaluation(9, {"eval_matthews_correlation": 0.0}, constant).learning is False  # any constant's


def test_an_evaluation_of_a_regression_reads_its_correlation_against_zero() -> None:
    constant = Constant(share=math.nan, loss=2.1, examples=100)  # the targets' variance: predicting their mean
    up = evaluation(9, {"eval_pearson": 0.5, "eval_spearmanr": 0.25, "eval_loss": 1.5}, constant)
    assert up.source == "eval Spearman" and up.learning is True and up.margin == 0.25  # Spearman before Pearson
    assert (up.low, up.high) == pytest.approx((0.25 - 1.959963984540054 / 10, 0.25 + 1.959963984540054 / 10))
    assert evaluation(9, {"eval_pearson": 0.1}, constant).learning is None
    assert evaluation(9, {"eval_pearsonr": -0.1}, constant).learning is False
    assert evaluation(9, {"eval_accuracy": 0.9}, constant) is None  # no majority share to compare an accuracy with
    loss = evaluation(9, {"eval_loss": 1.5}, constant, {"loss_std": 1.0})  # against the variance
    assert loss.source == "eval loss" and loss.baseline == 2.1 and loss.learning is True


def test_interval_words_give_the_confidence_used() -> None:
    assert interval_words(z_value(0.95)) == "95% interval"
    assert interval_words(z_value(0.9)) == "90% interval"
    assert interval_words(z_value(0.995)) == "99.5% interval"
    constant = Constant(share=0.523, loss=0.692, examples=500)
    assert "(90% interval" in evaluation(1, {"eval_accuracy": 0.6}, constant, z=z_value(0.9)).text


def test_the_loss_trend_is_a_least_squares_slope_with_its_standard_error() -> None:
    rng = np.random.default_rng(5)
    steps = np.arange(1, 41)
    values = 0.7 - 0.002 * steps + 0.01 * rng.standard_normal(40)
    logged = list(zip(steps.tolist(), values.tolist()))
    slope, error = loss_trend(logged, 20, 0.01)
    x = steps[steps > 20].astype(np.float64)
    assert slope == pytest.approx(np.polyfit(x, values[steps > 20], 1)[0], rel=1e-9)
    assert error == pytest.approx(0.01 / math.sqrt(((x - x.mean()) ** 2).sum()), rel=1e-12)
    assert all(math.isnan(v) for v in loss_trend(logged[:2], 0, 0.01))
