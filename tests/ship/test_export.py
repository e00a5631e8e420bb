"""``bertwatch.ship.export``: the ONNX file computes torch's logits on batches it was not traced on, runs in a
fresh process with onnxruntime alone, and its INT8 copy is smaller; what it refuses, it says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.ship.export import (
    INSTALL_HINT,
    check_classifier,
    export_difference,
    export_onnx,
    input_names,
    quantize_int8,
    require_onnx,
)
from bertwatch.ship.runtime import encode, load_onnx
from tests.support.models import bert_with_head
from tests.support.ship_models import lively_classifier, run_fresh
from tests.support.tiny_trainer import tiny_tokenizer, toy_texts
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]


def _torch_logits(model, feed) -> np.ndarray:
    with torch.no_grad():
        return model(**{k: torch.as_tensor(v) for k, v in feed.items()}).logits.double().numpy()


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple:
    model, tokenizer = lively_classifier()
    folder = tmp_path_factory.mktemp("export")
    return model, tokenizer, export_onnx(model, tokenizer, folder / "model.onnx")


@pytest.mark.parametrize(("count", "pairs"), [(1, False), (7, False), (5, True)])
def test_onnx_logits_equal_torch_on_new_shapes(exported, count: int, pairs: bool) -> None:
    model, tokenizer, path = exported
    feed = encode(tokenizer, toy_texts(count, seed=count, pairs=pairs), max_length=40)
    want = _torch_logits(model, feed)
    got = load_onnx(path).run(["logits"], feed)[0]
    assert got.shape == want.shape
    assert_float32_close(got, want, scale=np.abs(want).max(), msg="ONNX against torch")
    check = export_difference(model, got, feed)
    assert check["rows"] == count and check["max_abs_diff"] == pytest.approx(np.abs(got - want).max(), abs=1e-6)


def test_graph_inputs_and_dynamic_axes(exported) -> None:
    model, tokenizer, path = exported
    inputs = {i.name: i.shape for i in load_onnx(path).get_inputs()}
    assert list(inputs) == ["input_ids", "attention_mask", "token_type_ids"]
    assert all(shape == ["batch", "sequence"] for shape in inputs.values())
    feed = encode(tokenizer, toy_texts(2), 16)
    assert input_names(model, {k: feed[k] for k in ("token_type_ids", "input_ids")}) == ["input_ids", "token_type_ids"]


def test_the_file_runs_in_a_fresh_process_with_onnxruntime_alone(exported) -> None:
    model, tokenizer, path = exported
    feed = encode(tokenizer, toy_texts(4, seed=3), max_length=40)
    want = _torch_logits(model, feed)
    assert_float32_close(run_fresh(path, feed), want, scale=np.abs(want).max(), msg="fresh process")


def test_int8_is_smaller_and_close(exported, tmp_path: Path) -> None:
    model, tokenizer, path = exported
    small = quantize_int8(path, tmp_path / "model.int8.onnx")
    assert small.stat().st_size < path.stat().st_size
    feed = encode(tokenizer, toy_texts(6, seed=4), max_length=40)
    want = _torch_logits(model, feed)
    got = load_onnx(small).run(["logits"], feed)[0]
    assert np.isfinite(got).all() and np.abs(got - want).max() < 0.5 * np.abs(want).max()
    assert run_fresh(small, feed).shape == want.shape


def test_refusals_say_what_to_do(tmp_path: Path, monkeypatch) -> None:
    tokenizer = tiny_tokenizer()
    encoder = bert_with_head(T.BertModel, tokenizer)
    with pytest.raises(ValueError, match="sequence classifiers; this checkpoint is a BertModel"):
        export_onnx(encoder, tokenizer, tmp_path / "x.onnx")
    regression = bert_with_head(T.BertForSequenceClassification, tokenizer, num_labels=1)
    with pytest.raises(ValueError, match="problem type is regression"):
        check_classifier(regression)
    model, _ = lively_classifier()
    with pytest.raises(ValueError, match="opset 17 or later"):
        export_onnx(model, tokenizer, tmp_path / "x.onnx", opset=14)
    with pytest.raises(FileNotFoundError, match="export the model first"):
        quantize_int8(tmp_path / "none.onnx", tmp_path / "y.onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(RuntimeError, match="onnxruntime is missing") as error:
        require_onnx()
    assert INSTALL_HINT in str(error.value)


def test_importing_the_subpackage_loads_neither_torch_nor_onnx() -> None:
    code = (
        "import sys, bertwatch, bertwatch.ship, bertwatch.ship.export, bertwatch.ship.measure, bertwatch.ship.table\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'onnx', 'onnxruntime') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
