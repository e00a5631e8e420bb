"""``ship_model`` measures the metric as it is served: one request at a time by default, or batches of N in the set's
order. docs/ship.md's script, taken from the doc and run in a fresh process that imports neither bertwatch nor torch,
reproduces ship.json's INT8 metric exactly from what ``bertwatch ship`` writes (the ONNX file, the tokenizer,
``examples.jsonl``); the predictions that length-sorted batches of 32 change are counted.

The case is chosen so that batchings tell apart: on this tiny classifier and these 400 examples, dynamic INT8 changes
11 predictions between one request at a time and length-sorted batches of 32 (2-core x86 VM), and the accuracy with
them, so a metric measured in batches would not match the script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertwatch.ship.runtime import encode, eval_batches, load_onnx, predict_logits
from bertwatch.ship.shipping import EXAMPLES_FILE, ShipOptions, ship_model
from tests.support.ship_models import lively_classifier
from tests.support.tiny_trainer import toy_texts

ROOT = Path(__file__).resolve().parents[2]
#: The doc section whose first Python block reproduces the metric without bertwatch.
SECTION = "## Reproduce the metric without bertwatch"
OPTIONS = dict(repeats=1, warmup=0, threads=1, n_resamples=50, max_length=64, attribution_examples=0)


def doc_script() -> str:
    """The first ```python block of docs/ship.md's SECTION, as a user would copy it."""
    text = (ROOT / "docs" / "ship.md").read_text(encoding="utf-8")
    assert SECTION in text, f"docs/ship.md has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> tuple[Path, dict, list]:
    model, tokenizer = lively_classifier(1)
    examples = toy_texts(400, seed=0)
    root = tmp_path_factory.mktemp("served")
    result = ship_model(model, tokenizer, examples, root / "ship", options=ShipOptions(**OPTIONS), progress=False)
    return root, result, examples


def _row(result: dict, name: str) -> dict:
    return next(row for row in result["variants"] if row["name"] == name)


def run_doc_script(root: Path) -> tuple[float, float]:
    """The script run in ``root`` (which holds ``ship/``) by a fresh ``python -I`` that must not import bertwatch or
    torch: the accuracy it computes and the one it read from ship.json."""
    guard = "\nimport sys\nassert 'torch' not in sys.modules and 'bertwatch' not in sys.modules, sorted(sys.modules)\n"
    done = subprocess.run(
        [sys.executable, "-I", "-c", doc_script() + guard], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.strip().splitlines()[-1]
    got, recorded = (float(x) for x in re.findall(r"\d+\.\d+(?:e-\d+)?", printed.split(":", 1)[1]))
    return got, recorded


def test_the_docs_script_reproduces_the_int8_metric_without_bertwatch(shipped) -> None:
    root, result, _ = shipped
    int8 = _row(result, "int8")
    assert int8["sorted_batches"]["changed"] > 0 and int8["sorted_batches"]["value"] != int8["value"]
    got, recorded = run_doc_script(root)
    saved = json.loads((root / "ship" / "ship.json").read_text())
    assert got == recorded == _row(saved, "int8")["value"] == int8["value"]


def test_the_docs_script_reproduces_a_pair_task(tmp_path: Path) -> None:
    model, tokenizer = lively_classifier(2)
    examples = toy_texts(60, seed=4, pairs=True)
    result = ship_model(model, tokenizer, examples, tmp_path / "ship", options=ShipOptions(**OPTIONS), progress=False)
    assert json.loads((tmp_path / "ship" / EXAMPLES_FILE).read_text().splitlines()[0]) == examples[0]
    got, recorded = run_doc_script(tmp_path)
    assert got == recorded == _row(result, "int8")["value"]
    # the script's premise: tokenizers alone encodes a pair as transformers does for bertwatch ship
    from tokenizers import Tokenizer

    alone = Tokenizer.from_file(str(tmp_path / "ship" / "tokenizer.json"))
    alone.enable_truncation(64)
    for example in examples:
        encoded, want = alone.encode(example["text"], example["text_pair"]), encode(tokenizer, [example], 64)
        assert [encoded.ids, encoded.type_ids, encoded.attention_mask] == [
            want[k][0].tolist() for k in ("input_ids", "token_type_ids", "attention_mask")
        ]


def test_ship_json_records_the_batching_and_the_inputs(shipped) -> None:
    root, result, examples = shipped
    one = {"batch_size": 1, "padded": False, "sorted": False}
    assert result["batching"] == {
        "metric": one,
        "sorted_batches": {"batch_size": 32, "padded": True, "sorted": True},
        "latency": one,
        "throughput": {"batch_size": 32, "padded": True, "sorted": False},
        "export_check": {"batch_size": 32, "padded": True, "sorted": False},
        "attribution": None,
    }
    written = [json.loads(line) for line in (root / "ship" / EXAMPLES_FILE).read_text().splitlines()]
    assert written == [{k: e[k] for k in ("text", "label")} for e in examples]
    assert "tokenizer.json" in result["files"]["tokenizer"] and result["files"]["examples"] == EXAMPLES_FILE
    assert all((root / "ship" / name).is_file() for name in result["files"]["tokenizer"])
    labels = np.array([e["label"] for e in examples])
    fp32 = _row(result, "fp32")
    assert fp32["sorted_batches"]["changed"] == 0  # float32 does not depend on the batch beyond rounding
    for row in result["variants"]:
        bound = row["sorted_batches"]["changed"] / len(labels)
        assert abs(row["sorted_batches"]["value"] - row["value"]) <= bound + 1e-12


def test_a_serving_batch_of_n_measures_batches_in_the_set_order(shipped, tmp_path: Path) -> None:
    _, _, examples = shipped
    model, tokenizer = lively_classifier(1)
    examples = examples[:120]
    options = ShipOptions(**{**OPTIONS, "serve_batch": 8})
    result = ship_model(model, tokenizer, examples, tmp_path, options=options, progress=False)
    assert result["batching"]["metric"] == {"batch_size": 8, "padded": True, "sorted": False}
    labels = np.array([e["label"] for e in examples])
    eight = eval_batches(tokenizer, examples, 64, batch_size=8, sort=False)
    assert [list(i) for i in eight.indices] == [list(range(s, s + 8)) for s in range(0, 120, 8)]
    int8 = predict_logits(load_onnx(tmp_path / "model.int8.onnx", 1), eight).argmax(-1)
    assert _row(result, "int8")["value"] == float(np.mean(int8 == labels))
    with pytest.raises(ValueError, match="serve_batch"):
        ShipOptions(serve_batch=0)
