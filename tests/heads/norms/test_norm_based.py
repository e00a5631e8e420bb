"""Norm-based attention (bertwatch.heads.norms.norm_based) against a float64 numpy loop over Kobayashi et al.'s
definition, with the value vectors recomputed by hand from the hidden states (x W_V + b_V) and the output projection
sliced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.heads.capture import UnsupportedModelError, capture
from bertwatch.heads.maps.stats import aggregate, compute_stats
from bertwatch.heads.norms.norm_based import NORM_NAMES, head_grams, norm_stats, output_projections, supports_norms
from bertwatch.heads.roles import TokenRoles
from tests.support.models import padded_batch, tiny_model  # noqa: E402
from tests.support.norm_oracle import reference  # noqa: E402
from tests.support.tiers import fast_subset


def batch_and_roles(length: int = 9):
    batch = padded_batch(batch=3, length=length, seed=3)
    real = batch["attention_mask"].bool()
    cls = torch.zeros_like(real)
    cls[:, 0] = True
    last = real.sum(-1) - 1
    sep = torch.zeros_like(real)
    sep[torch.arange(3), last] = True
    sep[0, 3] = True  # two [SEP]s in the first example
    punct = torch.zeros_like(real)
    punct[:, 2] = True
    punct[1, 4] = True
    return batch, TokenRoles(real, cls & real, sep & real, punct & real)


@pytest.mark.parametrize("model_type", fast_subset(["bert", "roberta", "distilbert"], ("bert",)))
def test_norm_statistics_match_a_loop_over_the_definition(model_type):
    model = tiny_model(model_type)
    batch, roles = batch_and_roles()
    with torch.no_grad(), capture(model, record_values=True) as cap:
        out = model(**batch, output_hidden_states=True)
    attn, values = cap.attentions, cap.values
    assert values.shape == (*attn.shape[:4], 32 // 4)
    got = norm_stats(attn, values, head_grams(model), roles)
    want = reference(attn, out.hidden_states, model, model_type, roles)
    for name in NORM_NAMES:
        np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-4, atol=1e-6, err_msg=name)
    # the norm weighting changes the weight-based mass, and pad rows and columns are ignored
    weight_based = compute_stats(attn, roles, ["cls_mass"])["cls_mass"]
    assert not torch.allclose(weight_based, got["cls_mass_norm"], atol=1e-3)
    noisy = attn.clone()
    noisy[~roles.real[:, None, None, :, None].expand_as(noisy)] = 7.0
    noisy[~roles.real[:, None, None, None, :].expand_as(noisy)] = 3.0
    noisy_values = values.masked_fill(~roles.real[:, None, None, :, None], 5.0)
    again = norm_stats(noisy, noisy_values, head_grams(model), roles)
    for name in NORM_NAMES:
        torch.testing.assert_close(again[name], got[name], msg=name)
    assert set(aggregate(got)) == set(NORM_NAMES)


@pytest.mark.fast
def test_output_projection_bias_is_excluded_and_ratio_is_one_for_a_single_key():
    model = tiny_model("bert")
    batch, roles = batch_and_roles()
    with torch.no_grad(), capture(model, record_values=True) as cap:
        model(**batch)
    one_hot = torch.zeros_like(cap.attentions)
    one_hot[..., 0] = 1.0  # every query on key 0: nothing to cancel
    got = norm_stats(one_hot, cap.values, head_grams(model), roles)
    torch.testing.assert_close(got["norm_ratio"], torch.ones_like(got["norm_ratio"]))
    torch.testing.assert_close(got["cls_mass_norm"], torch.ones_like(got["cls_mass_norm"]))
    with torch.no_grad():
        for linear in output_projections(model):
            linear.bias.add_(10.0)
    torch.testing.assert_close(head_grams(model), head_grams(tiny_model("bert")))


def test_families_without_a_known_projection_are_refused():
    assert supports_norms(tiny_model("distilbert"))
    model = tiny_model("albert")
    model.config.inner_group_num = 2
    assert not supports_norms(model)
    with pytest.raises(UnsupportedModelError, match="leave them out"):
        head_grams(model)
    with pytest.raises(ValueError, match="unknown norm statistic"):
        norm_stats(torch.zeros(1, 1, 1, 2, 2), torch.zeros(1, 1, 1, 2, 4), torch.zeros(1, 1, 4, 4), None, ["x"])


def test_report_shows_weight_and_norm_masses_side_by_side():
    from bertwatch.report.html import build_html

    weight = np.array([[0.8, 0.6], [0.1, 0.3]], np.float32)
    norm = np.array([[0.2, 0.1], [0.05, 0.25]], np.float32)
    grids = {name: {"first": (0, g), "last": (7, g)} for name, g in (("cls_mass", weight), ("cls_mass_norm", norm))}
    page = build_html([], training={"grids": grids, "source": "a run"}).replace(' class=""', "")
    assert "mass on [CLS] and [SEP] per layer, step 7" in page
    assert "<th>[CLS] weights</th><th>[CLS] norms</th><th>[CLS] weights − norms</th>" in page
    # layer 0: the mean over heads of each, then their gap
    assert "<td>0</td><td>0.700</td><td>0.150</td><td>0.550</td>" in page
