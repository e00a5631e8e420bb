"""The activation outliers measured live on the probe pass (``probe.measurements.OutlierStatistics``) against a
float64 loop over each example alone, unpadded (sentence pairs included, probe batches padded), at a first step and
after the weights moved; and the feed-forward hooks are gone after a pass, also after one that failed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.callbacks._safe import SetupError
from bertwatch.callbacks.judging import LossTap
from bertwatch.callbacks.tracking import layer_mean_logs, tracker_key
from bertwatch.core.stat_names import GRADIENT_NAMES, OUTLIER_NAMES
from bertwatch.heads.outliers.activations import OUTLIER_THRESHOLD, ffn_outputs, layer_modules
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.measurements import supported_stats
from bertwatch.probe.probe_pass import execute, plan_pass
from bertwatch.report.events import read_run
from tests.support.alone_oracle import eager_copy
from tests.support.models import OneMember, tiny_model
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts

pytestmark = pytest.mark.fast

ROLE_TOKENS = {"cls": ("[CLS]",), "sep": ("[SEP]",), "punct": (".", ",")}


def _planted(tok, gain: float = 9.0, dim: int = 5):
    """A tiny BERT whose layer outputs carry an outlier dimension (a LayerNorm gain): outliers past 6 exist."""
    model = tiny_bert(tok, layers=3).eval()
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            layer.output.LayerNorm.weight[dim] = gain
    return model


def _texts() -> list[dict]:
    singles = toy_texts(4, seed=5)
    pairs = toy_texts(4, seed=6, pairs=True)
    return [t for pair in zip(singles, pairs) for t in pair] + toy_texts(1, seed=7)


def _alone(model, tok, texts) -> dict[str, list[list[tuple[np.ndarray, list[str]]]]]:
    """Per stream and layer, each example's activations alone in float64 ``[n, d]`` with its tokens."""
    twin = eager_copy(model, torch.float64)
    layers = twin.bert.encoder.layer
    out = {"ffn": [[] for _ in layers], "residual": [[] for _ in layers]}
    recorded = []
    handles = [layer.output.dense.register_forward_hook(lambda m, a, o: recorded.append(o)) for layer in layers]
    try:
        for text in texts:
            enc = tok(text["text"], text.get("text_pair"), return_tensors="pt")
            tokens = tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
            recorded.clear()
            with torch.no_grad():
                hidden = twin(**enc, output_hidden_states=True).hidden_states
            for layer in range(len(layers)):
                out["ffn"][layer].append((recorded[layer][0].numpy(), tokens))
                out["residual"][layer].append((hidden[layer + 1][0].numpy(), tokens))
    finally:
        for handle in handles:
            handle.remove()
    return out


def _oracle(examples) -> dict:
    """The definitions by plain loops over every component of every real token, pooled over the examples."""
    pooled = [float(x) for values, _ in examples for row in values for x in row]
    n = len(pooled)
    mean = sum(pooled) / n
    m2 = sum((x - mean) ** 2 for x in pooled) / n
    m4 = sum((x - mean) ** 4 for x in pooled) / n
    big = [(abs(float(x)), tok) for values, tokens in examples for row, tok in zip(values, tokens) for x in row
           if abs(float(x)) >= OUTLIER_THRESHOLD]  # fmt: skip
    on_delimiters = sum(v for v, tok in big if tok in ("[CLS]", "[SEP]", ".", ","))
    dims = examples[0][0].shape[1]
    dim_max = [max(abs(float(row[d])) for values, _ in examples for row in values) for d in range(dims)]
    roles = {}
    for role, tokens in {**ROLE_TOKENS, "content": None}.items():
        found = [abs(float(x)) for values, toks in examples for row, tok in zip(values, toks)
                 if (tok in tokens if tokens else tok not in ("[CLS]", "[SEP]", ".", ",")) for x in row]  # fmt: skip
        roles[role] = max(found) if found else math.nan
    return {
        "inf_norm": max(abs(x) for x in pooled),
        "kurtosis": m4 / m2**2,
        "outlier_share": len(big) / n,
        "delimiter_share": on_delimiters / sum(v for v, _ in big) if big else math.nan,
        "top_dims": sorted(range(dims), key=lambda d: -dim_max[d])[:3],
        "roles": roles,
    }


def _expected(model, tok, texts, reference_dims=None) -> dict[str, np.ndarray]:
    alone = _alone(model, tok, texts)
    ffn = [_oracle(examples) for examples in alone["ffn"]]
    res = [_oracle(examples) for examples in alone["residual"]]
    grids = {
        "ffn_inf_norm": [r["inf_norm"] for r in ffn],
        "ffn_kurtosis": [r["kurtosis"] for r in ffn],
        "residual_inf_norm": [r["inf_norm"] for r in res],
        "residual_kurtosis": [r["kurtosis"] for r in res],
        "outlier_share": [r["outlier_share"] for r in res],
        "delimiter_share": [r["delimiter_share"] for r in res],
        "outlier_dim": [r["top_dims"][0] for r in res],
        "outlier_dim_overlap": [
            1.0 if reference_dims is None else len(set(r["top_dims"]) & set(reference_dims[l])) / 3
            for l, r in enumerate(res)
        ],
        **{f"{role}_inf_norm": [r["roles"][role] for r in res] for role in ("cls", "sep", "punct", "content")},
    }
    return {name: np.array(values, dtype=np.float64)[:, None] for name, values in grids.items()}, [
        r["top_dims"] for r in res
    ]


def _member(model, tok, tmp_path, texts):
    settings = ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run"))
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    return OneMember(model, settings, OUTLIER_NAMES, args, T.TrainerState(), {"processing_class": tok})


def _compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(OUTLIER_NAMES)
    for name in OUTLIER_NAMES:
        have, expected = np.asarray(got[name], np.float64), want[name]
        assert have.shape == expected.shape, name
        if name in ("outlier_dim", "outlier_dim_overlap"):
            assert np.array_equal(have, expected.astype(np.float32)), (name, have, expected)
            continue
        scale = np.maximum(1.0, np.abs(expected))  # float32 model and grids against float64: relative 1e-5
        tolerance = {"ffn_kurtosis": 1e-4, "residual_kurtosis": 1e-4}.get(name, 1e-5)
        assert np.array_equal(np.isnan(have), np.isnan(expected)), name
        close = np.abs(np.nan_to_num(have) - np.nan_to_num(expected)) <= tolerance * scale
        assert close.all(), (name, have[:, 0], expected[:, 0])


def test_the_live_outliers_are_the_loop_on_each_example_alone_with_pairs_and_padding(tmp_path) -> None:
    tok = tiny_tokenizer()
    model, texts = _planted(tok), _texts()
    member = _member(model, tok, tmp_path, texts)
    assert any(b["input_ids"].shape[0] > 1 for b in member.probe.batches)  # padded batches of several rows
    state = T.TrainerState()
    member.run("begin", state)
    want, dims = _expected(model, tok, texts)
    _compare(member.history[0][1], want)
    assert (want["outlier_share"] > 0).all() and np.isfinite(want["delimiter_share"]).all()

    with torch.no_grad():  # the weights move: a new outlier dimension in the last layer
        model.bert.encoder.layer[-1].output.LayerNorm.weight[11] = 30.0
        model.bert.encoder.layer[-1].output.LayerNorm.weight[5] = 1.0
    state.global_step = 1
    member.run("step", state)
    member.close()
    moved, _ = _expected(model, tok, texts, reference_dims=dims)
    _compare(member.history[-1][1], moved)
    assert moved["outlier_dim"][-1, 0] == 11 and moved["outlier_dim_overlap"][-1, 0] < 1

    _, training = read_run(tmp_path / "run")  # the event file: one [layers, 1] series per statistic
    for name in OUTLIER_NAMES:
        entry = training["grids"][name]
        assert entry["steps"] == [0, 1], name
        written = np.stack([member.history[0][1][name], member.history[-1][1][name]])
        assert np.array_equal(entry["values"], written, equal_nan=True), name


def test_the_trackers_get_each_layers_value_under_outliers() -> None:
    grid = np.array([[195.6], [91.0], [np.nan]], dtype=np.float32)
    assert tracker_key("ffn_inf_norm", 2) == "bertwatch/outliers/ffn_inf_norm/layer_2"
    assert tracker_key("entropy", 2) == "bertwatch/entropy/layer_2"
    logs = layer_mean_logs({"ffn_inf_norm": grid, "delimiter_share": np.array([[0.5], [0.25], [1.0]])})
    assert logs == {
        "bertwatch/outliers/ffn_inf_norm/layer_0": float(grid[0, 0]),
        "bertwatch/outliers/ffn_inf_norm/layer_1": float(grid[1, 0]),
        "bertwatch/outliers/delimiter_share/layer_0": 0.5,
        "bertwatch/outliers/delimiter_share/layer_1": 0.25,
        "bertwatch/outliers/delimiter_share/layer_2": 1.0,
    }


def test_with_the_gradient_statistics_the_outliers_ride_the_gradient_pass(tmp_path) -> None:
    """The default statistics spare the shared forward (the gradient pass records what they read); the outliers are
    taken from the gradient pass's own forward calls (each length group or example), so they add no forward, and
    they are the loop on each example alone all the same."""
    tok = tiny_tokenizer()
    model, texts = _planted(tok), _texts()
    member = _member(model, tok, tmp_path, texts)
    calls = []
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    gradients = plan_pass("step", 1, GRADIENT_NAMES, GRADIENT_NAMES, reference_ready=True)
    execute(gradients, member.context)
    alone = len(calls)
    calls.clear()
    names = [*GRADIENT_NAMES, *OUTLIER_NAMES]
    result = execute(plan_pass("step", 1, names, names, reference_ready=True), member.context)
    handle.remove()
    member.close()
    assert len(calls) == alone  # not one forward more
    want, _ = _expected(model, tok, texts)
    _compare({n: result.grids[n] for n in OUTLIER_NAMES}, want)


def test_the_feed_forward_hooks_go_after_a_pass_and_after_a_failed_one(tmp_path) -> None:
    tok = tiny_tokenizer()
    model = _planted(tok)
    member = _member(model, tok, tmp_path, _texts())
    modules = [*ffn_outputs(model), *layer_modules(model), model]

    def hooks():  # the pass's hooks (transformers installs some of its own on a first forward; the run's loss tap
        # stays on the model for the whole run)
        found = [f for m in modules for f in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())]
        tap = [f for f in found if isinstance(getattr(f, "__self__", None), LossTap)]
        return [f for f in found if f.__module__.startswith("bertwatch") and f not in tap]

    before = hooks()
    assert before == []
    plan = plan_pass("step", 1, OUTLIER_NAMES, OUTLIER_NAMES, reference_ready=True)
    full = execute(plan, member.context)
    assert hooks() == before
    alone = plan_pass("step", 1, ["ffn_inf_norm"], ["ffn_inf_norm"], reference_ready=True)
    assert np.array_equal(execute(alone, member.context).grids["ffn_inf_norm"], full.grids["ffn_inf_norm"])

    def boom(module, args, output):
        raise RuntimeError("boom")

    handle = model.bert.encoder.layer[1].attention.register_forward_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        execute(plan, member.context)
    handle.remove()
    member.close()
    assert hooks() == before


def test_a_family_without_a_known_feed_forward_output_gets_the_residual_statistics_only() -> None:
    model = tiny_model("albert")
    assert ffn_outputs(model) is None
    wanted = frozenset({"ffn_inf_norm", "residual_inf_norm", "outlier_dim"})
    assert supported_stats(wanted, False, model, "test") == {"residual_inf_norm", "outlier_dim"}
    with pytest.raises(SetupError, match="ffn_inf_norm.*feed-forward output"):
        supported_stats(wanted, True, model, "test")
    assert supported_stats(wanted, True, tiny_model("bert"), "test") == wanted
