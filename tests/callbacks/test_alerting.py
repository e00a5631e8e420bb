"""Stability alerts inside real ``Trainer`` runs: a tiny random BERT driven to divergence by an absurd learning rate
raises an alert before its loss jumps, ``on_alert="stop"`` leaves a checkpoint from before the jump whose weights
equal those of a run without bertwatch, and a stable run raises none."""

from __future__ import annotations

import glob
import math
import os
import warnings

import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bertwatch.callbacks import BertWatchCallback, BertWatchWarning, watch
from bertwatch.tb import metadata as md
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_texts, training_args

STATS = ["entropy", "cls_mass", "sep_mass"]  # the stab statistics (max_logit) join the rules once measured
DIVERGING_LR = 0.3  # Adam on a 2-layer random BERT: the loss jumps within a few steps
STABLE_LR = 1e-4


class Recorder(T.TrainerCallback):
    """A report_to-style tracker: keeps every ``on_log`` it gets."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs or {})))


def _train(out, lr, callback=None, max_steps=12, tracker=None):
    tok = tiny_tokenizer()
    args = training_args(str(out), max_steps=max_steps, learning_rate=lr, logging_steps=1, lr_scheduler_type="constant")
    trainer = T.Trainer(
        model=tiny_bert(tok),
        args=args,
        train_dataset=toy_dataset(tok, 160, 0),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[c for c in (callback, tracker) if c is not None] or None,
    )
    if callback:
        watch(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    losses = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    return trainer, losses, [w for w in caught if issubclass(w.category, BertWatchWarning)]


def _callback(**options):
    return BertWatchCallback(
        stats=STATS, every_n_steps=1, num_maps=0, probe_texts=[r["text"] for r in toy_texts(8, 3)], **options
    )


def _first_jump(losses: dict[int, float]) -> int:
    """The first logged step whose loss is non-finite or more than 3 x the first step's (ln 2 for 2 labels)."""
    first = losses[min(losses)]
    return min(s for s, loss in losses.items() if not math.isfinite(loss) or loss > 3 * first)


@pytest.mark.slow
def test_a_diverging_run_alerts_before_its_loss_jumps_and_stop_keeps_a_checkpoint_from_before(tmp_path) -> None:
    cb, tracker = _callback(), Recorder()
    _, losses, caught = _train(tmp_path / "warn", DIVERGING_LR, cb, tracker=tracker)
    jump = _first_jump(losses)
    first_alert = min(a.step for a in cb.alerting.raised)
    # the loss logged at step s is that of the weights after step s - 1: the alerted weights had not jumped yet
    assert first_alert < jump - 1, (first_alert, losses)
    assert any("bertwatch alert" in str(w.message) for w in caught)
    acc = EventAccumulator(glob.glob(str(tmp_path / "warn" / "runs" / "*"))[0], size_guidance={"scalars": 0})
    acc.Reload()
    totals = {e.step: e.value for e in acc.Scalars(md.alerts_scalar_tag("total"))}
    assert totals[0] == 0 and totals[first_alert] >= 1
    sent = {step: logs["bertwatch/alerts/total"] for step, logs in tracker.logs if "bertwatch/alerts/total" in logs}
    assert {step: sent[step] for step in totals if step in sent} == totals and first_alert in sent

    stopper = _callback(on_alert="stop")
    trainer, stopped_losses, _ = _train(tmp_path / "stop", DIVERGING_LR, stopper)
    assert trainer.state.global_step == stopper.alerting.stop_requested_at == first_alert
    assert max(stopped_losses.values()) <= 3 * stopped_losses[1]
    checkpoint = tmp_path / "stop" / f"checkpoint-{first_alert}"
    assert checkpoint.is_dir()
    # until the stop, training is that of a run without bertwatch: the checkpoint equals a plain run's weights
    plain, _, _ = _train(tmp_path / "plain", DIVERGING_LR, None, max_steps=first_alert)
    saved = T.BertForSequenceClassification.from_pretrained(str(checkpoint)).state_dict()
    for name, tensor in plain.model.state_dict().items():
        assert torch.equal(saved[name], tensor), name


@pytest.mark.slow
def test_a_stable_run_raises_no_alert(tmp_path) -> None:
    cb = _callback(on_alert="stop")
    trainer, losses, caught = _train(tmp_path, STABLE_LR, cb)
    assert cb.alerting.raised == [] and trainer.state.global_step == 12
    assert not [w for w in caught if "alert" in str(w.message)]
    assert not glob.glob(os.path.join(tmp_path, "checkpoint-*"))
