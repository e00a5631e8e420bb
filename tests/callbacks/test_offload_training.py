"""Statistics off the training thread inside real ``Trainer`` runs (``offload_stats``): the same grids, steps and
event-file records, record by record, as inline; results published in step order and before the next optimiser
step however slow a job is; pinned steps measured; a failing job contained; the automatic policy's choice."""

from __future__ import annotations

import glob
import threading
import time
import warnings

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

import bertwatch.callbacks.measurements as measurements_module
from bertwatch.callbacks import BertWatchCallback, BertWatchWarning, EntropyCallback, watch
from bertwatch.callbacks import offload as offload_module
from bertwatch.callbacks.offload import offload_threads
from bertwatch.callbacks.settings import WatchSettings
from bertwatch.core.stat_names import MIXING_NAMES
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts, toy_trainer

WORKER_THREAD = "bertwatch-stats"
#: The real core count (taken at collection: for the run, conftest's ``_no_spare_cores`` replaces it).
PROCESS_CORES = offload_module.available_cores


def _train(out, callbacks, **overrides):
    """A tiny BERT trained for 6 steps (evaluation at steps 3 and 6) with ``callbacks`` attached by
    ``bertwatch.watch``; returns (trainer, model, per-step losses)."""
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    values = dict(eval_strategy="steps", eval_steps=3, logging_steps=1)
    values.update(overrides)
    trainer = toy_trainer(out, callbacks, tokenizer=tok, model=model, train_size=40, eval_size=20, **values)
    if callbacks:
        watch(trainer)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, model, losses


def _records(root) -> list[tuple]:
    """Every summary value of the bertwatch event file under ``root``, in file order, as comparable tuples
    (walltime left out; the probe-steps series' ``overhead_share``, a timing, left out too)."""
    (path,) = glob.glob(str(root / "runs" / "*" / "*.bertwatch"))
    out = []
    for event in event_file_loader.EventFileLoader(path).Load():
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.tag.endswith("/probe_steps"):  # [overhead_share, budgeted]: the share is a timing
                content = tensor_util.make_ndarray(value.tensor)[1:].tobytes()
            elif value.tag.endswith("probe_steps/overhead_share"):
                content = None
            else:
                content = value.SerializeToString()
            out.append((event.step, value.tag, value.metadata.SerializeToString(), content))
    return out


def _thread_of_map_statistics(monkeypatch) -> list[str]:
    """The name of the thread each ``compute_stats`` call (the map statistics) ran on, in call order."""
    names: list[str] = []
    original = measurements_module.compute_stats

    def recorded(*args, **kwargs):
        names.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(measurements_module, "compute_stats", recorded)
    return names


def _same_history(a, b) -> bool:
    if [s for s, _ in a] != [s for s, _ in b]:
        return False
    for (_, x), (_, y) in zip(a, b):
        if x.keys() != y.keys() or not all(np.array_equal(x[n], y[n], equal_nan=True) for n in x):
            return False
    return True


def _callbacks(offload: bool) -> list:
    stats = BertWatchCallback.default_stats + MIXING_NAMES
    return [
        BertWatchCallback(stats=stats, every_n_steps=2, num_probe_examples=6, num_maps=2, offload_stats=offload),
        EntropyCallback(every_n_steps=3, num_probe_examples=6, offload_stats=offload),
    ]


def test_results_are_identical_with_the_statistics_on_and_off_the_training_thread(tmp_path, monkeypatch) -> None:
    runs = {}
    for offload in (False, True):
        threads = _thread_of_map_statistics(monkeypatch)
        callbacks = _callbacks(offload)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BertWatchWarning)  # the random model's alerts, the same in both
            _, model, losses = _train(tmp_path / str(offload), callbacks)
        runs[offload] = (callbacks, model, losses, _records(tmp_path / str(offload)), set(threads))
    (inline, inline_model, inline_losses, inline_records, inline_threads) = runs[False]
    (moved, moved_model, moved_losses, moved_records, moved_threads) = runs[True]
    assert inline_threads == {threading.main_thread().name} and moved_threads == {WORKER_THREAD}
    assert moved_losses == inline_losses
    assert all(torch.equal(x, y) for x, y in zip(inline_model.state_dict().values(), moved_model.state_dict().values()))
    for a, b in zip(inline, moved):
        assert not a.disabled and not b.disabled
        assert _same_history(a.history, b.history), type(a).__name__
        assert [(r.step, r.reason) for r in a.pacing.log] == [(r.step, r.reason) for r in b.pacing.log]
    assert [s for s, _ in moved[0].history] == [0, 2, 3, 4, 6]
    assert {tag for _, tag, _, _ in moved_records} >= {"bertwatch/heads/mixing_ratio", "bertwatch/series/probe_steps"}
    assert len(moved_records) == len(inline_records)
    for k, (x, y) in enumerate(zip(inline_records, moved_records)):
        assert x == y, f"record {k}: step {x[0]} {x[1]} inline, step {y[0]} {y[1]} offloaded"


def test_results_are_published_in_step_order_before_the_next_optimiser_step(tmp_path, monkeypatch) -> None:
    original = measurements_module.compute_stats

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return original(*args, **kwargs)

    monkeypatch.setattr(measurements_module, "compute_stats", slow)
    callback = EntropyCallback(every_n_steps=1, num_probe_examples=6, probe_batch_size=2, offload_stats=True)
    seen = []

    class Before(T.TrainerCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            seen.append((state.global_step, [s for s, _ in callback.history]))

    _train(tmp_path, [callback, Before()], eval_strategy="no", max_steps=4)
    trainer_steps = [step for step, _ in seen]
    assert trainer_steps == [0, 1, 2, 3]
    for step, history in seen:  # before step `step`'s weights change, every step measured so far is published
        assert history == list(range(step + 1)), (step, history)
    written = [step for step, tag, _, _ in _records(tmp_path) if tag == "bertwatch/heads/entropy"]
    assert written == [0, 1, 2, 3, 4] and [s for s, _ in callback.history] == [0, 1, 2, 3, 4]


def test_pinned_steps_are_measured_with_the_worker(tmp_path) -> None:
    callback = EntropyCallback(every_n_steps=0, num_probe_examples=6, offload_stats=True)
    _train(tmp_path, [callback])
    assert [(r.step, r.reason) for r in callback.pacing.log] == [(0, "start"), (3, "evaluation"), (6, "evaluation")]
    assert [s for s, _ in callback.history] == [0, 3, 6] and not callback.disabled


def test_a_failing_job_is_one_warning_and_training_and_checkpoints_go_on(tmp_path, monkeypatch) -> None:
    _, plain, plain_losses = _train(tmp_path / "plain", [], eval_strategy="no", save_strategy="steps", save_steps=2)
    calls = []
    original = measurements_module.compute_stats

    def broken(*args, **kwargs):
        calls.append(threading.current_thread().name)
        if len(calls) > 1:
            raise RuntimeError("statistics exploded on the worker")
        return original(*args, **kwargs)

    monkeypatch.setattr(measurements_module, "compute_stats", broken)
    a = EntropyCallback(every_n_steps=2, num_probe_examples=4, offload_stats=True)
    b = EntropyCallback(every_n_steps=2, num_probe_examples=4, offload_stats=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, watched, losses = _train(tmp_path / "w", [a, b], eval_strategy="no", save_strategy="steps", save_steps=2)
    ours = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    assert len(ours) == 1 and "statistics exploded on the worker" in str(ours[0].message)
    assert set(calls) == {WORKER_THREAD} and a.disabled and b.disabled
    assert [s for s, _ in a.history] == [0] and losses == plain_losses
    assert all(torch.equal(x, y) for x, y in zip(plain.state_dict().values(), watched.state_dict().values()))
    for step in (2, 4, 6):
        checkpoint = tmp_path / "w" / f"checkpoint-{step}"
        assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "trainer_state.json").is_file()
        assert T.AutoModelForSequenceClassification.from_pretrained(checkpoint) is not None


def test_a_stop_alert_with_the_worker_stops_one_optimiser_step_later(tmp_path) -> None:
    """Adam at a learning rate of 0.3 on a random 2-layer BERT: an entropy or sink alert within 12 steps."""
    tok = tiny_tokenizer()
    texts = [r["text"] for r in toy_texts(8, 3)]
    runs = {}
    for offload in (False, True):
        callback = BertWatchCallback(
            stats=["entropy", "cls_mass", "sep_mass"], every_n_steps=1, num_maps=0, probe_texts=texts,
            on_alert="stop", offload_stats=offload,
        )  # fmt: skip
        out = tmp_path / str(offload)
        trainer = toy_trainer(
            out, [callback], tokenizer=tok, train_size=160, max_steps=12, learning_rate=0.3, logging_steps=1,
            lr_scheduler_type="constant",
        )  # fmt: skip
        watch(trainer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BertWatchWarning)
            trainer.train()
        runs[offload] = (callback, trainer.state.global_step, out)
    (inline, inline_end, _), (moved, moved_end, moved_out) = runs[False], runs[True]
    alerted = inline.alerting.stop_requested_at
    assert alerted is not None and alerted < 11 and inline_end == alerted
    assert moved.alerting.stop_requested_at == alerted and moved_end == alerted + 1
    assert (moved_out / f"checkpoint-{alerted + 1}" / "model.safetensors").is_file()
    raised = [(a.step, a.layer, a.head, a.rule) for a in moved.alerting.raised if a.step <= alerted]
    assert raised == [(a.step, a.layer, a.head, a.rule) for a in inline.alerting.raised]


@pytest.mark.parametrize(
    ("offload", "device", "cores", "threads", "expected"),
    [
        (None, "cpu", 2, 2, 0),  # saturated cores: inline
        (None, "cpu", 2, 1, 1),  # one core left idle: a one-thread worker
        (None, "cpu", 16, 4, 12),  # the spare cores
        (None, "cpu", 4, 8, 0),  # more threads than cores
        (True, "cpu", 2, 2, 1),  # forced: at least one thread
        (True, "cpu", 16, 4, 12),
        (False, "cpu", 16, 4, 0),
        (None, "cuda", 2, 2, 0),  # inline: the side stream is opt-in until a GPU benchmark has measured it
        (True, "cuda", 2, 2, 1),  # asked for: a side stream, whatever the cores
        (False, "cuda", 2, 2, 0),
    ],
)
def test_the_automatic_policy_on_given_core_counts(offload, device, cores, threads, expected) -> None:
    assert offload_threads(offload, device, cores=cores, threads=threads) == expected


def test_the_policy_reads_the_process_cores_and_torch_threads(monkeypatch) -> None:
    monkeypatch.setattr(offload_module, "available_cores", lambda: torch.get_num_threads() + 3)
    assert offload_threads(None, "cpu") == 3
    monkeypatch.setattr(offload_module, "available_cores", torch.get_num_threads)
    assert offload_threads(None, "cpu") == 0


def test_offload_stats_is_checked() -> None:
    with pytest.raises(TypeError, match="offload_stats must be True or False"):
        WatchSettings(offload_stats="yes")
    assert WatchSettings(offload_stats=1).offload_stats is True
    assert WatchSettings().probe().offload is None
    assert WatchSettings(offload_stats=False).probe() != WatchSettings().probe()


def test_the_processes_of_a_run_on_one_machine_share_its_cores(monkeypatch) -> None:
    import os

    own = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert PROCESS_CORES() == own
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(own))
    assert PROCESS_CORES() == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * own))
    assert PROCESS_CORES() == 1
