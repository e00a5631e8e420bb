"""The pruning orders (importance, random, iterative) against a plain loop, and the "N% at δ" answer.

The plain loop evaluates one example at a time with the disabled heads' context zeroed by hand-written hooks on
each layer's attention output projection (no bertwatch code), and recomputes Michel's importance with
hand-written gates in float64 bookkeeping; the orders are rebuilt from their definitions with numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertwatch.ablation import sweep as SW  # noqa: E402
from bertwatch.ablation.settings import AblationSettings  # noqa: E402
from bertwatch.cli.ablate import summary_lines  # noqa: E402
from bertwatch.core.removable import Removable, removable, removable_text  # noqa: E402
from bertwatch.report.html import build_html  # noqa: E402
from bertwatch.report.result import AblationResult  # noqa: E402
from tests.support.models import lively  # noqa: E402
from tests.support.task_cases import CASES, Off, metric_scale, model_for, plain_metric  # noqa: E402
from tests.support.tb_helpers import CURVES_ANSWER, ablation_tables, curves_result  # noqa: E402
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts  # noqa: E402
from tests.support.tolerance import assert_float32_close  # noqa: E402

# --- the answer on hand-made curves -------------------------------------------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize(
    "lows, highs, greater, expected",
    [
        ([-0.004, -0.009, -0.02], [0.01, 0.0, 0.0], True, (2 / 10, 2, 1, False)),  # fails at the third step
        ([-0.01, -0.0100001], [0.0, 0.0], True, (1 / 10, 1, 0, False)),  # -δ itself holds; just below does not
        ([-0.02, -0.001, -0.001], [0.0, 0.0, 0.0], True, (0.0, 0, -1, False)),  # a later recovery does not count
        ([-0.001, np.nan], [0.0, 0.0], True, (1 / 10, 1, 0, False)),  # an undefined interval does not hold
        ([-0.001, -0.002, -0.003], [0.0, 0.0, 0.0], True, (3 / 10, 3, 2, True)),  # every step held: censored
        ([-5.0, -5.0, -5.0], [0.005, 0.009, 0.011], False, (2 / 10, 2, 1, False)),  # a loss: the upper end counts
    ],
)
def test_removable_reads_the_curve_from_the_left(lows, highs, greater, expected) -> None:
    n = len(lows)
    got = removable([(j + 1) / 10 for j in range(n)], [j + 1 for j in range(n)], lows, highs, 0.01, greater)
    assert (got.fraction, got.pruned, got.step, got.censored) == pytest.approx(expected)


@pytest.mark.fast
def test_removable_edges_and_words() -> None:
    assert removable([], [], [], [], 0.01) == Removable(0.0, 0, -1, False)
    assert removable([0.5, 1.0], [1, 2], [0.0, 0.0], [0.0, 0.0], 0.0).censored is False  # no head left to try
    with pytest.raises(ValueError, match="delta"):
        removable([0.5], [1], [0.0], [0.0], -0.1)
    text = removable_text(Removable(0.4, 29, 3, False), 72, "accuracy", 0.01)
    assert text == "up to 40% of heads (29 of 72) removed with accuracy within 0.01 of the baseline (95% interval)"
    assert removable_text(Removable(0.0, 0, -1, False), 72, "accuracy", 0.01).startswith("no pruning step")


@pytest.mark.fast
def test_settings_refuse_bad_delta_and_orders() -> None:
    with pytest.raises(ValueError, match="delta"):
        AblationSettings(delta=-0.01)
    with pytest.raises(ValueError, match="delta"):
        AblationSettings(delta=float("nan"))
    with pytest.raises(ValueError, match="prune_random"):
        AblationSettings(prune_random=-1)
    assert AblationSettings().delta == 0.01 and AblationSettings().prune_random is None  # 5 as the budget allows


@pytest.mark.fast
def test_report_and_summary_state_the_answers() -> None:
    baseline, heads, layers, _ = ablation_tables(seed=0)
    result = curves_result(baseline)
    result.heads, result.layers = heads.astype(np.float64), layers.astype(np.float64)
    answers = result.removable()
    assert answers["importance"].pruned == CURVES_ANSWER and answers["iterative"].pruned == CURVES_ANSWER
    assert [r.pruned for r in answers["random"]] == [14, 7, 0]
    assert result.removable(delta=0.0)["importance"].step == -1  # every interval reaches below 0
    page = build_html([result])
    assert "up to 40% of heads (29 of 72) removed with accuracy within 0.01 of the baseline (95% interval)" in page
    assert "random orders (3): median 10% of heads, range 0%-19%" in page
    printed = summary_lines(result, "out")
    headline = (
        "872 examples resolve a change of 0.01 (one example is 0.0011; the 95% interval where the answer stops is "
        "±0.008): up to "
        "40% of the heads (29 of 72) can go"
    )
    assert f"  pruning: {headline}\n" in printed and headline in page
    assert "pruning, importance order: up to 40% of heads (29 of 72)" in printed
    assert "pruning, iterative order: up to 40%" in printed


@pytest.mark.fast
def test_version_2_ablation_json_still_loads(tmp_path: Path) -> None:
    baseline, heads, layers, _ = ablation_tables(seed=0)
    new = curves_result(baseline)
    new.heads, new.layers = heads.astype(np.float64), layers.astype(np.float64)
    doc = new.to_json()
    assert doc["version"] == 5 and doc["removable"]["importance"]["pruned"] == CURVES_ANSWER
    assert doc["resolution"]["one_example"] == 1 / 872 and doc["resolution"]["half_width"] == pytest.approx(0.008)
    assert len(doc["pruning_random"]) == 3 and len(doc["pruning_iterative"]) == len(doc["pruning"])
    back = AblationResult.from_json(json.loads(json.dumps(doc)))
    np.testing.assert_array_equal(back.curves_table(), new.curves_table())
    old = {k: v for k, v in doc.items() if k not in ("pruning_random", "pruning_iterative", "removable", "resolution")}
    old["version"] = 2
    old["config"] = {k: v for k, v in old["config"].items() if k != "delta"}
    result = AblationResult.from_json(old)  # no baseline orders, δ the default
    assert result.pruning_random == [] and result.pruning_iterative == [] and result.delta == 0.01
    assert result.removable()["importance"].pruned == CURVES_ANSWER and result.removable()["iterative"] is None
    table = result.curves_table()
    assert np.isnan(table[1:, 4:]).all() and np.isfinite(table[:, :4]).all()
    page = build_html([result])
    assert "importance order: up to 40% of heads" in page and "random orders (" not in page


@pytest.mark.fast
def test_the_curves_survive_the_tensorboard_round_trip(tmp_path: Path) -> None:
    from bertwatch.report.events import read_run
    from bertwatch.tb.writer.summary import SummaryWriter

    baseline, heads, layers, _ = ablation_tables(seed=0)
    result = curves_result(baseline)
    result.heads, result.layers = heads.astype(np.float64), layers.astype(np.float64)
    with SummaryWriter(str(tmp_path)) as w:
        w.add_ablation(
            "uniform", "accuracy", baseline, 872, heads, layers, result.pruning_curve(), curves=result.curves_summary()
        )
    (back,), _ = read_run(tmp_path)
    assert len(back.pruning_random) == 3 and len(back.pruning_iterative) == len(result.pruning)
    np.testing.assert_allclose(back.curves_table(), result.curves_table(), rtol=1e-6, atol=1e-7)
    assert [e["pruned"] for e in back.pruning] == [e["pruned"] for e in result.pruning]
    got, expected = back.removable(), result.removable()
    for name in ("importance", "iterative"):
        assert (got[name].pruned, got[name].step) == (expected[name].pruned, expected[name].step)
    assert [(r.pruned, r.step) for r in got["random"]] == [(r.pruned, r.step) for r in expected["random"]]
    assert "importance order: up to 40% of heads (29 of 72)" in build_html([back])


# --- the curves against a plain loop ------------------------------------------------------------------------------


def _plain_logits(model, encoded, heads: np.ndarray, gates: torch.Tensor | None = None):
    """Logits of each example alone, ``[n, C]``, with the context of the disabled heads ``[L, H]`` zeroed (and the
    others multiplied by ``gates`` ``[L, H]`` when given) by a pre-hook on each attention output projection."""
    layers = model.bert.encoder.layer
    size = model.config.hidden_size // model.config.num_attention_heads
    keep = torch.as_tensor(~heads, dtype=torch.float32)
    hooks = []
    for l, layer in enumerate(layers):

        def scale(module, args, l=l):
            factor = keep[l] if gates is None else keep[l] * gates[l]
            return (args[0] * factor.repeat_interleave(size).to(args[0].dtype),)

        hooks.append(layer.attention.output.dense.register_forward_pre_hook(scale))
    try:
        return [model(**{k: torch.tensor([v]) for k, v in e.items()}).logits[0] for e in encoded]
    finally:
        for hook in hooks:
            hook.remove()


def _plain_importance(model, encoded, labels, heads: np.ndarray) -> np.ndarray:
    """Michel's E|dL/dξ| with the disabled heads zeroed, one example at a time, normalised per layer over the heads
    still on, float64."""
    L, H = heads.shape
    total = np.zeros((L, H))
    for e, label in zip(encoded, labels):
        gates = torch.ones(L, H, requires_grad=True)
        with torch.enable_grad():
            (logits,) = _plain_logits(model, [e], heads, gates)
            loss = torch.nn.functional.cross_entropy(logits[None], torch.tensor([label]))
            (grad,) = torch.autograd.grad(loss, [gates])
        total += np.abs(grad.double().numpy())
    mean = np.where(heads, 0.0, total / len(encoded))
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-20)


def _steps(total: int, step: float = 0.1) -> list[int]:
    counts, pruned = [], 0
    while pruned < total:
        pruned += max(1, int(step * (total - pruned)))
        counts.append(pruned)
    return counts


def _mask(entry: dict, shape) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    for l, h in entry["heads"]:
        mask[l, h] = True
    return mask


def test_every_pruning_order_equals_a_plain_loop(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    examples = toy_texts(24, 3)
    model = lively(tiny_bert(tokenizer, layers=3), seed=1).eval()
    result = SW.ablate(
        model,
        examples,
        tokenizer,
        mode="zero",
        n_resamples=200,
        batch_size=5,
        shard_size=10,
        progress=False,
        keep_only=False,
        prune_random=2,
        prune_iterative=True,
        prune_threshold=0.0,
        seed=7,
        max_length=64,
        out_dir=tmp_path,
    )
    shape = result.shape
    total = shape[0] * shape[1]
    encoded = [
        {"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
        for ids in (tokenizer(e["text"], truncation=True, max_length=64)["input_ids"] for e in examples)
    ]
    labels = np.array([e["label"] for e in examples])
    with torch.no_grad():
        base = torch.stack(_plain_logits(model, encoded, np.zeros(shape, dtype=bool))).numpy()
    base_accuracy = float(np.mean(base.argmax(-1) == labels))
    counts = _steps(total)
    assert [e["pruned"] for e in result.pruning] == counts  # threshold 0: the curve runs until no head is left

    # the orders, rebuilt from their definitions
    importance = _plain_importance(model, encoded, labels, np.zeros(shape, dtype=bool))
    np.testing.assert_allclose(result.importance, importance, rtol=1e-4, atol=1e-7)
    order = np.argsort(result.importance.ravel(), kind="stable")
    orders = {"prune": [np.isin(np.arange(total), order[:k]).reshape(shape) for k in counts]}
    for r in range(2):
        perm = np.random.default_rng([7, r]).permutation(total)
        orders[f"random{r}"] = [np.isin(np.arange(total), perm[:k]).reshape(shape) for k in counts]
    iterative, mask = [], np.zeros(shape, dtype=bool)
    for j, k in enumerate(counts):
        scores = importance if j == 0 else _plain_importance(model, encoded, labels, mask)
        ranked = [i for i in np.argsort(scores.ravel(), kind="stable") if not mask.ravel()[i]]
        mask = mask.copy()
        mask.ravel()[ranked[: k - int(mask.sum())]] = True
        iterative.append(mask)
    orders["iterative"] = iterative
    assert any(not np.array_equal(a, b) for a, b in zip(iterative, orders["prune"]))  # re-ranking changed the order

    curves = {"prune": result.pruning, "iterative": result.pruning_iterative}
    curves.update({f"random{r}": entries for r, entries in enumerate(result.pruning_random)})
    assert set(curves) == set(orders)
    for name, entries in curves.items():
        assert [e["pruned"] for e in entries] == counts, name
        for entry, expected_mask in zip(entries, orders[name]):
            assert np.array_equal(_mask(entry, shape), expected_mask), (name, entry["pruned"])
            with torch.no_grad():
                plain = torch.stack(_plain_logits(model, encoded, expected_mask)).numpy()
            got = result.logits[f"{name}:{entry['pruned']}"]
            np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
            accuracy = float(np.mean(plain.argmax(-1) == labels))
            assert entry["value"] == pytest.approx(accuracy) and entry["delta"] == pytest.approx(
                accuracy - base_accuracy
            )
            assert entry["ci_low"] <= entry["delta"] + 1e-12 <= entry["ci_high"] + 2e-12
    doc = json.loads((tmp_path / "ablation.json").read_text())
    assert doc["version"] == 5 and len(doc["pruning_random"]) == 2
    assert doc["removable"] == json.loads(json.dumps(result.removable_json()))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_head_gets_random_and_iterative_orders_scored_exactly(case) -> None:
    """Every task head: each step of the iterative and the random order scores what the plain metric gives with
    the step's heads disabled by hand-written hooks (iterative importance runs on the head's own loss)."""
    tokenizer = tiny_tokenizer()
    model = model_for(case, tokenizer).eval()
    rows = case.ablation_rows(tokenizer) if case.ablation_rows is not None else list(case.dataset(tokenizer, 12, 1))
    mode = "uniform" if case.name in ("regression", "question-answering", "masked-lm") else "zero"
    result = SW.ablate(
        model,
        rows,
        tokenizer,
        task=case.task_type,
        mode=mode,
        keep_only=False,
        n_resamples=20,
        progress=False,
        prune_random=1,
        prune_iterative=True,
        prune_threshold=0.0,
        prune_step=0.25,
        max_length=64,
    )
    assert len(result.pruning_iterative) == len(result.pruning) == len(result.pruning_random[0])
    shape = result.shape
    for name, entries in (("iterative", result.pruning_iterative), ("random0", result.pruning_random[0])):
        for entry in entries[:3]:
            off = Off(_mask(entry, shape), mode)
            plain = plain_metric(case, model, tokenizer, rows, off)
            scale = metric_scale(case, model, tokenizer, rows, off)
            assert_float32_close(entry["value"], plain, scale=scale, msg=f"{name} {entry['pruned']}")
