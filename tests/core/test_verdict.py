"""The verdict on hand-made evidence: a dead run measured three times fails at once; a run whose evaluations beat
the constant prediction is not at risk for its 32-example probe loss; noisy healthy runs stay healthy; every
rule at its edge and the words it gives."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from bertwatch.core.evidence import Constant, Evidence
from bertwatch.core.health_names import (
    LOSS_EXAMPLES,
    LOSS_MEAN,
    LOSS_STD,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PREDICTION_STD,
    PRIOR_LOSS,
    grad_norm_name,
)
from bertwatch.core.readings import lower_gradient_ratio
from bertwatch.core.verdict import ENDED_UNRESOLVED, NOTHING_AT_END, NOTHING_YET, VerdictSettings, judge

pytestmark = pytest.mark.fast

LAYERS = 6
LN2 = math.log(2)


def health(share: float, loss: float, norms: list[float], std: float = 0.1, prior: float = LN2, n: int = 32):
    """Run-health values of a 6-layer classifier on ``n`` probe examples."""
    out = {grad_norm_name(layer): value for layer, value in enumerate(norms)}
    count = round(share * n)
    out.update({PREDICTION_SHARE: count / n, PREDICTION_COUNT: count, PREDICTED: n, PREDICTION_STD: math.nan})
    out.update({LOSS_MEAN: loss, LOSS_STD: std, LOSS_EXAMPLES: n, PRIOR_LOSS: prior})
    return out


def linear_rates(steps: int, peak: float, warmup: float = 0.1) -> list[float]:
    """The Trainer's linear schedule with warm-up: the learning rate after each step 1..steps."""
    top = max(1, round(steps * warmup))
    return [peak * s / top if s < top else peak * (steps - s) / (steps - top) for s in range(1, steps + 1)]


def log_losses(e: Evidence, losses: list[float], rates: list[float], every: int = 10) -> None:
    """Log the mean loss of each ``every`` steps and the learning rate then, as the Trainer's ``on_log``."""
    for end in range(every, len(losses) + 1, every):
        e.note_log(end, {"loss": float(np.mean(losses[end - every : end])), "learning_rate": rates[end - 1]})


def dead_run() -> Evidence:
    """The issue's run: learning rate 5e-3, 40 steps, the default cadence (step 0, step 20, the end), every probe
    prediction in one class and the lower layers' gradient at 0.18% of step 0's, 21 alerts in force."""
    e = Evidence(max_steps=40, eval_constant=None)
    e.note_probe(0, health(0.72, 0.70, [1.0] * LAYERS, std=0.02))
    e.note_alerts(0, 0)
    e.note_probe(20, health(1.0, 0.72, [0.004, 0.003, 0.002, 0.5, 0.5, 0.5], std=0.3))
    e.note_alerts(20, 14)
    e.note_probe(40, health(1.0, 0.71, [0.0018, 0.0012, 0.001, 0.4, 0.4, 0.4], std=0.3))
    e.note_alerts(40, 21)
    return e


def test_a_dead_run_measured_three_times_is_failing_at_once() -> None:
    e = dead_run()
    verdict = judge(e)
    assert verdict.label == "failing" and verdict.step == 40
    assert verdict.reasons[0] == (
        "32 of 32 probe predictions in one class and the gradient norm of layers 0-1 at 0.18% of its step-0 value "
        "at step 40: a run in this state does not learn"
    )
    assert "21 stability alerts in force" in verdict.reasons
    assert judge(e.until(20)).label == "failing"  # already at the second probe pass, whatever the cadence
    assert judge(e.until(0)).reasons == (NOTHING_YET,)  # the reference alone says nothing: "healthy" says so


def learning_run(accuracy: float = 0.648) -> Evidence:
    """The issue's other run: it learned (dev accuracy 0.648 against the majority's 0.523 on 500 examples), but
    its 32-example probe loss (0.689) sits above the constant prediction's (0.621) with a wide spread."""
    e = Evidence(max_steps=100, eval_constant=Constant(0.523, 0.692, 500))
    e.note_probe(0, health(0.72, 0.70, [1.0] * LAYERS, std=0.02, prior=0.621))
    for step in (20, 40, 60, 80, 100):
        e.note_probe(step, health(0.66, 0.689, [3.0] * LAYERS, std=0.55, prior=0.621))
        e.note_evaluation(step, {"eval_loss": 0.64, "eval_accuracy": accuracy, "eval_runtime": 3.1})
    return e


def test_evaluations_that_beat_the_constant_outweigh_a_probe_loss_above_it() -> None:
    verdict = judge(learning_run())
    assert verdict.label == "healthy"
    assert verdict.reasons[0] == (
        "eval accuracy 0.648 over 500 examples, 0.125 above the majority's 0.523 (95% interval 0.605 to 0.689)"
    )
    # the probe loss alone cannot tell: 0.689 ± 0.19 on 32 examples
    e = learning_run()
    e.evaluations.clear()
    verdict = judge(e)  # at the end of training, with nothing but that probe loss: it cannot tell, and says why
    assert verdict.label == "cannot tell" and verdict.level == 0 and verdict.reasons == (NOTHING_AT_END,)
    assert verdict.describe().startswith("cannot tell: cannot tell without an evaluation")
    assert judge(e.until(40)).reasons == (NOTHING_YET,)


def test_an_evaluation_at_the_majority_puts_a_run_at_risk_and_fails_it_once_it_has_held() -> None:
    e = learning_run(accuracy=0.523)
    assert judge(e.until(20)).label == "at risk"  # one evaluation, 20% of training in
    assert judge(e.until(40)).label == "at risk"  # two, 20% of training apart: short of hold_share (30%)
    verdict = judge(e.until(60))  # three, 40% of training apart
    assert verdict.label == "failing"
    assert verdict.reasons[0].endswith("no better than predicting the majority class since step 20 (40% of training)")
    assert judge(e).label == "failing"
    # an evaluation within its interval of the majority's during training: at risk, and it says it cannot tell
    close = learning_run(accuracy=0.55)
    verdict = judge(close.until(80))
    assert verdict.label == "at risk"
    assert verdict.reasons[0].endswith(
        "(95% interval 0.506 to 0.593): cannot tell it from predicting the majority class"
    )


def test_an_evaluation_not_above_the_majority_at_the_end_fails_the_run() -> None:
    e = learning_run()
    e.evaluations[-1][1]["eval_accuracy"] = 0.51
    verdict = judge(e)
    assert verdict.label == "failing"
    assert "0.013 below the majority's 0.523" in verdict.reasons[0]
    assert verdict.reasons[0].endswith("the run ends no better than predicting the majority class")
    # at the end, an accuracy above the majority's that its interval cannot tell from it shows neither outcome:
    # the verdict cannot tell, first says why, then gives the evaluation (not "failing", not "at risk")
    verdict = judge(learning_run(accuracy=0.55))
    assert (verdict.label, verdict.level, verdict.known) == ("cannot tell", 0, False)
    assert verdict.reasons[0] == ENDED_UNRESOLVED
    assert verdict.reasons[1].startswith("eval accuracy 0.550 over 500 examples, 0.027 above the majority's 0.523")
    assert verdict.reasons[1].endswith("cannot tell it from predicting the majority class")
    # before the end, the same evaluation puts the run at risk
    assert judge(learning_run(accuracy=0.55).until(80)).label == "at risk"


def test_at_the_end_of_training_a_standing_risk_is_not_a_forecast_but_cannot_tell() -> None:
    e = learning_run()
    e.evaluations.clear()
    e.note_alerts(80, 5)
    e.note_alerts(100, 5)
    verdict = judge(e)  # five stability alerts in force at the end, nothing showing learning or failure
    assert (verdict.label, verdict.reasons) == ("cannot tell", (ENDED_UNRESOLVED, "5 stability alerts in force"))
    assert judge(e.until(80)).label == "at risk"  # before the end, the same alerts are a forecast


def stalled_run(seed: int, steps: int = 150, noise: float = 0.04, level: float = LN2) -> Evidence:
    """A run whose training loss stays at ln 2 (balanced binary labels) with batch noise while the learning rate
    warms up and decays; probed at step 0 and the end only (the default cadence of a run that never evaluates)."""
    rng = np.random.default_rng(seed)
    e = Evidence(max_steps=steps, train_constant=Constant(0.5, LN2, steps * 16))
    losses = list(level + noise * rng.standard_normal(steps))
    log_losses(e, losses, linear_rates(steps, 1e-3))
    return e


def test_a_training_loss_at_the_constant_is_at_risk_until_the_end_of_training_then_fails() -> None:
    e = stalled_run(0)
    verdict = judge(e)
    assert verdict.label == "failing"
    assert verdict.reasons[0].startswith("training loss 0.69")
    assert verdict.reasons[0].endswith("at the end of training: the run ends without learning its training set")
    assert judge(e.until(20)).label == "cannot tell"  # warming up: the rate still rises at the log of step 20
    mid = [judge(e.until(step)).label for step in range(30, 150, 10)]
    assert set(mid) <= {"at risk", "cannot tell"}  # a run that learns the label frequencies first sits there too
    assert mid[-1] == "at risk"


def test_a_training_loss_above_the_constant_fails_once_it_has_held_five_logs_after_the_warm_up() -> None:
    e = stalled_run(0, level=1.3 * LN2)  # worse than ignoring the input
    assert judge(e.until(20)).label == "cannot tell"  # warming up
    assert judge(e.until(40)).label == "at risk"  # 2 logs after the warm-up (step 20): not enough to fail
    assert judge(e.until(60)).label == "at risk"  # 40 steps after the warm-up: short of hold_share (45 steps)
    verdict = judge(e.until(70))  # the last 45 steps (30% of training), 5 logs, all after the warm-up; not falling
    assert verdict.label == "failing"
    assert verdict.reasons[0].endswith(
        "not below 95% of it, at or above it over the last 30% of training after the warm-up (5 logs), and not falling"
    )


def test_two_logs_at_the_constant_under_a_decaying_rate_are_not_failing() -> None:
    """MRPC, 80 steps, the linear schedule, a log every 10 steps: a loss at the constant prediction's 0.633 at
    steps 20-30 is at risk, not failing; the schedule's decay is no evidence; the same run learns by the end."""
    e = Evidence(max_steps=80, train_constant=Constant(0.68, 0.627, 1280))
    rates = linear_rates(80, 5e-5)
    for step, loss in zip(range(10, 90, 10), (0.66, 0.634, 0.632, 0.60, 0.58, 0.56, 0.55, 0.54)):
        e.note_log(step, {"loss": loss, "learning_rate": rates[step - 1]})
    assert judge(e.until(30)).label == "at risk"
    assert all(judge(e.until(step)).level < 2 for step in range(10, 90, 10))
    assert judge(e).label == "healthy"


def test_a_constant_schedule_is_past_its_warm_up_at_its_second_log() -> None:
    e = Evidence(max_steps=200, train_constant=Constant(0.5, LN2, 3200))
    rng = np.random.default_rng(4)
    for step in range(10, 130, 10):
        e.note_log(step, {"loss": 0.8 + 0.01 * float(rng.standard_normal()), "learning_rate": 1e-3})
    verdict = judge(e)  # 12 logs above ln 2 over 60% of training, the rate never changing
    assert verdict.label == "failing" and "after the warm-up" in verdict.reasons[0]
    assert judge(e.until(10)).label == "cannot tell"  # one rate logged: the warm-up cannot be told over yet


def test_a_falling_loss_above_the_line_is_not_failing() -> None:
    e = Evidence(max_steps=100, train_constant=Constant(0.5, LN2, 1600))
    rates = linear_rates(100, 1e-4)
    for step in range(2, 81, 2):  # 0.75 falling to 0.69, just above the constant's: it is learning slowly
        e.note_log(step, {"loss": 0.75 - 0.06 * step / 80, "learning_rate": rates[step - 1]})
    e.losses = [(s, v + 0.002 * (-1) ** (s // 2)) for s, v in e.losses]
    verdict = judge(e)
    assert verdict.label == "at risk" and verdict.reasons[0].endswith("not below 95% of it, falling")


def test_the_noise_of_the_logged_losses_is_accounted_for() -> None:
    """A loss that fell 4% with noise ten times larger cannot be told from its start: not "not below it"."""
    rng = np.random.default_rng(3)
    steps = 150
    e = Evidence(max_steps=steps, train_constant=Constant(0.5, LN2, 2400))
    trend = np.linspace(LN2, 0.96 * LN2, steps)
    losses = list(trend + 1.2 * rng.standard_normal(steps))  # ± 0.38 a logged mean of 10 steps
    log_losses(e, losses, linear_rates(steps, 1e-4))
    verdict = judge(e)
    assert verdict.label == "cannot tell" and verdict.reasons == (NOTHING_AT_END,)


def noisy_healthy(seed: int, steps: int = 200, every: int = 20, evaluate: bool = True) -> Evidence:
    """A run that learns: the probe loss falls around a curve with the spread of 32 examples (sometimes above the
    constant's early on), the training loss falls with batch noise, the predictions one class at first, the
    gradients up and down; evaluated (or not) at each probe pass."""
    rng = np.random.default_rng(seed)
    e = Evidence(max_steps=steps, train_constant=Constant(0.56, 0.686, steps * 16))
    if evaluate:
        e.eval_constant = Constant(0.52, 0.692, 500)
    curve = lambda s: LN2 * (1 - 0.45 * s / steps)  # noqa: E731
    batch_losses = [max(0.01, curve(s) + 0.25 * rng.standard_normal()) for s in range(1, steps + 1)]
    rates = linear_rates(steps, 1e-4)
    for step in range(0, steps + 1, every):
        share = 1.0 if step < 2 * every else float(rng.uniform(0.5, 0.85))
        std = 0.03 if step == 0 else 0.2 + 0.5 * step / steps
        loss = curve(step) + std / math.sqrt(31) * float(rng.standard_normal())
        norms = list(rng.lognormal(1.0 if step else 0.0, 0.8, LAYERS))
        e.note_probe(step, health(share, loss, norms, std=std, prior=0.686))
        e.note_alerts(step, int(rng.integers(0, 3)) if step > steps // 2 else 0)
        if evaluate and step:
            accuracy = min(0.9, 0.52 + 0.3 * step / steps + 0.02 * float(rng.standard_normal()))
            e.note_evaluation(step, {"eval_accuracy": accuracy, "eval_loss": curve(step)})
        log_losses(e, batch_losses[:step], rates[:step])
        e.losses = sorted(dict(e.losses).items())
        e.rates = sorted(dict(e.rates).items())
    return e


@pytest.mark.parametrize("evaluate", [True, False])
@pytest.mark.parametrize("seed", range(15))
def test_noisy_healthy_runs_are_never_failing_and_end_healthy(seed: int, evaluate: bool) -> None:
    e = noisy_healthy(seed, evaluate=evaluate)
    for step in sorted({s for s, _ in e.probes} | {s for s, _ in e.losses}):
        verdict = judge(e.until(step))
        assert verdict.level < 2, (step, verdict.describe())
    end = judge(e)
    assert end.label == "healthy", end.describe()
    assert end.reasons and end.reasons[0].startswith("eval accuracy" if evaluate else "training loss")


def test_a_collapse_with_the_probe_loss_at_the_constant_fails_once_it_has_held() -> None:
    e = Evidence(max_steps=100)
    e.note_probe(0, health(0.6, 0.70, [1.0] * LAYERS, std=0.02))
    for step in (10, 20, 30, 40):
        e.note_probe(step, health(1.0, 0.694, [0.8] * LAYERS, std=0.01))
    assert judge(e.until(10)).label == "at risk"  # a collapse now, the loss at the constant's
    assert judge(e.until(30)).label == "at risk"  # held 20 steps: 20% of training, short of hold_share (30%)
    verdict = judge(e)
    assert verdict.label == "failing"
    assert verdict.reasons[0] == (
        "32 of 32 probe predictions in one class and the probe loss not learning since step 10 (30% of training)"
    )


def test_a_run_that_ends_predicting_one_class_fails() -> None:
    """At the end of training a collapse is the final model predicting a constant: failing, unless an evaluation
    shows it above the majority class."""
    e = Evidence(max_steps=80, eval_constant=Constant(0.684, 0.624, 408))
    e.note_probe(0, health(0.69, 0.694, [1.0] * LAYERS, std=0.02, prior=0.62))
    e.note_probe(80, health(1.0, 0.717, [1.5] * LAYERS, std=0.4, prior=0.62))  # the loss cannot tell
    verdict = judge(e)
    assert verdict.label == "failing"
    assert verdict.reasons[0] == (
        "32 of 32 probe predictions in one class at the end of training: the run ends predicting a constant"
    )
    assert judge(e.until(0)).label == "cannot tell"
    mid = Evidence(max_steps=160, probes=e.probes)  # the same collapse half-way: at risk
    assert judge(mid).label == "at risk"
    e.note_evaluation(80, {"eval_accuracy": 0.75})  # 0.75 [0.71, 0.79] over 408 pairs: above the majority's 0.684
    assert judge(e).label == "healthy" and judge(e).reasons[-1].endswith("(outweighed)")


def test_non_finite_values_fail_at_once() -> None:
    base = health(0.5, 0.7, [1.0] * LAYERS)
    e = Evidence(max_steps=1000)
    e.note_probe(0, base)
    e.note_probe(5, {**base, LOSS_MEAN: math.nan})
    assert judge(e).label == "failing" and "probe loss is not finite at step 5" in judge(e).reasons[0]
    e = Evidence(max_steps=1000)
    e.note_log(10, {"loss": 0.69, "learning_rate": 1e-5})
    e.note_log(20, {"loss": math.inf, "learning_rate": 2e-5})
    assert judge(e).reasons == ("the training loss is not finite (inf) at step 20",)


def test_alerts_put_a_run_at_risk_unless_it_clearly_learns() -> None:
    e = Evidence(max_steps=100)
    e.note_probe(0, health(0.5, 0.7, [1.0] * LAYERS))
    e.note_probe(10, health(0.6, 0.69, [1.0] * LAYERS, std=0.3))
    e.note_alerts(10, 3)
    verdict = judge(e)
    assert verdict.label == "at risk" and verdict.reasons == ("3 stability alerts in force",)
    e.note_probe(20, health(0.6, 0.35, [1.0] * LAYERS, std=0.3))  # the probe loss clearly below ln 2
    e.note_alerts(20, 3)
    verdict = judge(e)
    assert verdict.label == "healthy"
    assert verdict.reasons[-1] == "3 stability alerts in force (outweighed)"


def test_a_clear_evaluation_overrules_a_stalled_training_loss() -> None:
    e = stalled_run(1)
    e.eval_constant = Constant(0.5, LN2, 872)
    e.note_evaluation(150, {"eval_accuracy": 0.8})
    verdict = judge(e)
    assert verdict.label == "healthy"
    assert verdict.reasons[0].startswith("eval accuracy 0.800 over 872 examples")
    assert verdict.reasons[1].endswith("(outweighed)")


def test_regression_collapse_reads_the_prediction_spread() -> None:
    def point(std: float, loss: float) -> dict[str, float]:
        return {PREDICTION_SHARE: math.nan, PREDICTION_STD: std, LOSS_MEAN: loss}

    e = Evidence(max_steps=10)
    e.note_probe(0, point(1.0, 1.0))
    e.note_probe(5, point(0.01, 1.0))
    verdict = judge(e)
    assert verdict.label == "at risk"
    assert verdict.reasons[0].startswith("the probe predictions nearly constant (std 0.01 against 1 at step 0)")


def test_signals_a_task_head_cannot_give_leave_their_rules_silent() -> None:
    blank = {grad_norm_name(l): math.nan for l in range(LAYERS)} | {PREDICTION_SHARE: math.nan, LOSS_MEAN: math.nan}
    e = Evidence(max_steps=20)
    for step in (0, 5, 10, 15):
        e.note_probe(step, blank)
    assert judge(e).level == 0 and judge(e).label == "cannot tell"
    assert judge(Evidence()) is None


def test_lower_layers_are_the_first_third() -> None:
    reference = {grad_norm_name(l): 1.0 for l in range(LAYERS)}
    now = {grad_norm_name(l): v for l, v in enumerate([0.001, 0.002, 0.5, 1, 1, 1])}
    assert lower_gradient_ratio(now, reference, 1 / 3) == (0.002, (0, 1))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="alerts_at_risk"):
        VerdictSettings(alerts_at_risk=0)
    with pytest.raises(ValueError, match="collapse_share"):
        VerdictSettings(collapse_share=1.5)
    with pytest.raises(ValueError, match="confidence"):
        VerdictSettings(confidence=1.0)
    with pytest.raises(ValueError, match="vanish_fraction"):
        VerdictSettings(vanish_fraction=0.5, risk_fraction=0.1)
    with pytest.raises(TypeError, match="layer_gradients"):
        VerdictSettings(layer_gradients="yes")


def test_failing_ranks_first_then_the_margin_of_learning_orders_the_rest() -> None:
    from bertwatch.core.verdict import Verdict

    ranks = [
        Verdict(1, 0, margin=0.5).rank,
        Verdict(1, 1, margin=0.4).rank,  # "at risk" does not order: most runs are, early in training
        Verdict(1, 0, margin=0.0).rank,
        Verdict(1, 1, evidence=-3.0).rank,  # no margin: a half, whatever the level below failing or the evidence
        Verdict(1, 0, margin=-0.3).rank,
        Verdict(1, 2, margin=0.9).rank,
        Verdict(1, 2, margin=-0.9).rank,
    ]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks) - 1  # margin 0 and none both sit at 0.5
    assert all(0 <= r - base < 1 for r, base in zip(ranks, (0, 0, 0, 0, 0, 2, 2)))
    assert Verdict(1, 0, margin=0.3).rank == Verdict(1, 1, margin=0.3).rank
    assert Verdict(1, 2, margin=0.9).rank > Verdict(1, 0, margin=-5.0).rank  # failing outranks any margin
    # the run whose loss sits nearer the constant's ranks as likelier to fail, however many standard errors a
    # noise estimate puts either at
    assert Verdict(1, 1, evidence=9.0, margin=0.02).rank > Verdict(1, 1, evidence=1.0, margin=0.3).rank


def test_the_verdicts_margin_is_the_training_losss_where_logged_else_the_strongest_readings() -> None:
    e = learning_run()  # evaluations and a probe loss, no training loss logged
    verdict = judge(e)
    n, m, accuracy = 500, 0.523, 0.648
    assert verdict.evidence == pytest.approx((accuracy - m) / math.sqrt(m * (1 - m) / n), rel=1e-9)
    assert verdict.margin == pytest.approx((accuracy - m) / (1 - m), rel=1e-9)
    losses = {82: 0.70, 86: 0.62, 90: 0.60, 94: 0.55, 98: 0.52}
    for step, loss in losses.items():
        e.note_log(step, {"loss": loss})
    window = [0.62, 0.60, 0.55, 0.52]  # the logs of the last 20 steps after the first log
    mean, entropy = sum(window) / len(window), 0.692  # no training labels: the eval set's label entropy
    assert judge(e).margin == pytest.approx((entropy - mean) / entropy, rel=1e-9)
    assert judge(e).label == "healthy"  # the evaluation still decides the level
    e.losses.clear()
    e.evaluations.clear()  # the probe loss alone: its own evidence, even where it cannot tell
    assert judge(e).evidence == pytest.approx((0.95 * 0.621 - 0.689) / (0.55 / math.sqrt(31)), rel=1e-9)
    assert judge(e).margin == pytest.approx((0.621 - 0.689) / 0.621, rel=1e-9)


def test_a_training_loss_still_warming_up_gives_its_margin_but_no_finding() -> None:
    e = Evidence(max_steps=100, train_constant=Constant(0.5, math.log(2), 1000))
    for step, loss in ((1, 0.70), (2, 0.71), (3, 0.69), (4, 0.70)):
        e.note_log(step, {"loss": loss, "learning_rate": step * 1e-6})  # the rate still rising
    verdict = judge(e)
    assert verdict.label == "cannot tell"  # a loss at its start says nothing while the rate still rises
    mean = (0.71 + 0.69 + 0.70) / 3
    assert verdict.margin == pytest.approx((math.log(2) - mean) / math.log(2), rel=1e-9)


def test_a_regression_run_is_judged_against_predicting_the_targets_mean() -> None:
    """STS-B-like targets of variance 1.9 on the training set and 2.1 on the eval set: a run whose training loss
    (squared error) falls well below the variance and whose Spearman correlation is above 0 beyond chance is
    healthy; one whose loss stays at the variance and whose correlation is 0 at the end fails."""
    rates = linear_rates(100, 5e-5)

    def run(losses, spearman):
        e = Evidence(max_steps=100, train_constant=Constant(math.nan, 1.9, 1600))
        e.eval_constant = Constant(math.nan, 2.1, 200)
        for step, loss in zip(range(10, 110, 10), losses):
            e.note_log(step, {"loss": loss, "learning_rate": rates[step - 1]})
        e.note_evaluation(100, {"eval_spearmanr": spearman, "eval_pearson": spearman})
        return judge(e)

    curve = np.linspace(2.4, 0.7, 10) + 0.02 * np.cos(np.arange(10))
    learned = run(curve, 0.55)
    assert learned.label == "healthy"
    assert learned.reasons[0].startswith("eval Spearman correlation 0.550 over 200 examples against 0")
    assert "against 1.900 for the constant prediction" in learned.describe()  # the training targets' variance
    assert (1.9 - curve[-1]) / 1.9 > learned.margin > (1.9 - curve[4]) / 1.9  # the share of it learned of late
    failed = run(1.9 + 0.03 * np.cos(np.arange(10)), 0.0)
    assert failed.label == "failing"
    assert "the run ends no better than the constant prediction" in failed.describe()


def test_an_eval_loss_that_cannot_tell_says_so_once() -> None:
    e = Evidence(max_steps=100, eval_constant=Constant(0.5, LN2, 200))
    e.note_probe(0, health(0.5, 0.69, [1.0] * LAYERS, std=0.3))
    e.note_probe(20, health(0.5, 0.66, [1.0] * LAYERS, std=0.3))  # the spread of the probe losses at the evaluation
    e.note_evaluation(20, {"eval_loss": 0.66})
    verdict = judge(e)
    assert verdict.label == "at risk"
    assert verdict.reasons[0].endswith("for the constant prediction: cannot tell")
    assert verdict.describe().count("cannot tell") == 1


def test_a_regression_loss_still_above_the_variance_mid_run_is_at_risk_not_failing() -> None:
    """A fresh regression head predicts about 0 for targets of mean 2.7: its squared error starts near 10, far above
    the targets' variance (2.6), and can sit above it for a fifth of the run while the run learns (as an STS-B
    fine-tune at 1e-4 does). Mid-run that is at risk; at the end, with nothing else, it fails."""
    rng = np.random.default_rng(2)
    e = Evidence(max_steps=40, train_constant=Constant(math.nan, 2.6, 640))
    for step in range(1, 41):
        e.note_log(step, {"loss": 3.0 + 7.2 * math.exp(-step / 4) + rng.normal(0, 0.8), "learning_rate": 1e-4})
    assert all(judge(e.until(step)).level < 2 for step in range(1, 40))
    assert judge(e.until(16)).label == "at risk"
    assert "a regression head starts far above its targets' variance" in judge(e.until(16)).reasons[0]
    assert judge(e).label == "failing"  # its training loss never got below 95% of the variance
    classes = replace(e, train_constant=Constant(0.5, 2.6, 640))  # the same losses against a class constant
    assert judge(classes.until(12)).label == "at risk"  # 10 steps after the warm-up: short of 30% of 40 steps
    assert judge(classes.until(18)).label == "failing"


def test_a_training_loss_clearly_below_the_constant_at_the_end_learned_a_little_and_cannot_tell() -> None:
    """A training loss that ends short of 95% of ln 2 fails the run unless its interval lies wholly below 99% of it:
    such a loss (0.666 ± 0.006, as a QNLI run that went on to 0.665 against 0.51) learned a little."""
    stalled = judge(stalled_run(0, noise=0.01, level=0.691))
    assert stalled.label == "failing"  # 0.691 ± 0.002: its interval reaches 0.693
    little = judge(stalled_run(0, noise=0.01, level=0.666))
    assert (little.label, little.reasons[0]) == ("cannot tell", ENDED_UNRESOLVED)
    assert little.reasons[1].startswith("training loss 0.66")
    assert little.reasons[1].endswith("not below 95% of it, yet clearly below 99% of it: the run learned a little")
    assert judge(stalled_run(0, noise=0.01, level=0.688)).label == "failing"  # 0.688 ± 0.002: within 1% of ln 2
    assert judge(stalled_run(0, noise=0.01, level=0.666).until(140)).label == "at risk"  # mid-run: unchanged


def test_a_regression_margin_below_zero_ranks_just_above_the_middle_and_orders_regressions() -> None:
    from bertwatch.core.verdict import Verdict

    ranks = [
        Verdict(1, 0, margin=0.01).rank,  # a classifier just past its constant
        Verdict(1, 1).rank,  # no margin: the middle
        Verdict(1, 1, margin=-1.0, regression=True).rank,
        Verdict(1, 1, margin=-3.0, regression=True).rank,  # its fresh head still far above the variance
        Verdict(1, 1, margin=-0.01).rank,  # a classifier just above its constant's loss
        Verdict(1, 2, margin=-1.0, regression=True).rank,  # failing outranks any margin
    ]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert Verdict(1, 1, margin=-3.0, regression=True).rank - 0.5 < 1e-3
    assert Verdict(1, 0, margin=0.2, regression=True).rank == Verdict(1, 0, margin=0.2).rank  # below the variance


def test_the_verdict_says_whether_it_judged_a_regression() -> None:
    regression = Evidence(max_steps=100, train_constant=Constant(math.nan, 2.6, 640))
    classes = Evidence(max_steps=100, train_constant=Constant(0.5, LN2, 640))
    for e in (regression, classes):
        for step in range(1, 31):
            e.note_log(step, {"loss": 9.0 - 0.1 * step, "learning_rate": 1e-4})
    assert judge(regression).regression and not judge(classes).regression
    assert judge(regression).rank < judge(classes).rank  # 6 against 2.6 says little of a regression
