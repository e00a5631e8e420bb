"""The run-health signals and the verdict in a training run: the callback's ``health`` history, the ``run_health``
and ``verdict`` series in the event file, and ``on_alert="stop"`` acting on a failing verdict (a checkpoint saved,
the run stopped, the reasons in a warning)."""

from __future__ import annotations

import glob
import math

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from bertwatch.callbacks import BertWatchCallback
from bertwatch.core.health_names import HEALTH_SERIES, LOSS_MEAN, PREDICTION_SHARE, grad_norm_name
from bertwatch.core.verdict import VERDICT_SERIES, VerdictSettings
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.tb.metadata import series_tag
from tests.support.tiny_trainer import toy_trainer

pytestmark = pytest.mark.fast


def _train(tmp_path, verdict: VerdictSettings | None = None, evaluate: bool = False, **options):
    callback = BertWatchCallback(every_n_steps=2, num_probe_examples=6, quiet=True, **options)
    if verdict is not None:
        callback.alerting.verdict_settings = verdict
    steps = {"eval_strategy": "steps", "eval_steps": 2} if evaluate else {}
    trainer = toy_trainer(tmp_path / "out", [], save_strategy="no", **steps)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    return callback, trainer


def _series(tmp_path, name: str) -> list:
    (run,) = glob.glob(str(tmp_path / "**" / "events.out.tfevents.*.bertwatch"), recursive=True)
    acc = EventAccumulator(run.rsplit("/", 1)[0], size_guidance={"tensors": 0})
    acc.Reload()
    return acc.Tensors(series_tag(name))


def test_health_is_kept_and_written_with_the_verdict_at_each_probe_step(tmp_path) -> None:
    callback, _ = _train(tmp_path, evaluate=True)  # a step and an evaluation at each probe step: judged once
    steps = [step for step, _ in callback.history]
    assert [step for step, _ in callback.health] == steps
    for _, health in callback.health:
        assert all(math.isfinite(health[grad_norm_name(l)]) and health[grad_norm_name(l)] > 0 for l in range(2))
        assert 0 < health[PREDICTION_SHARE] <= 1 and math.isfinite(health[LOSS_MEAN])
    assert [e.step for e in _series(tmp_path, HEALTH_SERIES)] == steps
    verdicts = _series(tmp_path, VERDICT_SERIES)
    assert [e.step for e in verdicts] == steps
    last = tensor_util.make_ndarray(verdicts[-1].tensor_proto)
    assert float(last[0]) == callback.alerting.verdict.level


def test_stop_acts_on_a_failing_verdict(tmp_path) -> None:
    easy = VerdictSettings(collapse_share=0.01, stuck_fraction=0.01, patience=1)  # every step after 0 "fails"
    with pytest.warns(BertWatchWarning, match="bertwatch verdict at step 2: failing: predictions have collapsed"):
        callback, trainer = _train(tmp_path, easy, on_alert="stop")
    assert trainer.state.global_step == 2 and callback.alerting.stop_requested_at == 2
    assert glob.glob(str(tmp_path / "out" / "checkpoint-2"))
