"""The loss tap against plain arithmetic: the training forwards' losses only (not a forward in eval mode or
without gradients), each step the mean of its forwards, windows of ``every`` steps, the learning rate read from
the scheduler; in a real run it gives the verdict every step's loss when the Trainer logs every 500 steps, equal to
what a Trainer logging every step logs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from bertwatch.callbacks import BertWatchCallback
from bertwatch.callbacks.judging import LossTap, every_for, learning_rate
from tests.support.tiny_trainer import toy_trainer


class _Squares(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return {"loss": ((self.w * x) ** 2).mean(), "logits": x}


@pytest.mark.fast
def test_only_training_forwards_count_and_a_step_is_the_mean_of_its_forwards() -> None:
    model = _Squares()
    tap = LossTap(model, every=2)
    batches = [[1.0, 2.0], [3.0], [0.5, 0.5], [2.0]]  # two forwards a step (gradient accumulation)
    plain = []
    for step in (1, 2):
        losses = []
        for values in batches[2 * (step - 1) : 2 * step]:
            model(torch.tensor(values))
            losses.append(float(np.mean(np.square(values, dtype=np.float64))))
        plain.append(sum(losses) / len(losses))
        model.eval()
        model(torch.tensor([100.0]))  # an evaluation: not a training loss
        model.train()
        with torch.no_grad():
            model(torch.tensor([100.0]))  # a forward without gradients: not one either
        full = tap.end_step(step, 1e-3 * step)
        assert full == (step == 2)
    ((step, loss, rate),) = tap.read()
    assert step == 2 and rate == 2e-3
    assert loss == pytest.approx(sum(plain) / 2, rel=1e-6)
    assert tap.read() == []  # each window is read once
    tap.close()
    assert not model._forward_hooks


@pytest.mark.fast
def test_an_output_without_a_scalar_loss_leaves_the_tap_silent() -> None:
    class NoLoss(torch.nn.Module):
        def forward(self, x):
            return {"logits": x}

    model = NoLoss()
    tap = LossTap(model)
    model(torch.ones(2))
    assert not tap.end_step(1, None) and not tap.seen
    tap.close()


@pytest.mark.fast
def test_windows_and_the_learning_rate() -> None:
    assert [every_for(n) for n in (None, 0, 80, 200, 201, 10_000)] == [1, 1, 1, 1, 2, 50]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5**step)
    optimizer.step()
    scheduler.step()
    assert learning_rate(scheduler, optimizer) == pytest.approx(0.05)
    assert learning_rate(None, optimizer) == pytest.approx(0.05)
    assert learning_rate(None, None) is None


def _run(tmp_path, logging_steps: int):
    callback = BertWatchCallback(every_n_steps=4, num_probe_examples=6, quiet=True, on_alert="none")
    trainer = toy_trainer(tmp_path, [], logging_steps=logging_steps, max_steps=8)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return trainer, callback


def test_the_verdict_reads_every_steps_loss_when_the_trainer_logs_rarely(tmp_path) -> None:
    trainer, callback = _run(tmp_path / "rare", 500)
    evidence = callback.run_evidence.evidence
    assert callback.run_evidence.tapped and [s for s, _ in evidence.losses] == list(range(1, 9))
    assert [s for s, _ in evidence.rates] == list(range(1, 9))
    assert not [h for h in trainer.state.log_history if "loss" in h]  # the Trainer itself logged none
    every, every_callback = _run(tmp_path / "every", 1)  # the same run, logged every step by the Trainer
    logged = [(int(h["step"]), float(h["loss"])) for h in every.state.log_history if "loss" in h]
    tapped = every_callback.run_evidence.evidence.losses
    assert [s for s, _ in tapped] == [s for s, _ in logged]
    for (_, ours), (_, theirs) in zip(tapped, logged):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-4 * abs(theirs) + 1e-6)
    assert tapped == evidence.losses  # the Trainer's logging changes nothing the verdict reads
    assert all(math.isfinite(v) for _, v in tapped)


def _hooks(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_the_tap_goes_on_only_where_the_verdict_is_judged_in_a_run_of_one_process(tmp_path, monkeypatch) -> None:
    from bertwatch.callbacks import EntropyCallback

    seen = {}

    class Spy(EntropyCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen.setdefault(type(self).__name__, _hooks(model))
            return super().on_step_end(args, state, control, model=model, **kwargs)

    def run(callback, folder, world_size=1):
        trainer = toy_trainer(tmp_path / folder, [], logging_steps=500, max_steps=4)
        monkeypatch.setattr(type(trainer.args), "world_size", property(lambda self: world_size))
        callback.set_trainer(trainer)
        trainer.add_callback(callback)
        baseline = _hooks(trainer.model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        return trainer, callback, baseline

    # entropy alone gives no run-health signals: no verdict, so no hook on the model
    trainer, callback, baseline = run(Spy(every_n_steps=2, num_probe_examples=4, quiet=True), "entropy")
    assert seen["Spy"] == baseline and not callback.run_evidence.evidence.losses
    # the full callback judges: its tap is on while training and off after
    trainer, callback, baseline = run(BertWatchCallback(every_n_steps=2, num_probe_examples=4, quiet=True), "full")
    assert callback.run_evidence.tapped and _hooks(trainer.model) == baseline
    # two processes: each would read its own batches' loss, so none taps and all read the Trainer's logs
    trainer, callback, _ = run(BertWatchCallback(every_n_steps=2, num_probe_examples=4, quiet=True), "ddp", 2)
    assert not callback.run_evidence.tapped and not callback.run_evidence.evidence.losses
