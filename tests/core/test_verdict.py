"""The verdict's rules on hand-made health histories: a noisy healthy run is never failing, a collapsed run is."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertwatch.core.health_names import (
    LOSS_MEAN,
    LOSS_STD,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PREDICTION_STD,
    PRIOR_LOSS,
    grad_norm_name,
)
from bertwatch.core.verdict import VerdictSettings, judge_run, lower_gradient_ratio

pytestmark = pytest.mark.fast

LAYERS = 6


def _health(share: float, loss: float, norms: list[float], examples: int = 32) -> dict[str, float]:
    out = {grad_norm_name(l): n for l, n in enumerate(norms)}
    count = round(share * examples)
    out.update({PREDICTION_SHARE: count / examples, PREDICTION_COUNT: count, PREDICTED: examples})
    out.update({PREDICTION_STD: math.nan, LOSS_MEAN: loss, LOSS_STD: 0.1})
    return out


def _noisy_healthy(seed: int, steps: int = 15) -> list[tuple[int, dict[str, float]]]:
    """Predictions on one class at the start, then mixed; loss falling with noise; gradients up and down."""
    rng = np.random.default_rng(seed)
    history = []
    for k in range(steps):
        share = 1.0 if k < 2 else float(rng.uniform(0.5, 0.9))
        loss = 0.69 * (1 - 0.3 * k / steps) * float(rng.uniform(0.93, 1.07))
        norms = list(rng.lognormal(0.0, 0.8, LAYERS))
        history.append((20 * k, _health(share, loss, norms)))
    return history


def _collapsed(steps: int = 10, at: int = 3) -> list[tuple[int, dict[str, float]]]:
    """Learning at first, then every probe example on one class, the loss back at ln 2, the lower layers'
    gradients vanishing."""
    history = []
    for k in range(steps):
        if k < at:
            history.append((20 * k, _health(0.6, 0.69 - 0.01 * k, [1.0] * LAYERS)))
        else:
            fade = 10.0 ** -(k - at + 1)
            history.append((20 * k, _health(1.0, 0.693, [fade] * 3 + [0.5] * 3)))
    return history


@pytest.mark.parametrize("seed", range(20))
def test_a_noisy_healthy_run_is_never_failing(seed: int) -> None:
    history = _noisy_healthy(seed)
    for end in range(1, len(history) + 1):
        verdict = judge_run(history[:end])
        assert verdict.level < 2, verdict.describe()
    assert judge_run(history).level == 0


def test_a_collapsed_run_is_failing_and_says_why() -> None:
    history = _collapsed()
    verdict = judge_run(history)
    assert verdict.label == "failing"
    text = verdict.describe()
    assert "predictions have collapsed to one class on 32 of 32 probe examples since step 60" in text
    assert "the gradient norm of layers 0-1 fell below 1% of its step-0 value" in text
    assert judge_run(history[:4]).label == "at risk"  # one collapsed step: not yet failing


def test_collapse_with_a_stuck_loss_alone_is_failing() -> None:
    history = [(10 * k, _health(1.0, 0.70, [1.0] * LAYERS)) for k in range(5)]
    history[0] = (0, _health(0.5, 0.70, [1.0] * LAYERS))
    verdict = judge_run(history)
    assert verdict.level == 2 and any("probe loss has not fallen" in r for r in verdict.reasons)


def test_a_loss_that_only_fell_to_the_prior_is_stuck() -> None:
    """Imbalanced labels (70/30): a run that predicts the majority class lowers its loss from ln 2 to the labels'
    entropy (0.61) and no further; a run that learns goes below it."""
    prior = -(0.7 * math.log(0.7) + 0.3 * math.log(0.3))

    def point(share: float, loss: float) -> dict[str, float]:
        return {**_health(share, loss, [1.0] * LAYERS), PRIOR_LOSS: prior}

    collapsed = [(0, point(0.6, 0.69))] + [(10 * k, point(1.0, prior + 0.005)) for k in range(1, 5)]
    verdict = judge_run(collapsed)
    assert verdict.level == 2
    assert any("for the best constant prediction" in reason for reason in verdict.reasons)
    learning = [(0, point(0.6, 0.69))] + [(10 * k, point(0.7, prior * (1 - 0.05 * k))) for k in range(1, 5)]
    assert judge_run(learning).level == 0


def test_regression_collapse_reads_the_prediction_spread() -> None:
    def point(std: float, loss: float) -> dict[str, float]:
        return {PREDICTION_SHARE: math.nan, PREDICTION_STD: std, LOSS_MEAN: loss}

    history = [(0, point(1.0, 1.0))] + [(k, point(0.01, 1.0)) for k in range(1, 5)]
    assert judge_run(history).level == 2
    assert judge_run([(0, point(1.0, 1.0)), (1, point(0.5, 0.5))]).level == 0


def test_non_finite_loss_is_failing_and_alerts_put_a_run_at_risk() -> None:
    base = _health(0.5, 0.7, [1.0] * LAYERS)
    assert judge_run([(0, base), (5, {**base, LOSS_MEAN: math.nan})]).level == 2
    verdict = judge_run([(0, base), (5, base)], alerts=3)
    assert verdict.level == 1 and verdict.reasons == ("3 stability alerts in force",)


def test_signals_a_task_head_cannot_give_leave_their_rules_silent() -> None:
    blank = {grad_norm_name(l): math.nan for l in range(LAYERS)} | {PREDICTION_SHARE: math.nan, LOSS_MEAN: math.nan}
    assert judge_run([(0, blank), (5, blank), (10, blank), (15, blank)]).level == 0
    assert judge_run([]) is None


def test_lower_layers_are_the_first_third() -> None:
    reference = {grad_norm_name(l): 1.0 for l in range(LAYERS)}
    now = {grad_norm_name(l): v for l, v in enumerate([0.001, 0.002, 0.5, 1, 1, 1])}
    assert lower_gradient_ratio(now, reference, 1 / 3) == (0.002, (0, 1))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="patience"):
        VerdictSettings(patience=0)
    with pytest.raises(ValueError, match="collapse_share"):
        VerdictSettings(collapse_share=1.5)
    with pytest.raises(ValueError, match="vanish_fraction"):
        VerdictSettings(vanish_fraction=0.5, risk_fraction=0.1)
