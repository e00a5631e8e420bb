"""The evidence record: what ``on_log`` and ``on_evaluate`` put in it, cut to a step, saved and read back, and the
constant prediction of a set of labels against a plain count."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bertwatch.core.evidence import Constant, Evidence

pytestmark = pytest.mark.fast


def test_the_constant_prediction_of_labels_is_the_majority_share_and_the_label_entropy() -> None:
    labels = [1] * 68 + [0] * 32 + [-100] * 5  # -100: examples the loss ignores
    c = Constant.of_labels(np.asarray(labels))  # numpy integers too
    assert c.share == 0.68 and c.examples == 100
    assert c.loss == pytest.approx(-(0.68 * math.log(0.68) + 0.32 * math.log(0.32)), rel=1e-12)
    assert Constant.of_labels([[0, 1], [1, 0]]) is None  # multi-label rows
    assert Constant.of_labels([]) is None


@pytest.mark.parametrize("seed", range(5))
def test_the_constant_prediction_of_regression_targets_is_their_mean(seed: int) -> None:
    rng = np.random.default_rng(seed)
    targets = rng.uniform(0, 5, int(rng.integers(2, 60))).astype(np.float32)
    c = Constant.of_labels(list(targets))  # numpy float32 scalars, as a datasets column gives them
    mean = sum(float(t) for t in targets) / len(targets)  # the plain squared error of predicting the mean
    assert math.isnan(c.share) and c.examples == len(targets)
    assert c.loss == pytest.approx(sum((float(t) - mean) ** 2 for t in targets) / len(targets), rel=1e-9)
    assert Constant.of_labels([3, 2.5, 4]).examples == 3  # one float makes the set regression targets
    assert Constant.of_labels([1.0, float("nan")]) is None  # a target that is not a number


def test_logs_and_evaluations_go_where_they_belong() -> None:
    e = Evidence(max_steps=50)
    e.note_log(10, {"loss": 0.69, "learning_rate": 5e-5, "grad_norm": 1.2, "epoch": 0.1})
    e.note_log(20, {"eval_loss": 0.6, "eval_accuracy": 0.7, "eval_runtime": 1.0, "eval_samples_per_second": 9.0})
    e.note_evaluation(20, {"eval_f1": 0.66, "epoch": 0.2})  # on_evaluate's metrics of the same evaluation
    e.note_log(50, {"train_loss": 0.5, "train_runtime": 30.0})  # the Trainer's summary at the end: not a log
    assert e.losses == [(10, 0.69)] and e.rates == [(10, 5e-5)]
    assert e.evaluations == [(20, {"eval_loss": 0.6, "eval_accuracy": 0.7, "eval_f1": 0.66})]
    assert e.step == 20


def test_until_keeps_what_was_known_at_a_step_and_the_record_round_trips() -> None:
    e = Evidence(max_steps=100, eval_constant=Constant(0.5, math.log(2), 872))
    e.note_probe(0, {"loss_mean": 0.7})
    e.note_alerts(0, 0)
    for step in (10, 20, 30):
        e.note_log(step, {"loss": 0.7 - step / 1000, "learning_rate": 1e-4})
    e.note_probe(20, {"loss_mean": 0.6, "prior_loss": math.nan})
    e.note_alerts(20, 3)
    e.note_evaluation(20, {"eval_accuracy": 0.8})
    cut = e.until(20)
    assert [s for s, _ in cut.losses] == [10, 20] and cut.alerts == [(0, 0), (20, 3)] and cut.step == 20
    assert e.until(19).evaluations == [] and len(e.until(19).probes) == 1
    back = Evidence.from_dict(json.loads(json.dumps(e.as_dict())))
    assert back.losses == e.losses and back.evaluations == e.evaluations and back.eval_constant == e.eval_constant
    assert math.isnan(back.probes[1][1]["prior_loss"]) and back.max_steps == 100


def test_the_constant_loss_and_whether_a_run_is_a_regression_come_from_its_labels_else_its_probe() -> None:
    e = Evidence(eval_constant=Constant(0.6, 0.67, 200))
    assert e.constant_loss == 0.67 and not e.regression
    e.train_constant = Constant(math.nan, 2.3, 1000)  # the training set's first: its targets' variance
    assert e.constant_loss == 2.3 and e.regression
    probe = Evidence()
    assert probe.constant_loss is None and not probe.regression
    probe.note_probe(0, {"prior_loss": 1.9, "prediction_share": math.nan, "prediction_std": 0.01})
    assert probe.constant_loss == 1.9 and probe.regression
    probe.note_probe(10, {"prior_loss": 0.69, "prediction_share": 0.5, "prediction_std": math.nan})
    assert probe.constant_loss == 0.69 and not probe.regression
