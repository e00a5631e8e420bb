"""The measurements of a probe pass (``bertwatch.probe.measurements``), one at a time, outside a pass: what each asks
the shared forward to record, which measurement gives a statistic, and the statistics a measurement computes or
finishes itself, against plain float64 loops (numpy, one example, layer, head and token at a time)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertwatch.core.stat_names import OUTLIER_NAMES
from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES
from bertwatch.heads.mixing.mixing_model import MIXING_NAMES
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.stability.spectral_norms import LOGIT_NAMES, QK_NAME
from bertwatch.options.settings import ALL_STATS
from bertwatch.probe.measurements import (
    MEASUREMENTS,
    CaptureNeeds,
    GradientStatistics,
    IntegratedGradientsStatistic,
    MapStatistics,
    MixingStatistics,
    NormStatistics,
    OutlierStatistics,
    ProbeBatch,
    RecordedStates,
    StabilityStatistics,
    measurement_of,
    supported_stats,
)
from tests.support.models import tiny_model

pytestmark = pytest.mark.fast

FIELDS = tuple(f.name for f in dataclasses.fields(CaptureNeeds))


def needs_of(chosen) -> CaptureNeeds:
    return CaptureNeeds(**{name: name in chosen for name in FIELDS})


# ------------------------------------------------------------------------------------------------ what is recorded


@pytest.mark.parametrize("left,right", [((), ()), (("maps",), ("values",)), (("logits", "blocks"), ("activations",))])
def test_capture_needs_union_is_the_fieldwise_or(left, right):
    union = needs_of(left) | needs_of(right)
    assert {name for name in FIELDS if getattr(union, name)} == set(left) | set(right)


def test_capture_needs_say_what_capture_and_the_forward_are_asked_for():
    """Every one of the 64 combinations of needs, against the rule written out."""
    for k in range(len(FIELDS) + 1):
        for chosen in itertools.combinations(FIELDS, k):
            needs = needs_of(chosen)
            assert needs.any == bool(chosen), chosen
            assert needs.beyond_maps == bool(set(chosen) - {"maps"}), chosen
            assert needs.capture_arguments() == {
                "record_values": "values" in chosen,
                "record_logits": "logits" in chosen,
            }, chosen
            hidden = bool({"hidden_states", "blocks", "activations"} & set(chosen))
            assert needs.forward_arguments() == ({"output_hidden_states": True} if hidden else {}), chosen


def test_recorded_states_leave_unmet_only_what_they_lack():
    everything = needs_of(FIELDS)
    complete, partial = SimpleNamespace(complete=True), SimpleNamespace(complete=False)
    full = RecordedStates(torch.zeros(1), torch.zeros(1), {"max_logit": torch.zeros(1)}, complete, complete)
    unmet = full.unmet(everything)
    assert not (unmet.values or unmet.logits or unmet.blocks or unmet.activations)
    assert unmet.maps and unmet.hidden_states  # passed through: the states answer neither
    empty = RecordedStates(torch.zeros(1), None, {}, partial, None).unmet(everything)
    assert empty.values and empty.logits and empty.blocks and empty.activations
    assert not RecordedStates(None, None).unmet(CaptureNeeds()).any  # nothing asked, nothing unmet


def test_each_measurement_asks_the_shared_forward_for_what_its_statistics_read():
    assert MapStatistics().needs(STAT_NAMES) == CaptureNeeds(maps=True)
    assert NormStatistics().needs(NormStatistics.names) == CaptureNeeds(maps=True, values=True)
    assert GradientStatistics().needs(GradientStatistics.names) == CaptureNeeds()
    assert IntegratedGradientsStatistic().needs(IntegratedGradientsStatistic.names) == CaptureNeeds()
    assert OutlierStatistics().needs(OUTLIER_NAMES) == CaptureNeeds(activations=True)
    rollout = tuple(n for n in MIXING_NAMES if "rollout" in n)
    blocks = tuple(n for n in MIXING_NAMES if "rollout" not in n)
    assert rollout and blocks
    assert MixingStatistics().needs(rollout) == CaptureNeeds(maps=True)  # rollout reads the maps alone
    assert MixingStatistics().needs(blocks[:1]) == CaptureNeeds(maps=True, values=True, blocks=True)
    assert StabilityStatistics().needs((QK_NAME,)) == CaptureNeeds()  # from the weights alone
    assert StabilityStatistics().needs(LOGIT_NAMES[:1]) == CaptureNeeds(logits=True)
    stages = {type(m).__name__: m.stage for m in MEASUREMENTS}
    assert stages["GradientStatistics"] == "before" and stages["IntegratedGradientsStatistic"] == "after"
    assert {stages[n] for n in stages if n not in ("GradientStatistics", "IntegratedGradientsStatistic")} == {"forward"}


def test_measurement_of_finds_the_one_measurement_of_a_name():
    for measurement in MEASUREMENTS:
        for name in measurement.names:
            assert measurement_of(name) is measurement, name
    assert sorted(n for m in MEASUREMENTS for n in m.names) == sorted(ALL_STATS)
    only_maps = (MEASUREMENTS[2],)
    assert measurement_of("cls_mass", only_maps) is only_maps[0]
    with pytest.raises(KeyError, match="head_importance"):
        measurement_of("head_importance", only_maps)
    with pytest.raises(KeyError, match="no_such_statistic"):
        measurement_of("no_such_statistic")


def test_a_model_that_gives_every_statistic_keeps_every_name():
    model = tiny_model("bert")
    names = frozenset(ALL_STATS)
    assert supported_stats(names, requested=True, encoder=model.bert, owner="test") == names


# ------------------------------------------------------------------------------------------------ the statistics

LENGTHS = (9, 6, 3)  # real tokens per example; T = 9, so examples 1 and 2 are padded
LAYERS, HEADS, T = 2, 3, 9


def random_roles(seed: int = 0) -> TokenRoles:
    """[CLS] first, [SEP] last of each example's real tokens, "."/"," on a few tokens between."""
    rng = np.random.default_rng(seed)
    real = np.zeros((len(LENGTHS), T), bool)
    cls, sep, punct = (np.zeros_like(real) for _ in range(3))
    for b, n in enumerate(LENGTHS):
        real[b, :n] = True
        cls[b, 0] = sep[b, n - 1] = True
        punct[b, 1 : n - 1] = rng.random(n - 2) < 0.4
    return TokenRoles(*(torch.from_numpy(m) for m in (real, cls, sep, punct)))


def random_maps(seed: int = 0) -> torch.Tensor:
    """Row-stochastic maps over each example's real keys, with garbage (finite) on pad rows and columns."""
    rng = np.random.default_rng(seed)
    attn = rng.uniform(-3.0, 3.0, size=(len(LENGTHS), LAYERS, HEADS, T, T))
    for b, n in enumerate(LENGTHS):
        scores = rng.normal(size=(LAYERS, HEADS, n, n)) * 2
        rows = np.exp(scores - scores.max(-1, keepdims=True))
        attn[b, :, :, :n, :n] = rows / rows.sum(-1, keepdims=True)
    return torch.tensor(attn, dtype=torch.float32)


def loop_map_stats(attn: torch.Tensor, roles: TokenRoles) -> dict[str, np.ndarray]:
    """Mass on [CLS], [SEP] and "."/",", and on the token itself, the previous and the next token, each the mean
    over an example's real queries of the attention to those keys (Clark et al. 2019), one number at a time."""
    maps = attn.double().numpy()
    masks = {"cls_mass": roles.cls, "sep_mass": roles.sep, "punct_mass": roles.punct}
    out = {name: np.zeros((len(LENGTHS), LAYERS, HEADS)) for name in (*masks, "self", "prev", "next")}
    for b, n in enumerate(LENGTHS):
        for layer in range(LAYERS):
            for head in range(HEADS):
                total = dict.fromkeys(out, 0.0)
                for i in range(n):
                    for j in range(n):
                        a = float(maps[b, layer, head, i, j])
                        for name, mask in masks.items():
                            total[name] += a if bool(mask[b, j]) else 0.0
                        total["self"] += a if j == i else 0.0
                        total["prev"] += a if j == i - 1 else 0.0
                        total["next"] += a if j == i + 1 else 0.0
                for name, value in total.items():
                    out[name][b, layer, head] = value / n
    return out


def test_map_statistics_are_the_loop_on_each_example_however_it_is_padded():
    attn, roles = random_maps(), random_roles()
    names = ("cls_mass", "sep_mass", "punct_mass", "self", "prev", "next")
    assert set(names) <= set(MapStatistics.names) and not set(names) & set(DRIFT_NAMES)
    context = SimpleNamespace(settings=SimpleNamespace(compat_length=None))
    measuring = MapStatistics().start(names, context, CaptureNeeds(maps=True))
    batch = ProbeBatch(index=0, rows=(0, 1, 2), inputs={}, roles=roles, attentions=attn)
    got = measuring.measure(batch)
    want = loop_map_stats(attn, roles)
    assert set(got) == set(names)
    for name in names:
        assert got[name].shape == (len(LENGTHS), LAYERS, HEADS), name
        np.testing.assert_allclose(got[name].double().numpy(), want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    grids = {"cls_mass": got["cls_mass"][0]}
    assert measuring.finish(grids) is grids  # nothing to finish: the grids as the pass averaged them


def loop_qk_spectral_norms(model) -> np.ndarray:
    """Each head's largest singular value of W_Q^h (W_K^h)ᵀ as a d_model × d_model float64 matrix, times 1/√d_head:
    numpy's SVD of the product itself (the package never forms it)."""
    layers = model.bert.encoder.layer
    heads = model.config.num_attention_heads
    d_head = model.config.hidden_size // heads
    out = np.zeros((len(layers), heads))
    for index, layer in enumerate(layers):
        w_q = layer.attention.self.query.weight.detach().double().numpy()  # [out, in]: q = W x
        w_k = layer.attention.self.key.weight.detach().double().numpy()
        for h in range(heads):
            q_h, k_h = w_q[h * d_head : (h + 1) * d_head], w_k[h * d_head : (h + 1) * d_head]
            bilinear = q_h.T @ k_h  # x_iᵀ (Q_hᵀ K_h) x_j = q_i · k_j without biases
            out[index, h] = np.linalg.svd(bilinear, compute_uv=False)[0] / math.sqrt(d_head)
    return out


def test_stability_statistics_pass_the_logit_summary_through_and_finish_with_the_weights_spectral_norms():
    model = tiny_model("bert")
    context = SimpleNamespace(encoder=model.bert)
    summary = {"max_logit": torch.rand(3, 3, 4), "logit_std": torch.rand(3, 3, 4)}
    batch = ProbeBatch(0, (0, 1, 2), {}, random_roles(), capture=SimpleNamespace(logit_summary=summary))
    both = StabilityStatistics().start(("max_logit", QK_NAME), context, CaptureNeeds(logits=True))
    measured = both.measure(batch)
    assert list(measured) == ["max_logit"] and measured["max_logit"] is summary["max_logit"]
    grids = both.finish({"max_logit": torch.zeros(3, 4)})
    assert set(grids) == {"max_logit", QK_NAME} and grids[QK_NAME].dtype == torch.float32
    np.testing.assert_allclose(grids[QK_NAME].double().numpy(), loop_qk_spectral_norms(model), rtol=1e-5)
    weights_only = StabilityStatistics().start((QK_NAME,), context, CaptureNeeds())
    assert weights_only.measure(batch) == {}  # no logit summary read
    logits_only = StabilityStatistics().start(("logit_std",), context, CaptureNeeds(logits=True))
    assert set(logits_only.finish({"logit_std": torch.zeros(3, 4)})) == {"logit_std"}


def random_hidden(seed: int = 0, d: int = 8) -> list[torch.Tensor]:
    """Hidden states ``[rows, T, d]`` per layer (the embeddings first) with a few large components, and huge values on
    padding, which no statistic may see."""
    gen = torch.Generator().manual_seed(seed)
    states = []
    for _ in range(LAYERS + 1):
        x = torch.randn(len(LENGTHS), T, d, generator=gen)
        x[torch.rand(x.shape, generator=gen) < 0.05] *= 9.0
        for b, n in enumerate(LENGTHS):
            x[b, n:] = 1000.0
        states.append(x)
    return states


def loop_outliers(hidden: list[torch.Tensor], roles: TokenRoles) -> dict[str, np.ndarray]:
    """Per layer, over every component of every real token: max |x|, Pearson's kurtosis, the dimension with the
    largest |x| and each role's max |x| (module doc of heads.outliers.activations)."""
    out = {n: np.zeros(LAYERS) for n in ("residual_inf_norm", "residual_kurtosis", "outlier_dim")}
    role_masks = {"cls": roles.cls, "sep": roles.sep, "punct": roles.punct}
    for role in (*role_masks, "content"):
        out[f"{role}_inf_norm"] = np.zeros(LAYERS)
    for layer in range(LAYERS):
        values, by_role, dim_max = [], {r: -math.inf for r in (*role_masks, "content")}, {}
        x = hidden[layer + 1].double().numpy()
        for b, n in enumerate(LENGTHS):
            for t in range(n):
                delimiter = [r for r, m in role_masks.items() if bool(m[b, t])]
                for role in delimiter or ["content"]:
                    by_role[role] = max(by_role[role], max(abs(v) for v in x[b, t]))
                for k, v in enumerate(x[b, t]):
                    values.append(float(v))
                    dim_max[k] = max(dim_max.get(k, 0.0), abs(float(v)))
        mean = sum(values) / len(values)
        m2 = sum((v - mean) ** 2 for v in values) / len(values)
        m4 = sum((v - mean) ** 4 for v in values) / len(values)
        out["residual_inf_norm"][layer] = max(abs(v) for v in values)
        out["residual_kurtosis"][layer] = m4 / m2**2
        out["outlier_dim"][layer] = max(dim_max, key=dim_max.get)
        for role, value in by_role.items():
            out[f"{role}_inf_norm"][layer] = value
    return out


def test_outlier_statistics_from_the_hidden_states_are_the_loop_over_real_tokens():
    roles, hidden = random_roles(seed=3), random_hidden(seed=3)
    names = ("residual_inf_norm", "residual_kurtosis", "outlier_dim", "outlier_dim_overlap") + tuple(
        f"{r}_inf_norm" for r in ("cls", "sep", "punct", "content")
    )
    context = SimpleNamespace(layers=LAYERS, tokenizer=None, outlier_dims=None)
    measuring = OutlierStatistics().start(names, context, CaptureNeeds(activations=True))
    first = SimpleNamespace(hidden_states=[h[:2] for h in hidden])
    batch = ProbeBatch(0, (0, 1), {}, roles.select([0, 1]), outputs=first)
    assert measuring.measure(batch) == {}  # per layer, not per head: everything comes at the end
    rest = ProbeBatch(1, (2,), {}, roles.select([2]), outputs=SimpleNamespace(hidden_states=[h[2:] for h in hidden]))
    measuring.measure(rest)
    grids = measuring.finish({})
    want = loop_outliers(hidden, roles)
    assert set(grids) == set(names)
    for name, values in want.items():
        assert grids[name].shape == (LAYERS, 1), name
        np.testing.assert_allclose(grids[name][:, 0].numpy(), values, rtol=1e-9, err_msg=name)
    np.testing.assert_array_equal(grids["outlier_dim_overlap"].numpy(), 1.0)  # the first pass is its own reference
    taken = measuring.references()["outlier_dims"]
    assert taken.shape == (LAYERS, 3)
    np.testing.assert_array_equal(taken[:, 0].numpy(), want["outlier_dim"])
    # a later pass compares with the first one's dimensions and takes none of its own
    later_context = SimpleNamespace(layers=LAYERS, tokenizer=None, outlier_dims=taken)
    later = OutlierStatistics().start(names, later_context, CaptureNeeds(activations=True))
    later.measure(batch)
    later.measure(rest)
    again = later.finish({})
    np.testing.assert_array_equal(again["outlier_dim_overlap"].numpy(), 1.0)  # the same data, the same dimensions
    assert later.references() == {}
