"""The run-health signals and the verdict in a training run: the callback's ``health`` history, the evidence it
hands the verdict (its probe passes, the Trainer's evaluations and logged training loss), the ``run_health`` and
``verdict`` series in the event file, the verdict replayed from the Trainer's own log equal to the live one, and
``on_alert="stop"`` acting on a failing verdict (a checkpoint saved, the run stopped, the reasons in a warning)."""

from __future__ import annotations

import glob
import math

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from transformers import TrainerCallback

from bertwatch.callbacks import BertWatchCallback, GradientImportanceCallback
from bertwatch.core.alerts import Alert
from bertwatch.core.evidence import Constant, Evidence
from bertwatch.core.health_names import HEALTH_SERIES, LOSS_MEAN, PREDICTION_SHARE, grad_norm_name
from bertwatch.core.verdict import NOTHING_YET, VERDICT_SERIES, Verdict, VerdictSettings, judge
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.options.groups import ExpertOptions
from bertwatch.tb.writer.metadata import series_tag, text_tag
from tests.support.tiny_trainer import toy_trainer

pytestmark = pytest.mark.fast


def _train(tmp_path, verdict: VerdictSettings | None = None, evaluate: bool = False, **options):
    if verdict is not None:
        options["verdict"] = verdict
    callback = BertWatchCallback(every_n_steps=2, num_probe_examples=6, quiet=True, **options)
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
    """The toy run predicts one class with its losses at the constant prediction's: failing at step 4, once that
    has held 20% of its 6 steps."""
    with pytest.warns(BertWatchWarning, match="bertwatch: verdict at step 4: failing: 6 of 6 probe predictions"):
        callback, trainer = _train(tmp_path, on_alert="stop")
    assert trainer.state.global_step == 4 and callback.alerting.stop_requested_at == 4
    assert callback.alerting.stop_reason == f"verdict: {callback.alerting.verdict.describe()}"
    assert glob.glob(str(tmp_path / "out" / "checkpoint-4"))


class AlertsInForce(TrainerCallback):
    """After bertwatch's own events, the stability alerts in force at each step it measured (as
    ``benchmarks/bench_failures.py`` records them)."""

    def __init__(self, callback) -> None:
        self.callback, self.counts = callback, {}

    def _note(self, state) -> None:
        for step, _ in self.callback.health:
            self.counts.setdefault(step, len(self.callback.alerting.alerts))

    def on_step_end(self, args, state, control, **kwargs):
        self._note(state)

    def on_evaluate(self, args, state, control, **kwargs):
        self._note(state)

    def on_train_end(self, args, state, control, **kwargs):
        self._note(state)


def test_the_live_verdict_is_the_verdict_replayed_from_the_trainers_own_log(tmp_path) -> None:
    """The callback collects every evaluation and logged training loss; the verdict written at each step is
    ``judge`` of the evidence rebuilt from the Trainer's ``log_history``, the run-health history and the alerts
    in force, cut to that step."""
    callback = BertWatchCallback(every_n_steps=3, num_probe_examples=6, quiet=True, on_alert="none")
    trainer = toy_trainer(tmp_path / "out", [], eval_strategy="steps", eval_steps=2, logging_steps=1, max_steps=8)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    alerts = AlertsInForce(callback)
    trainer.add_callback(alerts)
    trainer.train()
    replayed = Evidence(
        max_steps=8,
        eval_constant=Constant.of_labels(trainer.eval_dataset["label"]),
        train_constant=Constant.of_labels(trainer.train_dataset["label"]),
    )
    for entry in trainer.state.log_history:
        replayed.note_log(entry["step"], entry)
    for step, health in callback.health:
        replayed.note_probe(step, health)
        replayed.note_alerts(step, alerts.counts[step])
    kept = callback.run_evidence.evidence
    assert kept.losses == replayed.losses and len(kept.losses) == 8  # every logged training loss
    assert [s for s, _ in kept.evaluations] == [2, 4, 6, 8] and kept.evaluations == replayed.evaluations
    assert judge(replayed) == callback.alerting.verdict
    written = dict(_levels(tmp_path))
    texts = _texts(tmp_path)
    assert {0, 3, 6, 8} <= set(written)  # every probe step, and the steps where the level changed
    for step, level in written.items():
        verdict = judge(replayed.until(step))
        assert (level, texts[step]) == (verdict.level, list(verdict.reasons)), step
    assert any("eval loss" in r for r in callback.alerting.verdict.reasons)


def _levels(tmp_path) -> list[tuple[int, int]]:
    return [(e.step, int(tensor_util.make_ndarray(e.tensor_proto)[0])) for e in _series(tmp_path, VERDICT_SERIES)]


class Recorder(TrainerCallback):
    """A report_to-style tracker: keeps every ``on_log`` it gets."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append((state.global_step, dict(logs or {})))


def _tracked(tmp_path, *callbacks) -> tuple[Recorder, list]:
    tracker = Recorder()
    trainer = toy_trainer(tmp_path / "out", [tracker], save_strategy="no", max_steps=4)
    for callback in callbacks:
        callback.set_trainer(trainer)
        trainer.add_callback(callback)
    trainer.train()
    return tracker, [(step, logs) for step, logs in tracker.logs if any(k.startswith("bertwatch/") for k in logs)]


def test_each_steps_reasons_are_kept_in_the_verdict_text(tmp_path) -> None:
    callback, _ = _train(tmp_path)
    texts = _texts(tmp_path)
    assert sorted(texts) == [step for step, _ in callback.health]
    assert texts[max(texts)] == list(callback.alerting.verdict.reasons)
    assert texts[0] == [NOTHING_YET]  # step 0 is the reference: nothing to tell yet, and the words say so
    # at risk at step 2 (a collapse now), failing from step 4 (held 20% of training): each step its own words
    assert texts[2] != texts[4] and all(texts[s] for s in texts if s > 0)
    assert any("since step 2" in line for line in texts[4])


def _texts(tmp_path) -> dict[int, list[str]]:
    (run,) = glob.glob(str(tmp_path / "**" / "events.out.tfevents.*.bertwatch"), recursive=True)
    acc = EventAccumulator(run.rsplit("/", 1)[0], size_guidance={"tensors": 0})
    acc.Reload()
    return {
        e.step: [b.decode() for b in tensor_util.make_ndarray(e.tensor_proto).reshape(-1)]
        for e in acc.Tensors(text_tag(VERDICT_SERIES))
    }


def test_the_verdict_and_run_health_reach_the_trackers_once_a_step_from_its_writer(tmp_path) -> None:
    first = BertWatchCallback(every_n_steps=2, num_probe_examples=6, quiet=True)
    second = GradientImportanceCallback(every_n_steps=2, num_probe_examples=6, quiet=True)
    _, sent = _tracked(tmp_path, first, second)
    levels = [(step, logs["bertwatch/verdict/level"]) for step, logs in sent if "bertwatch/verdict/level" in logs]
    measured = [step for step, _ in first.health]
    assert measured and [step for step, _ in levels] == measured  # one level a probe step, from one member
    assert levels[-1][1] == float(first.alerting.verdict.level)
    health = [logs for _, logs in sent if "bertwatch/verdict/level" in logs]
    for logs, (_, values) in zip(health, first.health):
        expected = {f"bertwatch/run_health/{k}": v for k, v in values.items() if math.isfinite(v)}
        assert {k: v for k, v in logs.items() if k.startswith("bertwatch/run_health/")} == expected
        assert all(math.isfinite(v) for v in logs.values())
        assert "bertwatch/run_health/prediction_std" not in logs  # NaN for a classifier: never sent


def test_no_verdict_reaches_the_trackers_without_log_to_trackers(tmp_path) -> None:
    quiet = BertWatchCallback(
        every_n_steps=2, num_probe_examples=6, quiet=True, expert=ExpertOptions(log_to_trackers=False)
    )
    _, sent = _tracked(tmp_path, quiet)
    assert quiet.health and not [logs for _, logs in sent if "bertwatch/verdict/level" in logs]


def test_the_verdict_option_changes_the_verdict(tmp_path) -> None:
    """The toy run predicts one class with its losses at the constant prediction's: failing from step 4 by default
    (held 20% of its 6 steps); asked to wait for a sign held as long as the run, at risk at step 4 and failing only
    at the end, where its predictions are all one class. The thresholds written with the verdict are the ones
    given."""
    default, _ = _train(tmp_path / "default")
    patient, _ = _train(tmp_path / "patient", VerdictSettings(hold_share=1.0))
    assert dict(_levels(tmp_path / "default")) == {0: 0, 2: 1, 4: 2, 6: 2}
    assert dict(_levels(tmp_path / "patient")) == {0: 0, 2: 1, 4: 1, 6: 2}
    assert patient.alerting.verdict.reasons[0].endswith("at the end of training: the run ends predicting a constant")
    assert patient.alerting.verdict_settings == VerdictSettings(hold_share=1.0)
    assert [h for _, h in default.health] == [h for _, h in patient.health]  # the same run, judged otherwise


def test_a_callable_on_alert_is_given_alerts_only(tmp_path) -> None:
    given = []
    callback, trainer = _train(tmp_path, on_alert=lambda alerts: given.append(list(alerts)) or "stop")
    assert callback.alerting.verdict.label == "failing" and trainer.state.global_step == 6  # not stopped
    assert all(isinstance(alert, Alert) for alerts in given for alert in alerts)
    assert callback.alerting.stop_reason is None


def test_fp16_says_once_that_small_gradients_underflow(tmp_path) -> None:
    callback = BertWatchCallback(every_n_steps=2, num_probe_examples=4, quiet=True)
    trainer = toy_trainer(tmp_path / "out", [], save_strategy="no", max_steps=2, fp16=True)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    with pytest.warns(BertWatchWarning) as caught:
        trainer.train()
    said = [w for w in caught if "fp16" in str(w.message)]
    assert len(said) == 1 and "underflow" in str(said[0].message) and callback.health


def test_layer_gradients_off_leaves_the_gradient_norms_out_and_the_rest_alike(tmp_path) -> None:
    """``VerdictSettings(layer_gradients=False)`` reaches the gradient pass: every layer's gradient norm is NaN (not
    measured), the other signals and the head statistics are those of the run that takes them."""
    with_norms, _ = _train(tmp_path / "on")
    without, _ = _train(tmp_path / "off", VerdictSettings(layer_gradients=False))
    assert all(grad_norm_name(0) in h for _, h in with_norms.health)
    assert all(math.isfinite(h[grad_norm_name(0)]) for _, h in with_norms.health)
    assert without.health and all(math.isnan(h[grad_norm_name(l)]) for _, h in without.health for l in range(2))
    for (_, on), (_, off) in zip(with_norms.health, without.health, strict=True):
        assert off[PREDICTION_SHARE] == on[PREDICTION_SHARE]
        assert math.isclose(off[LOSS_MEAN], on[LOSS_MEAN], rel_tol=1e-6)
    for (_, on), (_, off) in zip(with_norms.history, without.history, strict=True):
        np.testing.assert_allclose(off["head_importance"], on["head_importance"], rtol=1e-5, atol=1e-7)


def test_the_verdict_reaches_an_mlflow_run_beside_the_layer_means(tmp_path, monkeypatch) -> None:
    """A real MLflow file store: at each probe step the run's metrics hold ``bertwatch/verdict/level``, ``known``,
    ``evidence``, ``margin`` and ``rank``, the numbers of the verdict series bertwatch writes to its event file."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "bertwatch-verdict")
    callback = BertWatchCallback(every_n_steps=2, num_probe_examples=6, quiet=True, on_alert="none")
    trainer = toy_trainer(tmp_path / "out", [], save_strategy="no", report_to=["mlflow"])
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    (metrics,) = (tmp_path / "mlruns").glob("*/*/metrics")

    def rows(name: str) -> dict[int, float]:
        lines = (metrics / "bertwatch" / "verdict" / name).read_text().splitlines()
        return {int(step): float(value) for _, value, step in (line.split() for line in lines)}

    probed = [step for step, _ in callback.health]
    written = {e.step: tensor_util.make_ndarray(e.tensor_proto).reshape(-1) for e in _series(tmp_path, VERDICT_SERIES)}
    level, known, evidence, margin, rank = (rows(n) for n in ("level", "known", "evidence", "margin", "rank"))
    assert sorted(level) == sorted(known) == sorted(rank) == probed == [0, 2, 4, 6]
    assert level == {0: 0.0, 2: 1.0, 4: 2.0, 6: 2.0}  # cannot tell, at risk, failing once it held 20% of training
    assert known == {0: 0.0, 2: 1.0, 4: 1.0, 6: 1.0}
    for step in probed:
        assert [level[step], known[step]] == pytest.approx(written[step][:2].tolist())
        score, share = float(written[step][2]), float(written[step][3])
        assert evidence.get(step, math.nan) == pytest.approx(score, rel=1e-5, nan_ok=True)
        assert margin.get(step, math.nan) == pytest.approx(share, rel=1e-5, nan_ok=True)
        assert written[step][4] == 0.0  # not a regression: the rank reads its margin whole
        assert rank[step] == pytest.approx(Verdict(step, int(level[step]), margin=share).rank, rel=1e-5)
        base = 2.0 if level[step] == 2 else 0.0  # failing first, then the margin alone
        assert base <= rank[step] <= base + 1
    assert evidence and all(math.isfinite(v) for v in evidence.values())
    assert margin and all(math.isfinite(v) for v in margin.values())
    assert (metrics / "bertwatch" / "run_health").is_dir()  # beside the run-health signals, as before
