"""``bertwatch.ship.layer_error``: each layer's matrix products found by name in the exported graph, INT8 copies
that leave nodes in fp32, the error measures against plain loops, and the attribution equal to the copies measured
one by one here."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bertwatch.ship.export import export_onnx, quantize_int8
from bertwatch.ship.layer_error import layer_attribution, layer_nodes, logit_error, recovery, worst_layer
from bertwatch.ship.runtime import eval_batches, load_onnx, predict_logits
from tests.support.ship_models import lively_classifier
from tests.support.tiny_trainer import toy_texts

#: Per layer of a BERT: query, key, value, the two products of the attention scores, the attention output, and the
#: two feed-forward maps.
MATMULS_PER_LAYER = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple:
    model, tokenizer = lively_classifier()
    path = export_onnx(model, tokenizer, tmp_path_factory.mktemp("layers") / "model.onnx")
    return model, tokenizer, path, eval_batches(tokenizer, toy_texts(40, seed=5), 40, batch_size=16)


def _plain_error(reference, logits) -> tuple[float, float]:
    largest, changed = [], 0
    for ref, got in zip(reference.tolist(), logits.tolist()):
        largest.append(max(abs(a - b) for a, b in zip(ref, got)))
        changed += int(max(range(len(ref)), key=ref.__getitem__) != max(range(len(got)), key=got.__getitem__))
    return sum(largest) / len(largest), changed / len(reference)


def test_logit_error_recovery_and_worst_layer_against_plain_loops() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(50, 3))
    logits = reference + rng.normal(scale=0.4, size=(50, 3))
    got = logit_error(reference, logits)
    assert (got["mean_max_abs"], got["changed"]) == pytest.approx(_plain_error(reference, logits), abs=1e-12)
    assert 0 < got["changed"] < 1
    assert logit_error(reference, reference) == {"mean_max_abs": 0.0, "changed": 0.0}
    with pytest.raises(ValueError, match="cannot compare"):
        logit_error(reference, logits[:, :2])
    assert recovery(0.4, 0.1) == pytest.approx(0.75) and math.isnan(recovery(0.0, 0.0))
    rows = [{"layer": 0, "recovery": 0.1}, {"layer": 1, "recovery": 0.6}, {"layer": 2, "recovery": math.nan}]
    assert worst_layer(rows) == 1
    assert worst_layer([{"layer": 0, "recovery": -0.2}, {"layer": 1, "recovery": math.nan}]) is None


def test_every_layer_has_its_matrix_products(exported) -> None:
    model, _, path, _ = exported
    nodes, everything = layer_nodes(path)
    assert list(nodes) == list(range(model.config.num_hidden_layers))
    for layer, names in nodes.items():
        assert all(f"/layer.{layer}/" in name for name in names)
        assert sum(name.endswith("MatMul") or "/MatMul_" in name for name in names) == MATMULS_PER_LAYER
        assert any(name.endswith("/output/dense/MatMul") for name in names)  # the feed-forward output
    inside = {name for names in nodes.values() for name in names}
    outside = set(everything) - inside
    assert inside < set(everything) and any("classifier" in n for n in outside) and any("Gather" in n for n in outside)


def test_nodes_left_in_fp32_compute_the_fp32_logits(exported, tmp_path: Path) -> None:
    _, _, path, batches = exported
    nodes, everything = layer_nodes(path)
    reference = predict_logits(load_onnx(path, 1), batches)
    none = quantize_int8(path, tmp_path / "none.onnx", exclude=everything)
    scale = np.abs(reference).max()
    assert np.abs(predict_logits(load_onnx(none, 1), batches) - reference).max() <= 1e-5 * scale
    full = predict_logits(load_onnx(quantize_int8(path, tmp_path / "all.onnx"), 1), batches)
    kept = predict_logits(load_onnx(quantize_int8(path, tmp_path / "k0.onnx", exclude=nodes[0]), 1), batches)
    assert np.abs(full - reference).max() > 1e-3 * scale  # INT8 moves the logits; keeping layer 0 moves them less
    assert not np.array_equal(kept, full)


def test_the_attribution_is_each_copy_measured_alone(exported, tmp_path: Path) -> None:
    _, _, path, batches = exported
    nodes, everything = layer_nodes(path)
    steps = []
    got = layer_attribution(path, batches, threads=1, step=lambda: steps.append(1))
    assert got["examples"] == 40 and len(steps) == 1 + 2 * len(nodes)
    reference = predict_logits(load_onnx(path, 1), batches)

    def measured(exclude, name):
        copy = quantize_int8(path, tmp_path / f"{name}.onnx", exclude=exclude)
        return logit_error(reference, predict_logits(load_onnx(copy, 1), batches))

    assert got["int8"] == pytest.approx(measured([], "int8"), abs=1e-9)
    for row in got["layers"]:
        layer = row["layer"]
        others = [name for name in everything if name not in nodes[layer]]
        assert row["only"] == pytest.approx(measured(others, f"only{layer}"), abs=1e-9)
        assert row["kept"] == pytest.approx(measured(nodes[layer], f"kept{layer}"), abs=1e-9)
        assert row["recovery"] == pytest.approx(1 - row["kept"]["mean_max_abs"] / got["int8"]["mean_max_abs"])
