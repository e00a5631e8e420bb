"""The callbacks inside real ``Trainer`` runs: bit-identical training, the event-file layout, the shared pass,
robustness (errors, unsupported models, empty probes, NaN, mixed precision, accumulation, resume) and a MiniLM
fine-tune on SST-2 read back from its event files."""

from __future__ import annotations

import glob
import os
import warnings

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

import bertwatch.probe.measurements as measurements_module
import bertwatch.probe.reference as reference_module
from bertwatch.callbacks import (
    AblationOptions,
    AttentionDriftCallback,
    BertWatchCallback,
    BertWatchWarning,
    EntropyCallback,
    ExpertOptions,
    GradientImportanceCallback,
    ProbeOptions,
    SetupError,
    watch,
)
from bertwatch.core.stat_names import OUTLIER_NAMES
from bertwatch.heads.capture import UnsupportedModelError
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME
from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES
from bertwatch.heads.norms.norm_based import NORM_NAMES
from bertwatch.heads.stability.spectral_norms import STABILITY_NAMES
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_trainer, training_args


def _train(out, callbacks, *, model=None, resume=None, train_size=40, **overrides):
    """A tiny BERT trained for 6 steps (evaluation at step 3 and 6) with ``callbacks`` attached by
    ``bertwatch.watch``; returns (trainer, model, per-step losses)."""
    tok = tiny_tokenizer()
    model = model if model is not None else tiny_bert(tok)
    values = dict(eval_strategy="steps", eval_steps=3, logging_steps=1)
    values.update(overrides)
    trainer = toy_trainer(out, callbacks, tokenizer=tok, model=model, train_size=train_size, eval_size=20, **values)
    if callbacks:
        watch(trainer)
    trainer.train(resume_from_checkpoint=resume)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, model, losses


def _events(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return acc


def _grids(acc, stat):
    return {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors(f"bertwatch/heads/{stat}")}


def _same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ------------------------------------------------------------------------------------------------ bit identity


@pytest.mark.parametrize(
    "overrides",
    [{}, {"gradient_accumulation_steps": 2}, {"bf16": True}, {"keeping": "model"}],
    ids=["plain", "grad-accum", "bf16", "reference-kept-as-a-frozen-model"],
)
def test_training_is_bit_identical_with_and_without_bertwatch(tmp_path, monkeypatch, overrides) -> None:
    overrides = dict(overrides)
    if overrides.pop("keeping", None) == "model":
        monkeypatch.setattr(reference_module, "_keeps_model", lambda *_: True)
    _, plain, plain_losses = _train(tmp_path / "a", [], **overrides)
    everything = strict(
        BertWatchCallback,
        every_n_steps=1,
        num_probe_examples=8,
        expert=ExpertOptions(maps_every_n_steps=2, integrated_gradients=True, ig_steps=3),
        probing=ProbeOptions(batch_size=3),
    )
    _, watched, watched_losses = _train(tmp_path / "b", [everything], **overrides)
    assert [s for s, _ in everything.history] == [0, 1, 2, 3, 4, 5, 6]
    every = STAT_NAMES + NORM_NAMES + DRIFT_NAMES + GRADIENT_NAMES + STABILITY_NAMES + OUTLIER_NAMES
    assert set(everything.history[-1][1]) == set(every) | {IG_NAME}
    assert len(plain_losses) == len(watched_losses) == 6
    assert plain_losses == watched_losses
    assert _same_weights(plain, watched)
    if overrides.get("bf16"):
        assert all(np.isfinite(g).all() for g in (everything.latest["entropy"], everything.latest["drift_js"]))


# ------------------------------------------------------------------------------------------------ event files


def test_event_files_hold_every_statistic_maps_and_layer_scalars_in_the_trainers_run(tmp_path) -> None:
    cb = strict(BertWatchCallback, every_n_steps=2, num_probe_examples=8, num_maps=2)
    _train(tmp_path, [cb], report_to="tensorboard")
    runs = glob.glob(str(tmp_path / "runs" / "*"))
    assert len(runs) == 1, "bertwatch must write into the Trainer's own TensorBoard run"
    files = sorted(os.listdir(runs[0]))
    assert len(files) == 2 and sum(f.endswith(".bertwatch") for f in files) == 1
    acc = _events(runs[0])
    assert "train/loss" in acc.Tags()["scalars"]
    for stat in STAT_NAMES + NORM_NAMES + DRIFT_NAMES + GRADIENT_NAMES:
        grids = _grids(acc, stat)
        assert sorted(grids) == [0, 2, 3, 4, 6], stat  # step 0, every 2, evaluation at 3 (and 6), the end
        assert all(g.shape == (2, 4) and g.dtype == np.float32 for g in grids.values())
        meta = acc.SummaryMetadata(f"bertwatch/heads/{stat}")
        assert meta.plugin_data.plugin_name == "bertwatch" and meta.data_class == summary_pb2.DATA_CLASS_TENSOR
    drift = _grids(acc, "drift_cosine")
    np.testing.assert_allclose(drift[0], 1.0, atol=1e-3)
    for step, measured in cb.history:
        np.testing.assert_array_equal(_grids(acc, "entropy")[step], measured["entropy"])
    scalars = acc.Tags()["scalars"]
    assert {f"bertwatch_layers/entropy/layer_{l}" for l in range(2)} <= set(scalars)
    values = [e.value for e in acc.Scalars("bertwatch_layers/entropy/layer_1")]
    np.testing.assert_allclose(values[0], np.nanmean(_grids(acc, "entropy")[0][1]), rtol=1e-6)
    maps = acc.Tensors("bertwatch/attention/01")
    assert [e.step for e in maps] == [0, 6] and "bertwatch/attention/02" not in acc.Tags()["tensors"]
    header, blob = tensor_util.make_ndarray(maps[0].tensor_proto)
    import json

    info = json.loads(header)
    length = len(info["tokens"])
    arr = np.frombuffer(blob, dtype="<f2").reshape(2, 4, length, length)
    np.testing.assert_allclose(arr.astype(np.float32).sum(-1), 1.0, atol=1e-2)
    assert info["tokens"][0] == "[CLS]" and info["tokens"][-1] == "[SEP]"
    shares = {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors("bertwatch/series/pattern_classes")}
    assert sorted(shares) == [0, 2, 3, 4, 6] and all(abs(v.sum() - 1.0) < 1e-6 for v in shares.values())
    assert "bertwatch_series/pattern_classes/vertical" in scalars


def test_writes_without_tensorboard_reporting_to_the_default_run_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    cb = strict(EntropyCallback, every_n_steps=3, num_probe_examples=4)
    _train(tmp_path, [cb], report_to="none")
    files = glob.glob(str(tmp_path / "runs" / "*" / "*"))
    assert len(files) == 1 and files[0].endswith(".bertwatch")
    assert sorted(_grids(_events(os.path.dirname(files[0])), "entropy")) == [0, 3, 6]
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "mine"))
    _train(tmp_path / "again", [strict(EntropyCallback, every_n_steps=3, num_probe_examples=4)])
    assert len(glob.glob(str(tmp_path / "mine" / "*.bertwatch"))) == 1


# ------------------------------------------------------------------------------------------------ sharing


def test_several_callbacks_share_one_probe_pass(tmp_path) -> None:
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    forwards = []
    model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(module.training), with_kwargs=True)
    drift = strict(AttentionDriftCallback, every_n_steps=2, num_probe_examples=8)
    entropy = strict(EntropyCallback, every_n_steps=2, num_probe_examples=8)
    _train(tmp_path, [drift, entropy], model=model, eval_strategy="no", max_steps=2)
    probe_forwards = [training for training in forwards if not training]
    assert len(probe_forwards) == 2  # one probe pass at step 0 (also the reference) and one at step 2
    assert drift.watched is entropy.watched
    assert set(drift.latest) == {"drift_cosine", "drift_js"} and set(entropy.latest) == {"entropy", "cls_entropy"}
    assert len(glob.glob(str(tmp_path / "runs" / "*" / "*.bertwatch"))) == 1


# ------------------------------------------------------------------------------------------------ robustness


def test_an_error_inside_bertwatch_is_one_warning_and_training_goes_on(tmp_path, monkeypatch) -> None:
    _, plain, plain_losses = _train(tmp_path / "a", [], eval_strategy="no")
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("statistics exploded")
        return measurements_module.compute_stats.__wrapped__(*args, **kwargs)

    broken.__wrapped__ = measurements_module.compute_stats
    monkeypatch.setattr(measurements_module, "compute_stats", broken)
    a = EntropyCallback(every_n_steps=2, num_probe_examples=4)
    b = AttentionDriftCallback(every_n_steps=2, num_probe_examples=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, watched, losses = _train(tmp_path / "b", [a, b], eval_strategy="no")
    ours = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    assert len(ours) == 1 and "statistics exploded" in str(ours[0].message)
    assert a.disabled and b.disabled and len(calls) == 2
    assert [s for s, _ in a.history] == [0] and losses == plain_losses and _same_weights(plain, watched)

    def broken_collator(features):
        raise RuntimeError("collator broke")

    a = EntropyCallback(probing=ProbeOptions(data_collator=broken_collator))
    b = AttentionDriftCallback(probing=ProbeOptions(data_collator=broken_collator))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, watched, losses = _train(tmp_path / "d", [a, b], eval_strategy="no")
    ours = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    assert len(ours) == 1 and "stopped after an error in on_train_begin (RuntimeError: collator broke)" in str(
        ours[0].message
    )
    assert a.disabled and b.disabled and a.history == [] and losses == plain_losses

    strict_cb = strict(EntropyCallback, every_n_steps=2, num_probe_examples=4)
    with pytest.raises(RuntimeError, match="statistics exploded"):
        calls.clear()
        _train(tmp_path / "c", [strict_cb], eval_strategy="no")


def test_unsupported_model_and_empty_probe_fail_at_train_begin(tmp_path) -> None:
    tok = tiny_tokenizer()
    config = T.GPT2Config(
        vocab_size=len(tok), n_embd=32, n_layer=2, n_head=4, n_positions=64, num_labels=2, pad_token_id=tok.pad_token_id
    )
    torch.manual_seed(0)
    gpt2 = T.GPT2ForSequenceClassification(config)
    steps = []

    class Spy(T.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    with pytest.raises(UnsupportedModelError, match="gpt2"):
        _train(tmp_path / "a", [BertWatchCallback(), Spy()], model=gpt2)
    with pytest.raises(ValueError, match="probe_texts must hold at least one text"):  # refused when made
        BertWatchCallback(probe_texts=[])
    with pytest.raises(SetupError, match="need labels"):
        _train(tmp_path / "c", [GradientImportanceCallback(probe_texts=["good movie ."]), Spy()])
    assert steps == []


def test_nan_statistics_are_logged_as_nan(tmp_path) -> None:
    texts = [{"text": "good movie", "label": 1}, {"text": "bad plot was dull", "label": 0}]  # no "." or ","
    cb = strict(BertWatchCallback, probe_texts=texts, every_n_steps=3, num_maps=0)
    _train(tmp_path, [cb], eval_strategy="no")
    acc = _events(glob.glob(str(tmp_path / "runs" / "*"))[0])
    assert np.isnan(_grids(acc, "attn_grad_punct")[3]).all()
    assert np.isnan(_grids(acc, "intra_segment_mass")[0]).all()  # single sentences have no second segment
    assert np.isfinite(_grids(acc, "attn_grad_sep")[3]).all()
    assert np.isnan([e.value for e in acc.Scalars("bertwatch_layers/attn_grad_punct/layer_0")]).all()


def test_probe_texts_without_labels_skip_gradient_statistics_by_default(tmp_path) -> None:
    cb = strict(BertWatchCallback, probe_texts=["good movie .", "bad , dull plot"], every_n_steps=3)
    with pytest.warns(BertWatchWarning, match="no labels"):
        _train(tmp_path, [cb], eval_strategy="no")
    assert "head_importance" not in cb.latest and "entropy" in cb.latest


@pytest.mark.parametrize("keeping", ["maps", "model"])
def test_resumed_run_measures_drift_from_the_pretrained_reference(tmp_path, monkeypatch, keeping) -> None:
    """The reference is cached as it is kept (its maps, or the frozen copy's weights) and a resumed run compares
    with it, not with its checkpoint."""
    monkeypatch.setattr(reference_module, "_keeps_model", lambda *_: keeping == "model")
    first = strict(AttentionDriftCallback, every_n_steps=2, num_probe_examples=8)
    _train(tmp_path, [first], eval_strategy="no", save_strategy="steps", save_steps=2, learning_rate=3e-2)
    assert (tmp_path / "bertwatch" / "reference.pt").is_file()
    resumed = strict(AttentionDriftCallback, every_n_steps=2, num_probe_examples=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertWatchWarning)
        _train(tmp_path, [resumed], eval_strategy="no", learning_rate=3e-2, resume=str(tmp_path / "checkpoint-2"))
    assert "cache" in resumed.watched.context.reference.source
    kept = first.watched.context.reference
    assert (kept.cache.load_model(*kept.shape) is not None) == (keeping == "model")
    assert (kept.cache.load(kept.probe.fingerprint, *kept.shape) is not None) == (keeping == "maps")
    assert [s for s, _ in resumed.history] == [4, 6]
    original = dict(first.history)
    assert 1 - original[2]["drift_cosine"].mean() > 1e-3  # the checkpoint differs clearly from the reference
    for step, grids in resumed.history:
        np.testing.assert_allclose(1 - grids["drift_cosine"], 1 - original[step]["drift_cosine"], rtol=1e-3)
        np.testing.assert_allclose(grids["drift_js"], original[step]["drift_js"], rtol=1e-3)

    (tmp_path / "bertwatch" / "reference.pt").unlink()
    uncached = strict(AttentionDriftCallback, every_n_steps=2, num_probe_examples=8)
    with pytest.warns(BertWatchWarning, match="resuming without a reference cache"):
        _train(tmp_path, [uncached], eval_strategy="no", learning_rate=3e-2, resume=str(tmp_path / "checkpoint-2"))
    assert "resumed at step 2" in uncached.watched.context.reference.source
    step4 = dict(uncached.history)[4]["drift_cosine"]
    assert not np.allclose(1 - step4, 1 - original[4]["drift_cosine"], rtol=1e-2)  # drift from step 2, not 0


def test_reference_model_can_be_named(tmp_path, monkeypatch) -> None:
    """Its maps kept, or the model itself kept and run unit by unit: the same drift (to float16 rounding)."""
    tok = tiny_tokenizer()
    other = tiny_bert(tok, seed=5)
    with torch.no_grad():
        for layer in other.bert.encoder.layer:
            layer.attention.self.query.weight.mul_(30)  # peaked attention, unlike the near-uniform trained model
    histories = {}
    for keeping in ("maps", "model"):
        monkeypatch.setattr(reference_module, "_keeps_model", lambda *_, k=keeping: k == "model")
        cb = strict(
            AttentionDriftCallback, every_n_steps=3, num_probe_examples=8, probing=ProbeOptions(reference_model=other)
        )
        _train(tmp_path / keeping, [cb], eval_strategy="no")
        assert cb.history[0][0] == 0 and cb.history[0][1]["drift_cosine"].mean() < 0.999
        histories[keeping] = cb.history
    assert [s for s, _ in histories["maps"]] == [s for s, _ in histories["model"]]
    for (_, maps), (_, model) in zip(histories["maps"], histories["model"]):
        for name in ("drift_cosine", "drift_js"):
            np.testing.assert_allclose(model[name], maps[name], rtol=2e-3, atol=1e-4, err_msg=name)


def test_ablate_on_end_runs_the_ablation_sweep_into_the_same_run(tmp_path, capsys) -> None:
    cb = strict(
        BertWatchCallback,
        every_n_steps=3,
        num_probe_examples=4,
        ablate_on_end=True,
        ablation=AblationOptions(mode="zero", kwargs={"n_resamples": 50, "progress": False}),
    )
    _train(tmp_path, [cb], eval_strategy="no")
    assert cb.ablation_result is not None
    assert (tmp_path / "bertwatch_ablation" / "ablation.json").is_file()
    # one report, where `bertwatch report OUT` writes it: the training statistics and the ablation, named at the end
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="stat-entropy"' in page and "Mode <code>zero</code>" in page
    assert f"report: {tmp_path / 'report.html'}" in capsys.readouterr().err
    files = glob.glob(str(tmp_path / "runs" / "*" / "*"))
    assert len(files) == 1
    tags = _events(os.path.dirname(files[0])).Tags()["tensors"]
    assert {"bertwatch/ablation/zero/heads", "bertwatch/ablation/zero/layers", "bertwatch/heads/entropy"} <= set(tags)
    with pytest.raises(SetupError, match="eval_dataset"), pytest.warns(BertWatchWarning, match="no eval_dataset"):
        tok = tiny_tokenizer()
        trainer = T.Trainer(
            model=tiny_bert(tok),
            args=training_args(str(tmp_path / "x")),
            processing_class=tok,
            train_dataset=toy_dataset(tok, 20, 0),
            data_collator=T.DataCollatorWithPadding(tok),
            callbacks=[BertWatchCallback(ablate_on_end=True)],
        )
        watch(trainer)
        trainer.train()


# ------------------------------------------------------------------------------------------------ MiniLM


@pytest.mark.slow
def test_minilm_sst2_fine_tune_writes_every_statistic(tmp_path, minilm_path, glue_dir) -> None:
    from datasets import Dataset

    from bertwatch.data.glue import load_glue

    tok = T.AutoTokenizer.from_pretrained(minilm_path)

    def encode(rows):
        enc = tok([r["text"] for r in rows], truncation=True, max_length=64)
        return Dataset.from_dict({**enc, "label": [r["label"] for r in rows]})

    train = encode(load_glue("sst2", "train", glue_dir, limit=64))
    dev = encode(load_glue("sst2", "dev", glue_dir, limit=64))

    def fine_tune(out, callbacks):
        T.set_seed(0)  # the new classifier head is drawn from the global RNG
        model = T.AutoModelForSequenceClassification.from_pretrained(minilm_path, num_labels=2)
        args = T.TrainingArguments(
            output_dir=str(out),
            per_device_train_batch_size=8,
            max_steps=8,
            learning_rate=3e-4,
            logging_steps=1,
            save_strategy="no",
            report_to="tensorboard",
            seed=0,
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = T.Trainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=dev,
            processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok),
            callbacks=callbacks,
        )
        if callbacks:
            watch(trainer)
        trainer.train()
        return model, [h["loss"] for h in trainer.state.log_history if "loss" in h]

    cb = BertWatchCallback(
        every_n_steps=4, num_probe_examples=16, expert=ExpertOptions(integrated_gradients=True, ig_steps=4)
    )
    watched, watched_losses = fine_tune(tmp_path / "watched", [cb])
    acc = _events(glob.glob(str(tmp_path / "watched" / "runs" / "*"))[0])
    for stat in STAT_NAMES + DRIFT_NAMES + GRADIENT_NAMES + (IG_NAME,):
        grids = _grids(acc, stat)
        assert sorted(grids) == [0, 4, 8], stat
        assert all(g.shape == (6, 12) for g in grids.values()), stat
    drift = _grids(acc, "drift_cosine")
    assert np.abs(drift[0] - 1.0).max() < 1e-3
    assert drift[8].mean() < 0.995 and drift[8].min() < 0.98
    assert _grids(acc, "drift_js")[8].mean() > 10 * max(_grids(acc, "drift_js")[0].mean(), 1e-6)
    assert len(acc.Tensors("bertwatch/attention/03")) == 2
    assert np.all(_grids(acc, "head_importance")[4] > 0)

    plain, plain_losses = fine_tune(tmp_path / "plain", [])
    assert plain_losses == watched_losses and _same_weights(plain, watched)
