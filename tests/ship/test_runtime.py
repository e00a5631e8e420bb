"""``bertwatch.ship.runtime``: batched, length-sorted ONNX Runtime logits come back in the examples' order and
equal one-at-a-time runs; the timing runs every variant on the same inputs and counts its work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertwatch.ship.export import export_onnx
from bertwatch.ship.runtime import encode, eval_batches, load_onnx, predict_logits, time_variants, timing_feeds
from tests.support.ship_models import lively_classifier
from tests.support.tiny_trainer import toy_texts
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    model, tokenizer = lively_classifier()
    path = export_onnx(model, tokenizer, tmp_path_factory.mktemp("runtime") / "model.onnx")
    return load_onnx(path, threads=1), tokenizer


def test_batched_logits_come_back_in_order_and_equal_single_runs(onnx_model) -> None:
    model, tokenizer = onnx_model
    examples = toy_texts(23, seed=5, pairs=True)
    batches = eval_batches(tokenizer, examples, max_length=24, batch_size=4)
    assert batches.num_examples == 23 and len(batches.feeds) == 6
    lengths = [len(np.flatnonzero(f["attention_mask"].sum(0))) for f in batches.feeds]
    assert lengths == sorted(lengths)  # sorted by length: less padding
    steps = []
    got = predict_logits(model, batches, lambda: steps.append(1))
    assert len(steps) == 6
    for i, example in enumerate(examples):
        alone = model.run(["logits"], encode(tokenizer, [example], 24))[0][0]
        assert_float32_close(got[i], alone, scale=np.abs(alone).max(), msg=f"example {i}")


def test_unsorted_batches_keep_the_set_order_and_batch_one_has_no_padding(onnx_model) -> None:
    model, tokenizer = onnx_model
    examples = toy_texts(11, seed=3, pairs=True)
    lengths = [len(encode(tokenizer, [e], 24)["input_ids"][0]) for e in examples]
    assert len(set(lengths)) > 1  # examples of several lengths: padding and sorting would show
    ordered = eval_batches(tokenizer, examples, max_length=24, batch_size=4, sort=False)
    assert [list(i) for i in ordered.indices] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert [f["input_ids"].shape[1] for f in ordered.feeds] == [max(lengths[s : s + 4]) for s in (0, 4, 8)]
    single = eval_batches(tokenizer, examples, max_length=24, batch_size=1, sort=False)
    assert [list(i) for i in single.indices] == [[i] for i in range(11)]
    assert [f["input_ids"].shape[1] for f in single.feeds] == lengths  # each at its own length
    assert all(f["attention_mask"].all() for f in single.feeds)
    alone, padded = predict_logits(model, single), predict_logits(model, ordered)
    assert_float32_close(padded, alone, scale=np.abs(alone).max(), msg="fp32: the batching changes rounding only")


def test_timing_feeds_and_medians(onnx_model, tmp_path: Path) -> None:
    model, tokenizer = onnx_model
    examples = toy_texts(5, seed=2)
    singles, batch = timing_feeds(tokenizer, examples, max_length=24, repeats=7, batch_size=32)
    assert len(singles) == 7 and all(f["input_ids"].shape[0] == 1 for f in singles)
    assert batch["input_ids"].shape[0] == 32  # the five examples cycled
    np.testing.assert_array_equal(singles[5]["input_ids"], singles[0]["input_ids"])
    runs = []
    timed = time_variants({"a": model, "b": model}, singles, batch, warmup=1, step=lambda: runs.append(1))
    assert len(runs) == 2 * 2 * (7 + 1)
    for name in ("a", "b"):
        assert timed[name]["latency_ms"] > 0 and timed[name]["batch_ms"] > 0
        assert timed[name]["throughput"] == pytest.approx(32e3 / timed[name]["batch_ms"])
    with pytest.raises(ValueError, match="empty"):
        timing_feeds(tokenizer, [], 24, 3)
