"""The run's judging (``callbacks.judging``): the alerts and the verdict judged once per probe step for all the
callbacks of a run, said once, and one set of judging settings a run."""

from __future__ import annotations

import warnings

import pytest

from bertwatch.callbacks import BertWatchCallback, EntropyCallback, SetupError, watch
from tests.support.tiny_trainer import toy_trainer


def _misbehaving(tmp_path, callbacks):
    """The fixed run of the event-file test (8 steps at a rate that makes alerts fire and the verdict change)."""
    trainer = toy_trainer(
        tmp_path, callbacks, max_steps=8, learning_rate=3e-2, eval_strategy="steps", eval_steps=4, logging_steps=1
    )
    watch(trainer)
    return trainer


def test_the_run_judges_once_for_all_its_callbacks_and_says_each_alert_once(tmp_path, capsys) -> None:
    both = {"every_n_steps": 2, "num_probe_examples": 6}
    full, entropy = BertWatchCallback(**both), EntropyCallback(**both, quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _misbehaving(tmp_path, [full, entropy]).train()
    assert full.watched is entropy.watched
    assert full.alerting is entropy.alerting and full.alerting.raised  # one judgement, which found alerts
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertwatch: ")]
    alert_lines = [line for line in lines if "since step" in line or "alert" in line.split(":", 2)[1]]
    assert alert_lines and len(alert_lines) == len(set(alert_lines)), alert_lines
    assert [step for step, _ in entropy.history] == [step for step, _ in full.history]
    assert set(entropy.history[-1][1]) == set(EntropyCallback.default_stats)  # each reads its own statistics


def test_callbacks_of_one_run_that_judge_differently_are_refused_before_the_first_step(tmp_path) -> None:
    both = {"every_n_steps": 2, "num_probe_examples": 6, "quiet": True}
    trainer = _misbehaving(tmp_path, [BertWatchCallback(**both), BertWatchCallback(**both, on_alert="stop")])
    with pytest.raises(SetupError, match="on_alert, alerts and verdict differ"):
        trainer.train()
    assert trainer.state.global_step == 0
