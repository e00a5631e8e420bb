"""Batch invariance, generated: whatever the padding side, batch size, order and neighbours, every statistic
bertwatch reports equals the float64 loop over each example ALONE (unpadded), averaged as bertwatch averages.

The neighbourhood is drawn by hypothesis (profiles in tests/conftest.py; a failure prints its replay): texts and
pairs from one token to past the measured length, punctuation and special tokens in odd places, repeated [SEP]s,
across interface families and the adapter families, float32 and bf16 autocast.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertwatch.analysis.text_stats import analyze, encode_texts  # noqa: E402
from bertwatch.heads.capture import capture  # noqa: E402
from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES, aggregate, compute_stats  # noqa: E402
from bertwatch.heads.norms.norm_based import NORM_NAMES, head_grams, norm_stats  # noqa: E402
from bertwatch.probe.probe_set import build_probe_set  # noqa: E402
from tests.heads.test_capture_support import tiny_encoder  # noqa: E402
from tests.support.alone_oracle import alone_grids  # noqa: E402
from tests.support.property import ORDERS, PADDING_SIDES  # noqa: E402
from tests.support.strict import strict
from tests.support.tiny_trainer import WORDS, tiny_tokenizer  # noqa: E402

FAMILIES = ("bert", "roberta", "distilbert", "albert", "electra", "modernbert", "deberta-v2", "mpnet")
NORM_FAMILIES = ("bert", "roberta", "distilbert", "electra", "deberta-v2", "mpnet")
NO_SEGMENTS = ("distilbert", "mpnet", "modernbert")
#: Tokens drawn into texts: words, punctuation and special tokens anywhere (so repeated [SEP]s and [CLS]s too).
PIECES = list(WORDS[:12]) + [".", ",", ".", "[SEP]", "[CLS]", "[MASK]", "[UNK]"]
MAX_LENGTH = 40  # measured length (tiny models have 64 positions; RoBERTa numbers from pad id + 1)
EPS32, EPS_BF16 = float(torch.finfo(torch.float32).eps), float(torch.finfo(torch.bfloat16).eps)

_MODELS: dict[tuple[str, int], torch.nn.Module] = {}


def model_of(family: str, seed: int = 0) -> torch.nn.Module:
    if (family, seed) not in _MODELS:
        _MODELS[family, seed] = tiny_encoder(family, seed)
    return _MODELS[family, seed]


def tokenizer_for(family: str, side: str):
    tok = tiny_tokenizer()
    tok.padding_side = side
    if family in NO_SEGMENTS:
        tok.model_input_names = ["input_ids", "attention_mask"]
    return tok


text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=MAX_LENGTH + 8).map(" ".join)
example = st.one_of(text, st.tuples(text, text))
examples = st.lists(example, min_size=1, max_size=6)


def assert_close(got: dict, want: dict, names, eps: float, scale: float) -> None:
    """|got - want| <= scale * eps * (1 + |want|): float rounding, relative away from zero, absolute near it."""
    for name in names:
        g, w = np.asarray(got[name], dtype=np.float64), want[name]
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"NaN pattern of {name}")
        bound = scale * eps * (1.0 + np.abs(np.nan_to_num(w)))
        err = np.abs(np.nan_to_num(g) - np.nan_to_num(w))
        assert (err <= bound).all(), f"{name}: max error {err.max():.3g} above {scale} eps (1 + |value|)"


def _pairs(items):
    return [(t, None) if isinstance(t, str) else t for t in items]


@pytest.mark.fast
@given(
    family=st.sampled_from(FAMILIES),
    items=examples,
    side=PADDING_SIDES,
    batch_size=st.integers(1, 4),
    order=ORDERS,
)
def test_analyze_is_each_example_alone(family, items, side, batch_size, order):
    """``bertwatch analyze`` (every weight-based statistic and drift vs a reference model) on a batch equals
    each example alone, in float64, whatever the padding side, the batch size and the order."""
    items = list(items)
    order.shuffle(items)
    tok, model, ref = tokenizer_for(family, side), model_of(family), model_of(family, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = analyze(
            model,
            items,
            tokenizer=tok,
            reference=ref,
            batch_size=batch_size,
            max_length=MAX_LENGTH,
            progress=False,
            figures=False,
        )
    encodings, _ = encode_texts(tok, _pairs(items), result["max_length"])
    want = alone_grids(model, tok, encodings, reference=ref)
    assert_close(result["stats"], want, STAT_NAMES + DRIFT_NAMES, EPS32, 2**8)


def probe_grids(model, tok, items, batch_size, autocast, names):
    """The callback's path: the probe set (tokenizer pad, then bertwatch's layout) through capture, the weight and
    norm statistics per example, averaged as the monitor does."""
    probe = build_probe_set(tok, texts=items, batch_size=batch_size, max_length=MAX_LENGTH)
    grams = head_grams(model)
    per: dict[str, list[torch.Tensor]] = {}
    guard = torch.autocast("cpu", dtype=autocast) if autocast is not None else torch.autocast("cpu", enabled=False)
    for batch, roles in zip(probe.batches, probe.roles):
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad(), guard, capture(model, record_values=True) as cap:
            model(**inputs)
        found = compute_stats(cap.attentions, roles, STAT_NAMES)
        found.update(norm_stats(cap.attentions, cap.values, grams, roles, NORM_NAMES, cap.contexts))
        for name, value in found.items():
            per.setdefault(name, []).append(value)
    grids = aggregate({n: torch.cat(v) for n, v in per.items()})
    return {n: g.double().numpy() for n, g in grids.items()}, probe


@pytest.mark.fast
@given(
    family=st.sampled_from(NORM_FAMILIES),
    items=examples,
    side=PADDING_SIDES,
    batch_size=st.integers(1, 4),
    precision=st.sampled_from(["float32", "bf16"]),
)
def test_probe_set_is_each_example_alone(family, items, side, batch_size, precision):
    """The callback's probe pass (weight-based and norm-based statistics) in float32 and under bf16 autocast
    equals each example alone under the same precision; bf16's bound is its eps times the depth of the model."""
    tok, model = tokenizer_for(family, side), model_of(family)
    autocast = torch.bfloat16 if precision == "bf16" else None
    got, probe = probe_grids(model, tok, list(items), batch_size, autocast, STAT_NAMES + NORM_NAMES)
    encodings = [{"input_ids": ids} for ids in _probe_ids(probe)]
    for enc, segments in zip(encodings, probe.segments):
        if segments is not None:
            enc["token_type_ids"] = segments
    want = alone_grids(model, tok, encodings, autocast=autocast, norms=True)
    layers = model.config.num_hidden_layers
    eps, scale = (EPS32, 2**8) if autocast is None else (EPS_BF16, 8 * layers)
    assert_close(got, want, STAT_NAMES + NORM_NAMES, eps, scale)


def _probe_ids(probe):
    out = []
    for batch, roles in zip(probe.batches, probe.roles):
        for row in range(batch["input_ids"].shape[0]):
            out.append(batch["input_ids"][row][roles.real[row]].tolist())
    return out


# ------------------------------------------------------------------------------------------------ named cases


LEFT_TEXTS = [
    "Short one.",
    ("Is this a question?", "Yes, it is; and the answer runs on for a while, longer than the rest."),
    "Attention heads, it seems, often look at punctuation and at [SEP].",
    "A",
]


@pytest.mark.slow
def test_analyze_with_a_left_padding_tokenizer_is_each_example_alone(minilm_path):
    """The issue's case: MiniLM with ``padding_side = "left"`` in ``bertwatch analyze``."""
    from bertwatch.heads.loading import load_model

    model, tok = load_model(minilm_path, "cpu")
    tok.padding_side = "left"
    result = analyze(model, LEFT_TEXTS, tokenizer=tok, batch_size=4, progress=False, figures=False)
    encodings, _ = encode_texts(tok, _pairs(LEFT_TEXTS), result["max_length"])
    want = alone_grids(model, tok, encodings)
    assert_close(result["stats"], want, STAT_NAMES, EPS32, 2**8)


def test_step_zero_cls_mass_of_a_trainer_run_with_left_padding_is_each_example_alone(tmp_path):
    """A real Trainer run, a left-padding tokenizer and its own DataCollatorWithPadding: the callback's step-0
    statistics (history and event file) equal each probe example alone, in float64."""
    import copy
    import glob

    import transformers as T
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    from bertwatch.callbacks import BertWatchCallback, watch
    from tests.support.tiny_trainer import tiny_bert, toy_dataset, training_args

    tok = tiny_tokenizer()
    tok.padding_side = "left"
    model = tiny_bert(tok)
    initial = copy.deepcopy(model)
    evaluation = toy_dataset(tok, 12, 1, pairs=True)
    cb = strict(BertWatchCallback, every_n_steps=100, num_probe_examples=12, num_maps=0)
    trainer = T.Trainer(
        model=model,
        args=training_args(str(tmp_path), max_steps=1, report_to="tensorboard"),
        train_dataset=toy_dataset(tok, 8, 0),
        eval_dataset=evaluation,
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=[cb],
    )
    watch(trainer)
    trainer.train()
    step, grids = cb.history[0]
    assert step == 0
    encodings = [{"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"]} for r in evaluation]
    assert len({len(e["input_ids"]) for e in encodings}) > 3, "the probe batch must need padding"
    want = alone_grids(initial.bert, tok, encodings)
    assert_close(grids, want, STAT_NAMES, EPS32, 2**8)
    acc = EventAccumulator(glob.glob(str(tmp_path / "runs" / "*"))[0], size_guidance={"tensors": 0})
    acc.Reload()
    logged = {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors("bertwatch/heads/cls_mass")}
    assert_close({"cls_mass": logged[0]}, want, ["cls_mass"], EPS32, 2**8)
