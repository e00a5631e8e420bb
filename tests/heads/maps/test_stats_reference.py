"""Drift against a reference cached as one cropped map per example (what the monitor keeps), against the float64
loop reference of test_stats.py on the padded maps: right-padded, offset spans, float16, every blocking."""

from __future__ import annotations

import pytest
import torch

import bertwatch.heads.host as host
import bertwatch.heads.maps.row_reductions as row_reductions
from bertwatch.heads.maps.stats import DRIFT_NAMES, STAT_NAMES, compute_stats
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast

from tests.support.stats_oracle import assert_matches, other_maps, random_case, reference_stats  # noqa: E402


def cropped(maps: torch.Tensor, real: torch.Tensor) -> list[torch.Tensor]:
    """Per example ``[L, H, n, n]`` over its real positions, cut by plain indexing (not by bertwatch)."""
    out = []
    for b in range(maps.shape[0]):
        idx = [j for j in range(maps.shape[-1]) if real[b, j]]
        out.append(maps[b][:, :, idx][:, :, :, idx].clone())
    return out


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("block", [None, 1, 144 * 5])
@pytest.mark.parametrize("per_example", [True, False])
def test_cropped_reference_matches_the_loop_on_padded_maps(monkeypatch, seed, block, per_example):
    attn, roles = random_case(seed)
    assert not bool(roles.real[:, 0].all()) and bool(roles.real[:, 0].any())  # offset spans and prefixes
    ref = other_maps(attn, seed + 50)
    monkeypatch.setattr(host, "HOST_DEVICES", ("cpu",) if per_example else ())  # () : the device path
    if block is not None:
        monkeypatch.setattr(row_reductions, "_CPU_BLOCK", block)
        monkeypatch.setattr(row_reductions, "_DEVICE_BLOCK", block)
    got = compute_stats(attn, roles, reference=cropped(ref, roles.real))
    assert list(got) == list(STAT_NAMES + DRIFT_NAMES)
    assert_matches(got, reference_stats(attn, roles, ref))


def test_cropped_float16_reference_equals_the_padded_float16_one():
    attn, roles = random_case(4)
    ref = other_maps(attn, 3).half()
    padded = compute_stats(attn, roles, DRIFT_NAMES, ref)
    got = compute_stats(attn, roles, DRIFT_NAMES, cropped(ref, roles.real))
    for name in DRIFT_NAMES:
        assert_float32_close(got[name], padded[name], msg=name)
    assert_matches(got, {n: v for n, v in reference_stats(attn, roles, ref.float()).items() if n in DRIFT_NAMES})


def test_cropped_reference_of_the_wrong_shape_is_refused():
    attn, roles = random_case(2)
    maps = cropped(other_maps(attn, 1), roles.real)
    with pytest.raises(ValueError, match="cropped examples"):
        compute_stats(attn, roles, DRIFT_NAMES, maps[:-1])
    maps[5] = maps[5][..., :-1, :-1]
    with pytest.raises(ValueError, match="real tokens"):
        compute_stats(attn, roles, DRIFT_NAMES, maps)
