"""``ship_model`` end to end on a tiny classifier: four variants written and measured, the float32 export's
metric equal to torch's, the pruned export checked against the pruned torch model, the files runnable in a fresh
process with onnxruntime alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from bertwatch.ablation.physical import prune_model
from bertwatch.ship.runtime import encode
from bertwatch.ship.shipping import FILES, ShipOptions, mixed_name, ship_model
from tests.support.ship_models import lively_classifier, run_fresh
from tests.support.tiny_trainer import toy_texts
from tests.support.tolerance import assert_float32_close

HEADS = {0: [1, 2], 1: [0, 1, 2, 3]}


def _torch_predictions(model, tokenizer, examples) -> np.ndarray:
    with torch.no_grad():
        return np.array([model(**encode_pt(tokenizer, e)).logits.argmax(-1).item() for e in examples])


def encode_pt(tokenizer, example) -> dict:
    return {k: torch.as_tensor(v) for k, v in encode(tokenizer, [example], 64).items()}


def test_four_variants_measured_against_fp32(tmp_path: Path) -> None:
    model, tokenizer = lively_classifier()
    examples = toy_texts(45, seed=8)
    options = ShipOptions(repeats=3, warmup=1, threads=1, n_resamples=200, max_length=64)
    result = ship_model(
        model, tokenizer, examples, tmp_path, heads=HEADS, options=options, source={"task": "toy"}, progress=False
    )
    layer = result["attribution"]["kept_fp32"]
    assert layer is not None  # every layer of this model moves the logits
    mixed, mixed_file = mixed_name(layer)
    assert [v["name"] for v in result["variants"]] == ["fp32", "int8", mixed, "pruned", "pruned+int8"]
    assert all((tmp_path / name).is_file() for name in [*FILES.values(), mixed_file])
    graph = onnx.load(str(tmp_path / mixed_file)).graph
    integer = {n.name.split("/layer.")[1].split("/")[0] for n in graph.node if n.op_type == "MatMulInteger"
               and "/layer." in n.name}  # fmt: skip
    assert integer == {str(other) for other in range(model.config.num_hidden_layers) if other != layer}
    attribution = result["attribution"]
    assert attribution["examples"] == 45 and [r["layer"] for r in attribution["layers"]] == [0, 1]
    assert attribution["heads"][0]["layer"] == layer and len(attribution["heads"]) == 3
    assert json.loads((tmp_path / "ship.json").read_text())["variants"] == json.loads(json.dumps(result["variants"]))
    assert result["task"] == "toy" and result["num_examples"] == 45 and result["removed_heads"] == {
        "0": [1, 2], "1": [0, 1, 2, 3]
    }  # fmt: skip
    layers = model.config.num_hidden_layers
    assert (
        result["outliers"]["examples"] == 45 and len(result["outliers"]["ffn"]) == layers
    )  # heads.outliers.activations' test
    assert len(result["outliers"]["residual"]) == layers
    labels = np.array([e["label"] for e in examples])
    rows = {v["name"]: v for v in result["variants"]}
    full = _torch_predictions(model, tokenizer, examples)
    pruned = _torch_predictions(prune_model(model, HEADS), tokenizer, examples)
    assert rows["fp32"]["value"] == pytest.approx(np.mean(full == labels), abs=1e-12)
    assert rows["pruned"]["value"] == pytest.approx(np.mean(pruned == labels), abs=1e-12)
    assert rows["pruned"]["agreement"] == pytest.approx(np.mean(pruned == full), abs=1e-12)
    assert rows["fp32"]["delta"] == 0 and rows["fp32"]["max_abs_logit_diff"] == 0
    assert rows["int8"]["size_mb"] < rows["fp32"]["size_mb"] and rows["pruned"]["size_mb"] < rows["fp32"]["size_mb"]
    assert rows["pruned+int8"]["size_mb"] < rows["pruned"]["size_mb"]
    assert rows[mixed]["size_mb"] > rows["int8"]["size_mb"] and 0 <= rows[mixed]["agreement"] <= 1
    for name in [*FILES, mixed]:
        assert rows[name]["ci_low"] <= rows[name]["delta"] <= rows[name]["ci_high"]
        assert rows[name]["latency_ms"] > 0 and rows[name]["throughput"] > 0
    for name, check in result["export_check"].items():
        assert name in ("fp32", "pruned") and check["rows"] == 32
        assert check["max_abs_diff"] <= 64 * np.finfo(np.float32).eps * max(1.0, check["max_abs_logit"])
    feed = encode(tokenizer, examples[:3], 64)
    with torch.no_grad():
        want = prune_model(model, HEADS)(**{k: torch.as_tensor(v) for k, v in feed.items()}).logits.double().numpy()
    assert_float32_close(run_fresh(tmp_path / FILES["pruned"], feed), want, scale=np.abs(want).max())
    assert run_fresh(tmp_path / FILES["pruned+int8"], feed).shape == want.shape


def test_bad_evaluation_sets_are_refused(tmp_path: Path) -> None:
    model, tokenizer = lively_classifier()
    with pytest.raises(ValueError, match="evaluation set is empty"):
        ship_model(model, tokenizer, [], tmp_path, progress=False)
    with pytest.raises(ValueError, match="needs a class label"):
        ship_model(model, tokenizer, [{"text": "a film"}], tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"class ids 0\.\.1"):
        ship_model(model, tokenizer, [{"text": "a film", "label": -1}], tmp_path, progress=False)
    with pytest.raises(ValueError, match="repeats"):
        ShipOptions(repeats=0)
    with pytest.raises(ValueError, match="attribution_examples"):
        ShipOptions(attribution_examples=-1)


def test_what_cannot_be_attributed_is_said_and_the_table_still_stands(tmp_path: Path, monkeypatch) -> None:
    from bertwatch.heads.capture import UnsupportedModelError
    from bertwatch.ship import delimiters, shipping

    model, tokenizer = lively_classifier()
    options = ShipOptions(repeats=1, warmup=0, threads=1, n_resamples=50, max_length=64)

    def unnamed(path):
        raise ValueError("no node names an encoder layer")

    def uncaptured(model, batches):
        raise UnsupportedModelError("not this family")

    monkeypatch.setattr(shipping, "layer_nodes", unnamed)
    monkeypatch.setattr(delimiters, "delimiter_heads", uncaptured)
    with pytest.warns(UserWarning) as caught:
        result = ship_model(model, tokenizer, toy_texts(20, seed=9), tmp_path, options=options, progress=False)
    said = " ".join(str(w.message) for w in caught)
    assert "no node names an encoder layer" in said and "no head statistics for this model" in said
    assert result["attribution"] is None and result["outliers"]["heads"] is None
    assert [v["name"] for v in result["variants"]] == ["fp32", "int8"] and len(result["outliers"]["ffn"]) == 2
