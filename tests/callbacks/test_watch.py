"""Attaching bertwatch without stack walking: ``watch(trainer)``, ``watching_trainers()``, a callback only in
``callbacks=[...]``, and the layer means reaching the Trainer's trackers (a recording tracker and MLflow's file
store) at the steps they were measured, without changing the run."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

import bertwatch
from bertwatch.callbacks import (
    BertWatchCallback,
    BertWatchWarning,
    EntropyCallback,
    ExpertOptions,
    SetupError,
    watch,
    watching_trainers,
)
from bertwatch.callbacks.tracking import headline_logs, layer_mean_logs, tracker_key
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args


class Recorder(T.TrainerCallback):
    """A tracker: keeps every ``on_log`` as (step, logs)."""

    def __init__(self) -> None:
        self.logged: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged.append((state.global_step, dict(logs)))


class MyTrainer(T.Trainer):
    """A user's Trainer subclass."""


def _trainer(out, callbacks=None, cls=T.Trainer, with_eval=True, **overrides) -> T.Trainer:
    tok = tiny_tokenizer()
    values = dict(eval_strategy="steps" if with_eval else "no", eval_steps=3, logging_steps=2)
    values.update(overrides)
    return cls(
        model=tiny_bert(tok),
        args=training_args(str(out), **values),
        train_dataset=toy_dataset(tok, 40, 0),
        eval_dataset=toy_dataset(tok, 20, 1) if with_eval else None,
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=callbacks,
    )


def _plain_layer_means(grid: np.ndarray) -> list[float]:
    return [sum(float(v) for v in row) / len(row) for row in grid.astype(np.float64)]


def _plain_most_drifted(grid: np.ndarray, lower_is_more: bool) -> tuple[float, int, int]:
    best = None
    for layer in range(grid.shape[0]):
        for head in range(grid.shape[1]):
            value = float(grid[layer, head])
            if value != value:
                continue
            if best is None or (value < best[0] if lower_is_more else value > best[0]):
                best = (value, layer, head)
    return best


# ------------------------------------------------------------------------------------------------ attaching


def test_watch_adds_one_bound_callback_idempotently_also_on_subclasses(tmp_path) -> None:
    trainer = _trainer(tmp_path, cls=MyTrainer)
    cb = bertwatch.watch(trainer, every_n_steps=3, num_probe_examples=4)
    assert isinstance(cb, BertWatchCallback) and cb.every_n_steps == 3 and cb.trainer is trainer
    assert watch(trainer) is cb
    assert sum(isinstance(c, BertWatchCallback) for c in trainer.callback_handler.callbacks) == 1
    with pytest.raises(ValueError, match="cannot change its settings"):
        watch(trainer, every_n_steps=5)
    entropy = EntropyCallback()
    other = _trainer(tmp_path / "b", callbacks=[entropy])
    assert watch(other) is entropy and entropy.trainer is other
    assert not any(isinstance(c, BertWatchCallback) for c in other.callback_handler.callbacks)
    with pytest.raises(TypeError, match="transformers Trainer"):
        watch(object())


def test_watching_trainers_attaches_to_every_trainer_and_restores_init_on_error(tmp_path) -> None:
    original = T.Trainer.__init__
    with pytest.raises(RuntimeError, match="script failed"):
        with watching_trainers(every_n_steps=2) as attached:
            first = _trainer(tmp_path / "a", cls=MyTrainer)
            second = _trainer(tmp_path / "b", callbacks=[EntropyCallback()])
            raise RuntimeError("script failed")
    assert T.Trainer.__init__ is original
    assert attached[0].trainer is first and attached[0].every_n_steps == 2
    assert isinstance(attached[1], EntropyCallback) and attached[1].trainer is second
    assert not any(isinstance(c, BertWatchCallback) for c in _trainer(tmp_path / "c").callback_handler.callbacks)
    with pytest.raises(ValueError, match="unknown bertwatch statistic"):
        with watching_trainers(stats=["entropie"]):
            pass
    assert T.Trainer.__init__ is original


def test_callback_only_in_callbacks_uses_the_event_arguments(tmp_path) -> None:
    cb = strict(EntropyCallback, every_n_steps=3, num_probe_examples=4)
    with pytest.warns(BertWatchWarning, match="the Trainer's eval_dataset cannot be seen"):
        _trainer(tmp_path / "a", callbacks=[cb], with_eval=False).train()
    assert [s for s, _ in cb.history] == [0, 3, 6] and cb.trainer is None
    with pytest.raises(SetupError, match=r"bertwatch.watch\(trainer\)"), warnings.catch_warnings():
        warnings.simplefilter("ignore", BertWatchWarning)
        _trainer(tmp_path / "b", callbacks=[BertWatchCallback(ablate_on_end=True)], with_eval=False).train()
    source = Path(bertwatch.__file__).parent / "callbacks"
    assert not any("_getframe" in p.read_text() for p in source.glob("*.py"))


# ------------------------------------------------------------------------------------------------ trackers


def test_trackers_get_the_layer_means_at_the_measured_steps_and_training_is_unchanged(tmp_path) -> None:
    plain_tracker = Recorder()
    plain = _trainer(tmp_path / "a", callbacks=[plain_tracker])
    plain.train()
    tracker = Recorder()
    trainer = _trainer(tmp_path / "b", callbacks=[tracker])
    stats = ["entropy", "cls_mass", "drift_cosine"]
    cb = strict(watch, trainer, stats=stats, every_n_steps=2, num_probe_examples=6)
    trainer.train()

    alerts = [(step, logs) for step, logs in tracker.logged if any(k.startswith("bertwatch/alerts/") for k in logs)]
    ours = [
        (s, logs)
        for s, logs in tracker.logged
        if any(k.startswith("bertwatch/") for k in logs) and (s, logs) not in alerts
    ]
    theirs = [(step, logs) for step, logs in tracker.logged if not any(k.startswith("bertwatch/") for k in logs)]
    assert [s for s, _ in ours] == [0, 2, 3, 4, 6]  # start, every 2 steps, evaluation at 3; not the end pass
    assert [s for s, _ in alerts] == [0, 2, 3, 4, 6] and all(logs["bertwatch/alerts/total"] == 0 for _, logs in alerts)
    assert [s for s, _ in theirs] == [s for s, _ in plain_tracker.logged]
    history = dict(cb.history)
    for step, logs in ours:
        expected = {
            f"bertwatch/{stat}/layer_{layer}": value
            for stat in stats
            for layer, value in enumerate(_plain_layer_means(history[step][stat]))
        }
        value, layer, head = _plain_most_drifted(history[step]["drift_cosine"], lower_is_more=True)
        expected.update(
            {
                "bertwatch/drift_cosine/most_drifted": value,
                "bertwatch/drift_cosine/most_drifted_layer": layer,
                "bertwatch/drift_cosine/most_drifted_head": head,
            }
        )
        assert sorted(logs) == sorted(expected)
        np.testing.assert_allclose([logs[k] for k in expected], list(expected.values()), rtol=1e-6)
    assert not any(k.startswith("bertwatch") for entry in trainer.state.log_history for k in entry)
    same = [entry.get("loss") for entry in plain.state.log_history] == [
        entry.get("loss") for entry in trainer.state.log_history
    ]
    assert same and all(torch.equal(a, b) for a, b in zip(plain.model.parameters(), trainer.model.parameters()))


def test_trackers_can_be_turned_off_and_a_failing_tracker_is_one_warning(tmp_path) -> None:
    tracker = Recorder()
    trainer = _trainer(tmp_path / "a", callbacks=[tracker], with_eval=False)
    strict(
        watch,
        trainer,
        stats=["entropy"],
        every_n_steps=3,
        num_probe_examples=4,
        expert=ExpertOptions(log_to_trackers=False),
    )
    trainer.train()
    assert not any(k.startswith("bertwatch/") for _, logs in tracker.logged for k in logs)

    class Picky(T.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logs["epoch"]  # a tracker that assumes every log is the Trainer's (Trainer.log adds the epoch)

    good = Recorder()
    trainer = _trainer(tmp_path / "b", callbacks=[Picky(), good], with_eval=False, logging_steps=100)
    cb = strict(watch, trainer, stats=["entropy"], every_n_steps=3, num_probe_examples=4)
    with pytest.warns(BertWatchWarning, match="Picky failed on bertwatch's layer means") as record:
        trainer.train()
    assert len([w for w in record if "failed on" in str(w.message)]) == 1
    assert [s for s, _ in cb.history] == [0, 3, 6] and not cb.disabled
    assert [s for s, logs in good.logged if tracker_key("entropy", 0) in logs] == [0, 3, 6]


def test_word_class_grids_reach_the_trackers_too(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    tracker = Recorder()
    trainer = _trainer(tmp_path, callbacks=[tracker], with_eval=False)
    cb = strict(
        watch,
        trainer,
        stats=["entropy"],
        every_n_steps=3,
        num_probe_examples=4,
        expert=ExpertOptions(word_classes=True),
    )
    trainer.train()
    acc = EventAccumulator(cb.watched.trainer_side.run_dir, size_guidance={"tensors": 0})
    acc.Reload()
    names = [t.split("/")[-1] for t in acc.Tags()["tensors"] if t.startswith("bertwatch/heads/wordclass_")]
    assert names
    ours = [(step, logs) for step, logs in tracker.logged if tracker_key("entropy", 0) in logs]
    assert [step for step, _ in ours] == [0, 3, 6]
    sent = 0
    for step, logs in ours:
        for name in names:
            event = next(e for e in acc.Tensors(f"bertwatch/heads/{name}") if e.step == step)
            means = _plain_layer_means(tensor_util.make_ndarray(event.tensor_proto))
            want = {tracker_key(name, layer): v for layer, v in enumerate(means) if v == v}  # NaN layers left out
            got = {k: v for k, v in logs.items() if k.startswith(f"bertwatch/{name}/")}
            assert got == pytest.approx(want, rel=1e-6)
            sent += len(got)
    assert sent


def test_layer_mean_logs_leave_out_layers_without_a_value() -> None:
    grid = np.array([[0.5, np.nan, 1.5], [np.nan, np.nan, np.nan]], dtype=np.float32)
    assert layer_mean_logs({"punct_mass": grid}) == {"bertwatch/punct_mass/layer_0": 1.0}


def test_headline_logs_name_the_most_drifted_head_of_each_drift_statistic() -> None:
    rng = np.random.default_rng(0)
    cosine, js = rng.uniform(0.8, 1.0, (3, 4)), rng.uniform(0.0, 0.2, (3, 4))
    cosine[0, 1] = np.nan
    got = headline_logs({"drift_cosine": cosine, "drift_js": js, "entropy": js})
    for stat, grid, lower in (("drift_cosine", cosine, True), ("drift_js", js, False)):
        value, layer, head = _plain_most_drifted(grid, lower)
        assert got[f"bertwatch/{stat}/most_drifted"] == value
        assert (got[f"bertwatch/{stat}/most_drifted_layer"], got[f"bertwatch/{stat}/most_drifted_head"]) == (
            layer,
            head,
        )
    assert len(got) == 6 and headline_logs({"drift_js": np.full((2, 2), np.nan)}) == {}


def test_mlflow_file_store_run_holds_the_layer_means(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'mlruns'}")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps the file store behind this switch
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "bertwatch-test")
    trainer = _trainer(tmp_path / "out", with_eval=False, report_to=["mlflow"])
    cb = strict(watch, trainer, stats=["entropy", "sep_mass"], every_n_steps=3, num_probe_examples=4)
    trainer.train()
    metric_dirs = list((tmp_path / "mlruns").glob("*/*/metrics"))
    assert len(metric_dirs) == 1
    metrics = metric_dirs[0]
    assert (metrics / "train_loss").is_file() or (metrics / "loss").is_file()
    history = dict(cb.history)
    for stat in ("entropy", "sep_mass"):
        for layer in range(2):
            rows = [line.split() for line in (metrics / "bertwatch" / stat / f"layer_{layer}").read_text().splitlines()]
            assert [int(r[2]) for r in rows] == [0, 3, 6]
            expected = [_plain_layer_means(history[step][stat])[layer] for step in (0, 3, 6)]
            np.testing.assert_allclose([float(r[1]) for r in rows], expected, rtol=1e-6)
