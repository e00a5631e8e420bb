"""Stability alerts inside real ``Trainer`` runs: a tiny random BERT driven to divergence by an absurd learning rate
raises an alert before its loss jumps, ``on_alert="stop"`` leaves a checkpoint from before the jump whose weights
equal those of a run without bertwatch, and a stable run raises none."""

from __future__ import annotations

import glob
import math
import os
import warnings

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bertwatch.callbacks import BertWatchCallback, BertWatchWarning, watch
from bertwatch.callbacks.alert_lines import STOPPING
from bertwatch.callbacks.alerting import Alerting
from bertwatch.core.alerts import AlertSettings
from bertwatch.core.verdict import Verdict
from bertwatch.core.warnings import BertWatchAlert
from bertwatch.tb.writer import metadata as md
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
    assert any(f"in alert since step {first_alert}: " in str(w.message) for w in caught)
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


# ------------------------------------------------------------------------------------------------ what a user reads


class _Control:
    should_save = should_training_stop = False


def _grids(max_logit: np.ndarray) -> dict:
    return {"max_logit": max_logit, "entropy": np.full(max_logit.shape, 2.0)}


def _judged_at_10(alerting: Alerting, control=None, heads=11, layers=3, collapsed=(), always=False):
    """Step 10 of a 3 x 4-head run: ``heads`` heads' max logit past 3x its reference (from the last head back),
    the entropy of the heads ``collapsed`` fallen; the alerts acted on; the warnings shown (the filters as a user
    has them, or ``always``)."""
    reference = np.full((layers, 4), 5.0)
    now = reference.copy()
    for i in range(heads):
        layer, head = divmod(layers * 4 - 1 - i, 4)
        now[layer, head] = 16.0 + i  # the first past the threshold by least
    grids = _grids(now)
    for layer, head in collapsed:
        grids["entropy"][layer, head] = 0.1
    with warnings.catch_warnings(record=True) as shown:
        if always:
            warnings.simplefilter("always")
        alerting.act(alerting.judge([(0, _grids(reference)), (10, grids)], resumed=False), control or _Control())
    return shown


@pytest.mark.fast
def test_new_alerts_are_one_bertwatch_line_per_rule_naming_its_heads_and_a_warning_hidden_by_default(capsys) -> None:
    shown = _judged_at_10(Alerting("warn", AlertSettings(), strict=False), collapsed=[(0, 0)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertwatch: ")]
    assert lines[0].startswith("bertwatch: 11 heads in alert since step 10: logit growth on L0 H1, L0 H2, L0 H3, ")
    assert lines[0].split(" (")[0].endswith("and 3 more")  # 8 named, the furthest past the threshold first
    assert "(L0 H1: largest attention logit 26, from 5 at step 0)" in lines[0]
    assert lines[1] == (
        "bertwatch: 1 head in alert since step 10: entropy collapse on L0 H0 (L0 H0: attention entropy 0.1, from 2 "
        "at step 0)"
    )
    assert len(lines) == 2 and shown == [], "a user sees the lines, no warning with a module path"
    # those who ask for the warnings get one per line, of a category under BertWatchWarning, at their own line
    recorded = _judged_at_10(Alerting("warn", AlertSettings(), strict=False), collapsed=[(0, 0)], always=True)
    assert [str(w.message) for w in recorded] == lines
    assert all(issubclass(w.category, BertWatchAlert) and issubclass(w.category, BertWatchWarning) for w in recorded)
    assert {w.filename for w in recorded} == {__file__}
    with warnings.catch_warnings(), pytest.raises(BertWatchAlert):  # and "error" raises them (contained in a run)
        warnings.simplefilter("error", BertWatchWarning)
        _judged_at_10(Alerting("warn", AlertSettings(), strict=True))


@pytest.mark.fast
def test_stop_says_it_stops_once_quiet_says_nothing_and_a_callable_is_told_alone(capsys) -> None:
    control = _Control()
    stopping = Alerting("stop", AlertSettings(), strict=False)
    _judged_at_10(stopping, control, heads=2)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == f"bertwatch: {STOPPING}" and len(lines) == 2 and control.should_training_stop
    assert stopping.stop_requested_at == 10 and stopping.stop_reason.startswith("L2 H2: logit growth since step 10")
    quiet = Alerting("warn", AlertSettings(), strict=False)
    quiet.speaks = False  # not world process zero, or quiet=True
    recorded = _judged_at_10(quiet, heads=2, always=True)
    assert capsys.readouterr().err == "" and len(recorded) == 1
    given = []
    told = Alerting(given.append, AlertSettings(), strict=False)
    recorded = _judged_at_10(told, heads=2, always=True)
    assert capsys.readouterr().err == "" and recorded == [] and [len(g) for g in given] == [2]


@pytest.mark.fast
def test_the_first_failing_verdict_is_one_line(capsys) -> None:
    alerting = Alerting("warn", AlertSettings(), strict=False)
    with warnings.catch_warnings(record=True) as shown:
        alerting.act_on_verdict(Verdict(20, 2, ("predictions have collapsed",)), _Control())
        alerting.act_on_verdict(Verdict(30, 2, ("predictions have collapsed",)), _Control())
    assert capsys.readouterr().err == "bertwatch: verdict at step 20: failing: predictions have collapsed\n"
    assert shown == []


def test_an_error_in_judging_the_alerts_leaves_the_verdict_on(recwarn) -> None:
    from bertwatch.core.evidence import Evidence

    alerting = Alerting("warn", AlertSettings(), strict=False)
    with alerting.contained():
        raise RuntimeError("a grid went missing")
    assert alerting.disabled and not alerting.verdict_disabled
    assert "the stability alerts stopped after an error" in str(recwarn.pop(BertWatchWarning).message)
    evidence = Evidence(max_steps=10)
    evidence.note_log(5, {"loss": 0.7, "learning_rate": 1e-4})
    assert alerting.judge_verdict(evidence) is not None  # the verdict goes on
    with alerting.contained("verdict"):
        raise RuntimeError("boom")
    assert alerting.verdict_disabled and alerting.judge_verdict(evidence) is None
    assert "the run verdict stopped after an error" in str(recwarn.pop(BertWatchWarning).message)
