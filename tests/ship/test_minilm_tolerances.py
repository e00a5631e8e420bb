"""The stated tolerances of ``bertwatch ship`` on the packaged MiniLM (all-MiniLM-L6-v2, 6 layers, its activation
outliers up to ~200) with a classification head fitted in closed form (ridge regression of the pooled output on
256 SST-2 training sentences, so its margins are a trained head's): the float32 ONNX file computes torch's logits up
to float32 rounding of their scale, and the INT8 file agrees with torch's predictions on at least
``INT8_AGREEMENT`` of 256 SST-2 dev sentences, also when run in a fresh process without torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.data.glue import load_glue
from bertwatch.ship.export import export_onnx, quantize_int8
from bertwatch.ship.runtime import eval_batches, load_onnx, predict_logits
from tests.support.ship_models import run_fresh
from tests.support.tolerance import assert_float32_close

#: The least share of predictions the INT8 file keeps on this head (measured 90.2% on a 2-core x86 VM; the pooler of
#: all-MiniLM-L6-v2 was never trained for classification, so its margins are thin): five points for other CPUs'
#: INT8 kernels. The demo's fine-tuned MiniLM keeps 97-98% on SST-2 dev (docs/ship.md).
INT8_AGREEMENT = 0.85
EXAMPLES = 256


@pytest.fixture(scope="module")
def minilm_files(minilm_path, glue_dir, tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = T.AutoTokenizer.from_pretrained(minilm_path)
    model = T.AutoModelForSequenceClassification.from_pretrained(minilm_path, num_labels=2).eval()
    train = load_glue("sst2", "train", str(glue_dir), limit=EXAMPLES)
    with torch.no_grad():
        batch = tokenizer([r["text"] for r in train], padding=True, truncation=True, max_length=64, return_tensors="pt")
        pooled = model.bert(**batch).pooler_output.double()
        x = torch.cat([pooled, torch.ones(len(train), 1, dtype=torch.float64)], 1)
        y = torch.tensor([2.0 * r["label"] - 1 for r in train], dtype=torch.float64)
        w = torch.linalg.solve(x.T @ x + 1e-2 * torch.eye(x.shape[1], dtype=torch.float64), x.T @ y)
        model.classifier.weight.copy_(torch.stack([-w[:-1], w[:-1]]).float())
        model.classifier.bias.copy_(torch.stack([-w[-1], w[-1]]).float())
    folder = tmp_path_factory.mktemp("minilm")
    fp32 = export_onnx(model, tokenizer, folder / "model.onnx")
    batches = eval_batches(tokenizer, load_glue("sst2", "dev", str(glue_dir), limit=EXAMPLES), 128)
    want = np.empty((batches.num_examples, 2))
    with torch.no_grad():
        for chosen, feed in zip(batches.indices, batches.feeds):
            want[chosen] = model(**{k: torch.as_tensor(v) for k, v in feed.items()}).logits.double().numpy()
    return fp32, quantize_int8(fp32, folder / "model.int8.onnx"), batches, want


def test_fp32_onnx_equals_torch_up_to_float_rounding(minilm_files) -> None:
    fp32, _, batches, want = minilm_files
    got = predict_logits(load_onnx(fp32, 1), batches)
    assert np.abs(want).max() > 0.5  # a head with real margins
    assert_float32_close(got, want, scale=np.abs(want).max(), msg="MiniLM ONNX fp32 against torch")
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


def test_int8_agrees_with_torch_and_runs_without_torch(minilm_files) -> None:
    _, int8, batches, want = minilm_files
    got = predict_logits(load_onnx(int8, 1), batches)
    agreement = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    assert agreement >= INT8_AGREEMENT, agreement
    assert agreement < 1 or np.abs(got - want).max() > 1e-3  # INT8 does change the logits
    feed = batches.feeds[-1]
    np.testing.assert_allclose(run_fresh(int8, feed), predict_logits(load_onnx(int8, 1), _one(batches)), rtol=0,
                               atol=1e-5 * np.abs(want).max())  # fmt: skip


def _one(batches):
    from bertwatch.ship.runtime import EvalBatches

    feed = batches.feeds[-1]
    return EvalBatches([np.arange(len(feed["input_ids"]))], [feed])
