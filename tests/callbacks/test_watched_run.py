"""The run's watched (``callbacks.watched_run``): one pass per event for its members, each result handed to each member
once, and the attention maps kept within the bytes a step may write."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import bertwatch.callbacks.watched_run as watched_module
from bertwatch.callbacks import BertWatchCallback, SetupError, watch
from bertwatch.callbacks._context import TrainerContext
from bertwatch.callbacks.watched_run import join
from bertwatch.options.settings import ProbeSettings
from tests.support.models import OneMember
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts, toy_trainer

pytestmark = pytest.mark.fast


def _plain_fit(lengths: list[int], layers: int, heads: int, budget: int) -> int:
    count, total = 0, 0
    for n in lengths:
        total += 2 * layers * heads * n * n
        if total > budget:
            break
        count += 1
    return count


def test_the_maps_kept_are_the_first_examples_whose_float16_maps_fit_the_budget(tmp_path) -> None:
    tok = tiny_tokenizer()
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(6, seed=5)]
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    settings = ProbeSettings(texts=texts, batch_size=4, logging_dir=str(tmp_path / "run"))
    member = OneMember(tiny_bert(tok), settings, ["entropy"], args, T.TrainerState(), {"processing_class": tok})
    probe, context = member.probe, member.context
    lengths = [len(t) for t in probe.tokens]
    one = 2 * context.layers * context.heads * lengths[0] ** 2
    for budget in (0, one - 1, one, one + 1, 10 * one, 10**9):
        got = probe.maps_that_fit(context.layers, context.heads, budget)
        assert got == _plain_fit(lengths, context.layers, context.heads, budget), budget
    member.close()


def test_each_member_gets_each_result_once_and_a_new_step_starts_afresh(tmp_path) -> None:
    tok = tiny_tokenizer()
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(4, seed=5)]
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state, event = T.TrainerState(), {"processing_class": tok}
    model = tiny_bert(tok)
    settings = ProbeSettings(texts=texts, batch_size=4, logging_dir=str(tmp_path / "run"))
    a = OneMember(model, settings, ["entropy"], args, state, event)
    b = OneMember(model, settings, ["cls_mass"], args, state, event)
    watched = a.watched
    assert b.watched is watched
    first = watched.handle("step", 0, a.handle)  # the pending begin pass first, then the step
    assert [(r.event, r.step) for r in first] == [("begin", 0), ("step", 0)]
    assert watched.handle("step", 0, a.handle) == []  # already had
    assert [(r.event, r.step) for r in watched.handle("step", 0, b.handle)] == [("begin", 0), ("step", 0)]
    np.testing.assert_array_equal(first[0].grids["entropy"], first[1].grids["entropy"])  # measured once a step
    later = watched.handle("evaluate", 1, b.handle)
    assert [(r.event, r.step, sorted(r.grids)) for r in later] == [("evaluate", 1, ["cls_mass", "entropy"])]
    a.close()
    b.close()


def test_a_callback_writes_only_the_maps_that_fit_and_says_so(tmp_path, monkeypatch, capsys) -> None:
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    one = 2 * model.config.num_hidden_layers * model.config.num_attention_heads * 12**2  # about one example's maps
    monkeypatch.setattr(watched_module, "MAPS_BYTES", 2 * one)
    cb = BertWatchCallback(stats=["entropy"], num_probe_examples=8, every_n_steps=0)
    trainer = toy_trainer(tmp_path, [cb], tokenizer=tok, model=model, train_size=16, max_steps=2)
    watch(trainer)
    trainer.train()
    fit = cb.watched.maps_fit
    assert 0 < fit < cb.num_maps
    acc = EventAccumulator(cb.watched.trainer_side.run_dir, size_guidance={"tensors": 0})
    acc.Reload()
    assert sorted(t for t in acc.Tags()["tensors"] if t.startswith("bertwatch/attention/")) == [
        f"bertwatch/attention/{i:02d}" for i in range(fit)
    ]
    err = capsys.readouterr().err
    assert f"attention maps: those of the first {fit} example" in err and f"of the {cb.num_maps} asked for" in err


def test_a_run_that_never_ended_is_forgotten_with_its_callbacks(tmp_path) -> None:
    import gc
    import weakref

    tok = tiny_tokenizer()
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(4, seed=5)]
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    settings = ProbeSettings(texts=texts, batch_size=4, logging_dir=str(tmp_path / "run"))
    state = T.TrainerState()
    member = OneMember(tiny_bert(tok), settings, ["entropy"], args, state, {"processing_class": tok})  # never closed
    run = weakref.ref(member.watched)
    again = OneMember(tiny_bert(tok), settings, ["cls_mass"], args, state, {"processing_class": tok})
    assert again.watched is run()  # the run's other callbacks find it while one holds it
    del member, again
    gc.collect()
    assert run() is None


def test_a_failed_run_goes_with_the_trainer_state_that_keys_it(tmp_path) -> None:
    """A run whose build failed stays, so that the run's other callbacks find it failed, and no longer than the
    Trainer's state: no registry that only grows."""
    tok = tiny_tokenizer()
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state, model, settings = T.TrainerState(), tiny_bert(tok), ProbeSettings(logging_dir=str(tmp_path / "run"))
    with pytest.raises(SetupError):  # no probe texts, dataset or eval set
        join(model, settings, args, state, {"processing_class": tok}, TrainerContext())
    failed = join(model, settings, args, state, {"processing_class": tok}, TrainerContext())
    assert failed.failed  # the second callback of the run finds it failed, without a second build
    gone = weakref.ref(failed)
    del failed, state
    gc.collect()
    assert gone() is None
