"""The probe set (probe/probe_set.py) where a user's setup departs from the usual: a tokenizer without a pad
token is measured exactly (each example against the float64 oracle of it alone)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.callbacks import BertWatchCallback, ProbeOptions
from bertwatch.heads.maps.stats import STAT_NAMES
from bertwatch.probe.probe_set import build_probe_set
from tests.support.alone_oracle import alone_grids
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_texts, training_args
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast


def _padless() -> T.PreTrainedTokenizerBase:
    tok = tiny_tokenizer()
    tok.pad_token = None
    assert tok.pad_token_id is None
    return tok


def _collate_with_zeros(features):
    """A user's own collator for a tokenizer without a pad token: right padding with id 0."""
    width = max(len(f["input_ids"]) for f in features)
    batch = {
        key: torch.tensor([list(f[key]) + [0] * (width - len(f[key])) for f in features])
        for key in ("input_ids", "token_type_ids", "attention_mask")
    }
    batch["labels"] = torch.tensor([f["label"] for f in features])
    return batch


def test_probe_texts_are_padded_without_the_tokenizer_when_it_has_no_pad_token() -> None:
    tok = _padless()
    texts = [t["text"] for t in toy_texts(7, seed=2)]
    probe = build_probe_set(tok, texts=texts, batch_size=3)
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    assert [len(t) for t in probe.tokens] == lengths
    for batch, roles in zip(probe.batches, probe.roles):
        real = roles.real.bool()
        assert torch.equal(batch["attention_mask"].bool(), real)
        assert (batch["input_ids"][~real] == 0).all()  # heads.layout.pad_token_id: no pad token, no config: 0


def test_a_tokenizer_without_a_pad_token_is_measured_as_each_example_alone(tmp_path) -> None:
    tok = _padless()
    model = tiny_bert(tiny_tokenizer())
    initial = copy.deepcopy(model)
    examples = toy_texts(6, seed=3)
    train = toy_dataset(tiny_tokenizer(), 16, 0).remove_columns(["text"])
    trainer = T.Trainer(
        model=model,
        args=training_args(str(tmp_path / "out"), max_steps=2, remove_unused_columns=False),
        train_dataset=train,
        processing_class=tok,
        data_collator=_collate_with_zeros,
    )
    callback = BertWatchCallback(
        stats=STAT_NAMES, probe_texts=examples, every_n_steps=0, probing=ProbeOptions(at_end=False)
    )
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.train()
    step, got = callback.history[0]
    assert step == 0 and not callback.disabled
    encodings = [dict(tok(e["text"])) for e in examples]
    want = alone_grids(initial, tok, encodings)
    for name in STAT_NAMES:
        value = np.asarray(got[name], dtype=np.float64)
        assert_float32_close(value, want[name], scale=float(np.nanmax(np.abs(want[name]), initial=1.0)), msg=name)
