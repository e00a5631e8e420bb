"""The outlier alert on a real fine-tune: the packaged MiniLM on SST-2 at a high learning rate (1e-3) grows a layer's
feed-forward outliers past the default multiple within ten steps, and with ``on_alert="stop"`` the run saves a
checkpoint and stops there; at the demo's learning rate (3e-5) no layer moves near it. The first 20 steps of
``benchmarks/bench_outliers.py growth`` (same data, order and seed; ``docs/statistics.md``, "Which multiple", has the
80-step runs)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import transformers as T

from bertwatch.callbacks import BertWatchCallback, ProbeOptions, watch
from bertwatch.core.alerts import AlertSettings
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.data.glue import load_glue

pytestmark = pytest.mark.slow


def _sst2(tok, split: str, glue_dir, limit: int):
    from datasets import Dataset

    rows = load_glue("sst2", split, glue_dir, limit=limit)
    encoded = tok([r["text"] for r in rows], truncation=True, max_length=64)
    return Dataset.from_dict({**encoded, "label": [r["label"] for r in rows]})


def _fine_tune(lr: float, tmp_path, minilm_path, glue_dir, max_steps: int = 20):
    tok = T.AutoTokenizer.from_pretrained(minilm_path)
    T.set_seed(0)
    model = T.AutoModelForSequenceClassification.from_pretrained(minilm_path, num_labels=2)
    callback = BertWatchCallback(
        stats=["ffn_inf_norm"], every_n_steps=10, num_probe_examples=32, num_maps=0, on_alert="stop", quiet=True,
        probing=ProbeOptions(on_evaluate=False, at_end=False),
    )  # fmt: skip
    args = T.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, max_steps=max_steps, learning_rate=lr,
        lr_scheduler_type="constant", save_strategy="no", report_to="none", seed=0, use_cpu=True,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = T.Trainer(
        model=model, args=args, train_dataset=_sst2(tok, "train", glue_dir, 16 * 80),  # the benchmark's batches
        eval_dataset=_sst2(tok, "dev", glue_dir, 64), processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok), callbacks=[callback],
    )  # fmt: skip
    watch(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    ours = [str(w.message) for w in caught if issubclass(w.category, BertWatchWarning)]
    return callback, trainer, ours


def _ratios(callback) -> np.ndarray:
    """``[steps, layers]``: each layer's ffn_inf_norm over its step-0 value."""
    values = np.stack([grids["ffn_inf_norm"][:, 0] for _, grids in callback.history]).astype(np.float64)
    return values / values[0]


def test_a_high_learning_rate_raises_the_outlier_alert_and_stops(tmp_path, minilm_path, glue_dir) -> None:
    callback, trainer, warned = _fine_tune(1e-3, tmp_path, minilm_path, glue_dir)
    multiple = AlertSettings().outlier_multiple
    raised = [a for a in callback.alerting.raised if a.rule == "outlier_growth"]
    assert raised and all(a.head is None and a.since == 10 for a in raised)
    ratios = _ratios(callback)
    assert {a.layer for a in raised} == set(np.nonzero(ratios[-1] > multiple)[0].tolist())
    assert callback.alerting.stop_requested_at == 10 and trainer.state.global_step == 10
    assert (tmp_path / "out" / "checkpoint-10").is_dir()
    layer = raised[0].layer
    said = re.compile(rf"bertwatch: \d+ layers? in alert since step 10: outlier growth on (L\d, )*L{layer}\b")
    assert any(said.match(w) for w in warned), warned


def test_the_demo_learning_rate_raises_no_outlier_alert(tmp_path, minilm_path, glue_dir) -> None:
    callback, trainer, _ = _fine_tune(3e-5, tmp_path, minilm_path, glue_dir)
    assert trainer.state.global_step == 20 and [s for s, _ in callback.history] == [0, 10, 20]
    assert not [a for a in callback.alerting.raised if a.rule == "outlier_growth"]
    assert _ratios(callback).max() < 1.2  # far below the multiple
