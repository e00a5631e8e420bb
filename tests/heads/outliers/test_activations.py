"""Activation outliers (``heads.outliers.activations``) against a float64 loop over each example alone: the feed-forward
output and the residual stream of every layer, with an outlier dimension planted in a LayerNorm."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertwatch.heads.outliers.activations import OUTLIER_THRESHOLD, activation_outliers, ffn_outputs
from bertwatch.heads.roles import token_roles
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts

pytestmark = pytest.mark.fast


def _planted(tok):
    """A tiny BERT whose layer outputs carry an outlier in dimension 5 (a LayerNorm gain of 9)."""
    model = tiny_bert(tok).eval()
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            layer.output.LayerNorm.weight[5] = 9.0
    return model


def _alone(model, tok, texts) -> dict[str, list[list[np.ndarray]]]:
    """Per layer, each example's real tokens' activations alone (no padding): ``(values [n, d], delimiter [n])``."""
    out = {"ffn": [[] for _ in model.bert.encoder.layer], "residual": [[] for _ in model.bert.encoder.layer]}
    ffn = []
    handles = [
        layer.output.dense.register_forward_hook(lambda m, a, o: ffn.append(o)) for layer in model.bert.encoder.layer
    ]
    for text in texts:
        enc = tok(text["text"], return_tensors="pt")
        ids = enc["input_ids"][0].tolist()
        delimiter = np.array([tok.convert_ids_to_tokens(i) in ("[CLS]", "[SEP]", ".", ",") for i in ids])
        ffn.clear()
        with torch.no_grad():
            hidden = model(**enc, output_hidden_states=True).hidden_states
        for layer in range(len(model.bert.encoder.layer)):
            out["ffn"][layer].append((ffn[layer][0].double().numpy(), delimiter))
            out["residual"][layer].append((hidden[layer + 1][0].double().numpy(), delimiter))
    for handle in handles:
        handle.remove()
    return out


def _plain(examples) -> dict:
    values = [v for v, _ in examples]
    pooled = [float(x) for v in values for row in v for x in row]
    n = len(pooled)
    mean = sum(pooled) / n
    m2 = sum((x - mean) ** 2 for x in pooled) / n
    m4 = sum((x - mean) ** 4 for x in pooled) / n
    big_all = sum(abs(x) for v in values for row in v for x in row if abs(x) >= OUTLIER_THRESHOLD)
    big_delim = sum(abs(x) for v, d in examples for row, is_d in zip(v, d) if is_d for x in row
                    if abs(x) >= OUTLIER_THRESHOLD)  # fmt: skip
    count = sum(1 for x in pooled if abs(x) >= OUTLIER_THRESHOLD)
    dims = values[0].shape[1]
    dim_max = [max(abs(row[d]) for v in values for row in v) for d in range(dims)]
    return {
        "inf_norm": max(abs(x) for x in pooled),
        "kurtosis": m4 / m2**2,
        "outlier_share": count / n,
        "delimiter_share": big_delim / big_all if big_all > 0 else math.nan,
        "top_dims": sorted(range(dims), key=lambda d: -dim_max[d])[:3],
    }


def test_outliers_equal_the_loop_on_each_example_alone() -> None:
    tok = tiny_tokenizer()
    model = _planted(tok)
    assert len(ffn_outputs(model)) == len(model.bert.encoder.layer)
    texts = toy_texts(7, seed=3)
    batches = []
    for start in range(0, len(texts), 3):  # padded batches of 3
        enc = tok([t["text"] for t in texts[start : start + 3]], padding=True, return_tensors="pt")
        batches.append((dict(enc), token_roles(enc["input_ids"], enc["attention_mask"], tok)))
    got = activation_outliers(model, batches)
    expected = _alone(model, tok, texts)
    for where in ("ffn", "residual"):
        for layer, examples in enumerate(expected[where]):
            want, have = _plain(examples), got[where][layer]
            scale = max(1.0, want["inf_norm"])
            assert abs(have["inf_norm"] - want["inf_norm"]) <= 1e-5 * scale, (where, layer)
            assert have["kurtosis"] == pytest.approx(want["kurtosis"], rel=1e-4), (where, layer)
            assert have["outlier_share"] == pytest.approx(want["outlier_share"], abs=1e-12), (where, layer)
            if math.isnan(want["delimiter_share"]):
                assert math.isnan(have["delimiter_share"])
            else:
                assert have["delimiter_share"] == pytest.approx(want["delimiter_share"], rel=1e-4), (where, layer)
            assert have["top_dims"][0] == want["top_dims"][0], (where, layer)
    assert all(r["top_dims"][0] == 5 and r["inf_norm"] >= OUTLIER_THRESHOLD for r in got["residual"])
