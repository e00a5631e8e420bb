"""Wrappers users bring (peft, torch.compile, DDP, sentence-transformers) and the one input-selection rule:
statistics of the model as trained, every input the tokenizer produced, or a loud error."""

from __future__ import annotations

import copy
import glob
import os

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.ablation.inputs import prepare_examples
from bertwatch.callbacks import BertWatchCallback
from bertwatch.heads.adapters import ADAPTERS
from bertwatch.heads.capture import UnsupportedModelError, capture, model_shape
from bertwatch.heads.unwrap import UnsupportedInputError, input_names, select_inputs, unwrap
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.probe_set import text_examples
from tests.support.models import OneMember
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_texts, training_args
from tests.support.tolerance import assert_float32_close


@pytest.fixture(scope="module")
def tok() -> T.PreTrainedTokenizerBase:
    return tiny_tokenizer()


def _step0(model, tok, texts, tmp_path) -> dict[str, np.ndarray]:
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state = T.TrainerState()
    monitor = sub = OneMember(
        model,
        ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run")),
        ["cls_mass", "sep_mass"],
        args,
        state,
        {"processing_class": tok},
    )
    monitor.run("begin", state)
    monitor.close()
    return sub.history[-1][1]


def _eager_masses(model, tok, texts, segments: bool = True) -> dict[str, np.ndarray]:
    """cls_mass / sep_mass by loops over eager maps, float64, each example on its own (no padding)."""
    model = copy.deepcopy(model).eval()
    if model.config.model_type not in ADAPTERS:
        model.set_attn_implementation("eager")
    per = {"cls_mass": [], "sep_mass": []}
    for t in texts:
        enc = tok(t["text"], t.get("text_pair"), return_tensors="pt")
        if not segments and "token_type_ids" not in enc:
            raise AssertionError("the tokenizer produced no segment ids")
        if not segments:
            enc.pop("token_type_ids")
        with torch.no_grad():
            attn = torch.stack(model(**enc, output_attentions=True).attentions, 1)[0].double().numpy()
        toks = tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        n = len(toks)
        for name, token in (("cls_mass", "[CLS]"), ("sep_mass", "[SEP]")):
            grid = np.zeros(attn.shape[:2])
            for l in range(attn.shape[0]):
                for h in range(attn.shape[1]):
                    grid[l, h] = sum(attn[l, h, i, j] for i in range(n) for j in range(n) if toks[j] == token) / n
            per[name].append(grid)
    return {k: np.mean(v, 0) for k, v in per.items()}


def _lora(model):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(3)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS", init_lora_weights=False
    )
    return get_peft_model(model, config)


def test_lora_with_sentence_pairs_keeps_segment_ids_and_measures_the_adapted_model(tok, tmp_path) -> None:
    base = tiny_bert(tok)
    with torch.no_grad():  # segment embeddings that matter, so dropping token_type_ids would show
        base.bert.embeddings.token_type_embeddings.weight.normal_(0, 1.0)
    peft_model = _lora(base)
    texts = toy_texts(6, seed=4, pairs=True)
    assert "token_type_ids" in input_names(peft_model)
    got = _step0(peft_model, tok, texts, tmp_path)
    merged = copy.deepcopy(peft_model).merge_and_unload()
    expected = _eager_masses(merged, tok, texts)
    for name in expected:
        assert_float32_close(got[name], expected[name], msg=name)
    without_segments = _eager_masses(merged, tok, texts, segments=False)
    assert np.abs(without_segments["cls_mass"] - got["cls_mass"]).max() > 1e-3  # the test can see a drop
    untouched = _eager_masses(tiny_bert(tok), tok, texts)
    assert np.abs(untouched["cls_mass"] - got["cls_mass"]).max() > 1e-3  # LoRA weights are in the statistics


@pytest.mark.parametrize("family", ["deberta-v2", "mpnet"])
def test_probe_pass_on_adapter_families_equals_the_eager_oracle(family: str, tmp_path) -> None:
    from tests.support.tiny_trainer import SPECIAL, WORDS

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if family == "deberta-v2" else [])
    tok = T.BertTokenizer(vocab=vocab, model_input_names=names)
    sizes = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
    if family == "deberta-v2":  # shaped like v3: relative attention both ways, buckets, shared keys
        config = T.DebertaV2Config(
            **sizes,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_buckets=16,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            type_vocab_size=2,
            initializer_range=0.3,
        )
    else:
        config = T.MPNetConfig(**sizes, initializer_range=0.3)
    torch.manual_seed(0)
    model = T.AutoModelForSequenceClassification.from_config(config)
    texts = toy_texts(5, seed=8, pairs=True)
    got = _step0(model, tok, texts, tmp_path)
    expected = _eager_masses(model, tok, texts)
    for name in expected:
        assert_float32_close(got[name], expected[name], msg=name)
    if family == "mpnet":  # a tokenizer that makes segment ids MPNet cannot take: refused at setup, not dropped
        with pytest.raises(UnsupportedInputError, match="token_type_ids.*MPNetForSequenceClassification"):
            _step0(model, tiny_tokenizer(), texts, tmp_path / "refused")


def test_compiled_model_is_unwrapped_and_keeps_every_input(tok, tmp_path) -> None:
    model = tiny_bert(tok)
    compiled = torch.compile(model)
    found = unwrap(compiled)
    assert found.model is model and found.wrappers == ("OptimizedModule",)
    assert {"input_ids", "attention_mask", "token_type_ids"} <= input_names(compiled)
    patched = tiny_bert(tok)
    patched.forward = lambda *args, **kwargs: None  # what accelerate's mixed-precision wrapping does to forward
    assert "token_type_ids" in input_names(patched)
    texts = toy_texts(4, seed=5, pairs=True)
    got = _step0(compiled, tok, texts, tmp_path)
    expected = _eager_masses(model, tok, texts)
    assert_float32_close(got["cls_mass"], expected["cls_mass"])


def test_trainer_on_a_compiled_model_measures_the_eager_oracle(tok, tmp_path) -> None:

    model = tiny_bert(tok)
    with torch.no_grad():
        model.bert.embeddings.token_type_embeddings.weight.normal_(0, 1.0)
    before = copy.deepcopy(model)
    callback = strict(BertWatchCallback, stats=["cls_mass", "sep_mass"], every_n_steps=1, num_probe_examples=4)
    trainer = T.Trainer(
        model=torch.compile(model, backend="eager"),
        args=training_args(str(tmp_path), max_steps=1, remove_unused_columns=False),  # the Trainer's own filter
        train_dataset=toy_dataset(tok, 4, 0, pairs=True).remove_columns("text"),  # drops every column of a compiled
        eval_dataset=toy_dataset(tok, 4, 1, pairs=True).remove_columns("text"),  # model (it sees *args, **kwargs)
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[callback],
    )
    callback.set_trainer(trainer)  # the probe set comes from the eval set, as with bertwatch.watch(trainer)
    trainer.train()
    step, grids = callback.history[0]
    expected = _eager_masses(before, tok, toy_texts(4, seed=1, pairs=True))
    assert step == 0
    for name in expected:
        assert_float32_close(grids[name], expected[name], msg=name)


def test_accelerate_mixed_precision_forward_is_verified_and_captured(tok) -> None:
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    model = tiny_bert(tok, heads=2, seed=4).eval()  # a configuration no other test verified
    batch = dict(tok(["good movie , fun"], ["great music"], return_tensors="pt"))
    with torch.no_grad():
        model.set_attn_implementation("eager")
        reference = torch.stack(model(**batch, output_attentions=True).attentions, 1)
        model.set_attn_implementation("sdpa")
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    model.forward = MethodType(convert_outputs_to_fp32(autocast(type(model).forward)), model)  # accelerate's bf16
    assert unwrap(model).model is model and "token_type_ids" in input_names(model)
    assert model_shape(model) == (2, 2)
    with torch.no_grad(), capture(model) as cap:
        model(**batch)
    assert cap.attentions.dtype == torch.bfloat16
    torch.testing.assert_close(cap.attentions.float(), reference, atol=2e-2, rtol=0)


def test_data_parallel_and_nested_wrappers_unwrap_to_the_same_parameters(tok) -> None:
    model = tiny_bert(tok)
    wrapped = torch.nn.DataParallel(_lora(model))
    found = unwrap(wrapped)
    assert found.model is model and found.wrappers == ("DataParallel", "PeftModelForSequenceClassification")
    assert model_shape(wrapped) == (2, 4)
    batch = tok(["good movie ."], ["fun"], return_tensors="pt")
    with capture(wrapped) as cap:
        found.model(**batch)
    assert cap.attentions.shape == (1, 2, 4, 7, 7)


def test_unknown_wrapper_and_refused_inputs_say_what_to_do(tok) -> None:
    class MyWrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    with pytest.raises(UnsupportedModelError, match="MyWrapper.*transformers model inside it"):
        unwrap(MyWrapper(tiny_bert(tok)))
    distil = T.DistilBertForSequenceClassification(
        T.DistilBertConfig(vocab_size=40, dim=16, n_layers=1, n_heads=2, hidden_dim=8, max_position_embeddings=32)
    )
    batch = dict(tok(["good movie"], ["fun"], return_tensors="pt"))
    with pytest.raises(UnsupportedInputError, match="token_type_ids.*DistilBertForSequenceClassification"):
        select_inputs(distil, batch)
    assert set(select_inputs(tiny_bert(tok), {**batch, "labels": torch.tensor([1])})) == set(batch)
    with pytest.raises(UnsupportedInputError, match="token_type_ids"):
        prepare_examples(distil, [{"sentence1": "good", "sentence2": "fun", "label": 1}], tok, 16, False)
    features, _, _ = prepare_examples(
        _lora(tiny_bert(tok)), [{"sentence1": "good", "sentence2": "fun", "label": 1}], tok, 16, False
    )
    assert features[0]["token_type_ids"] == [0, 0, 0, 1, 1]


def test_sentence_transformer_trainer_writes_bertwatch_grids(tok, tmp_path) -> None:
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
        models,
    )
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = tmp_path / "tiny"
    tiny_bert(tok).bert.save_pretrained(path)
    tok.save_pretrained(path)
    encoder = models.Transformer(str(path), max_seq_length=32)
    st = SentenceTransformer(modules=[encoder, models.Pooling(encoder.get_embedding_dimension())])
    found = unwrap(st)
    assert found.model is encoder.auto_model and found.tokenizer is not None
    rows = toy_texts(8, seed=6, pairs=True)
    data = Dataset.from_dict(
        {
            "sentence1": [r["text"] for r in rows],
            "sentence2": [r["text_pair"] for r in rows],
            "score": [float(r["label"]) for r in rows],
        }
    )
    callback = strict(BertWatchCallback, every_n_steps=1, num_probe_examples=6)
    before = copy.deepcopy(encoder.auto_model)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        learning_rate=0.0,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=st,
        args=args,
        train_dataset=data,
        eval_dataset=data,
        loss=losses.CosineSimilarityLoss(st),
        callbacks=[callback],
    )
    trainer.train()
    files = glob.glob(str(tmp_path / "out" / "runs" / "*" / "*.bertwatch"))
    assert len(files) == 1
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    steps = [e.step for e in acc.Tensors("bertwatch/heads/cls_mass")]
    assert steps[0] == 0 and steps[-1] == 2
    assert [s for s, _ in callback.history][:3] == [0, 1, 2]
    texts = [{"text": t} for t in text_examples(data, 6, 0)]
    expected = _eager_masses(before, tok, texts)
    assert_float32_close(callback.history[0][1]["cls_mass"], expected["cls_mass"])
    for _, grids in callback.history:  # learning rate 0: the model, so its attention, never changes
        np.testing.assert_allclose(grids["drift_cosine"], 1.0, atol=1e-4)


def test_sharded_wrappers_are_refused_with_what_to_do() -> None:
    sharded = type("FullyShardedDataParallel", (torch.nn.Module,), {})()
    with pytest.raises(UnsupportedModelError, match="FullyShardedDataParallel.*model the Trainer was built with"):
        unwrap(sharded)
