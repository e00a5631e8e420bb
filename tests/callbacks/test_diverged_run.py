"""A run that diverges: once the weights are NaN, bertwatch goes on measuring to the end (no statistic's linear
algebra stops the callback) and the run's verdict ends "failing" on the non-finite values."""

from __future__ import annotations

import warnings

import torch
import transformers as T

import bertwatch
from bertwatch.callbacks import BertWatchCallback
from tests.support.tiny_trainer import toy_trainer


class _Poison(T.TrainerCallback):
    """Every weight NaN after ``step`` (what a diverged fine-tune's optimiser step leaves)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float("nan"))


def test_a_run_whose_weights_turn_nan_is_measured_to_the_end_and_judged_failing(tmp_path):
    trainer = toy_trainer(tmp_path, [_Poison(3)], max_steps=8)
    bertwatch.watch(trainer, every_n_steps=2, num_maps=0, quiet=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, BertWatchCallback))
    stopped = [str(w.message) for w in caught if "stopped after an error" in str(w.message)]
    assert not stopped, stopped
    assert [step for step, _ in callback.history] == [0, 2, 4, 6, 8]
    assert callback.alerting.verdict is not None and callback.alerting.verdict.label == "failing"
    assert any("not finite" in reason for reason in callback.alerting.verdict.reasons)
