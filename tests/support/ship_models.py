"""Tiny sequence classifiers and ONNX checks shared by the ``bertwatch ship`` tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import transformers as T

from tests.support.models import lively
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts

#: Run in a fresh interpreter with ``-I`` (no PYTHONPATH, no user site): onnxruntime and numpy only.
FRESH_RUN = """
import json, sys
import numpy as np
import onnxruntime as ort
feed = {k: np.asarray(v, dtype=np.int64) for k, v in json.loads(sys.argv[2]).items()}
model = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
wanted = [i.name for i in model.get_inputs()]
logits = model.run(["logits"], {k: feed[k] for k in wanted})[0]
assert "torch" not in sys.modules and "bertwatch" not in sys.modules, sorted(sys.modules)
print(json.dumps(logits.tolist()))
"""


def lively_classifier(seed: int = 1) -> tuple[T.PreTrainedModel, T.PreTrainedTokenizerBase]:
    """A 2-layer, 4-head BERT classifier whose every head moves the logits (weights N(0, 0.3²)), and its tokenizer."""
    tokenizer = tiny_tokenizer()
    return lively(tiny_bert(tokenizer, seed=seed), 0.3, seed).eval(), tokenizer


def save_checkpoint(folder: Path, seed: int = 1) -> Path:
    """A tiny classifier checkpoint (weights, config, tokenizer) in ``folder``."""
    model, tokenizer = lively_classifier(seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_examples(path: Path, count: int = 40, seed: int = 0) -> Path:
    """Labelled toy texts as JSON lines."""
    path.write_text("".join(json.dumps(row) + "\n" for row in toy_texts(count, seed)), encoding="utf-8")
    return path


def run_fresh(onnx_file: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    """The file's logits on ``feed``, computed in a fresh ``python -I`` that imports onnxruntime and numpy alone."""
    payload = json.dumps({k: np.asarray(v).tolist() for k, v in feed.items()})
    done = subprocess.run(
        [sys.executable, "-I", "-c", FRESH_RUN, str(onnx_file), payload], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return np.asarray(json.loads(done.stdout), dtype=np.float64)
