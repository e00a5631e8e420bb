"""Kovaleva's pattern classes by rule (bertwatch.core.rules, bertwatch.heads.maps.patterns) on hand-made maps of each
class at several lengths, judged against a uniform head; and their shares over training in the event files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.core import rules
from bertwatch.heads.maps.patterns import grid_pattern_shares, pattern_classes, uniform_baselines
from bertwatch.heads.maps.stats import aggregate, compute_stats
from bertwatch.heads.roles import TokenRoles


def roles_for(n: int, pair: bool) -> TokenRoles:
    """[CLS] x … [SEP] (y … [SEP]) of n tokens, no padding."""
    real = torch.ones(1, n, dtype=torch.bool)
    cls = torch.zeros(1, n, dtype=torch.bool)
    cls[0, 0] = True
    sep = torch.zeros(1, n, dtype=torch.bool)
    sep[0, n - 1] = True
    segment = torch.zeros(1, n, dtype=torch.long)
    if pair:
        middle = n // 2
        sep[0, middle] = True
        segment[0, middle + 1 :] = 1
    return TokenRoles(real, cls, sep, torch.zeros(1, n, dtype=torch.bool), segment)


def hand_made(n: int, roles: TokenRoles) -> dict[str, np.ndarray]:
    """One map per class, rows summing to 1."""
    maps = {}
    vertical = np.zeros((n, n))
    vertical[:, 0] = vertical[:, n - 1] = 0.5
    maps["vertical"] = vertical
    diagonal = np.zeros((n, n))
    for i in range(n):
        diagonal[i, max(i - 1, 0)] = 1.0
    maps["diagonal"] = diagonal
    maps["vertical+diagonal"] = 0.5 * vertical + 0.5 * diagonal
    maps["heterogeneous"] = np.full((n, n), 1.0 / n)
    seg = roles.segment[0].numpy()
    special = (roles.cls | roles.sep)[0].numpy()
    block = np.zeros((n, n))
    for i in range(n):
        same = [j for j in range(n) if seg[j] == seg[i] and not special[j]]
        block[i, same] = 1.0 / len(same)
    maps["block"] = block
    return maps


def classify(n: int, pair: bool, with_baseline: bool = True) -> dict[str, str]:
    roles = roles_for(n, pair)
    maps = hand_made(n, roles)
    names = list(maps)
    attn = torch.tensor(np.stack([maps[k] for k in names]), dtype=torch.float32)[None, None]  # [1, 1, heads, n, n]
    grids = aggregate(compute_stats(attn, roles, rules.PATTERN_STATS))
    uniform = uniform_baselines(roles) if with_baseline else None
    return dict(zip(names, pattern_classes(grids, uniform=uniform)[0]))


@pytest.mark.parametrize("n", [6, 9, 16, 40])
def test_each_class_is_recognised_at_several_lengths(n):
    got = classify(n, pair=False)
    for name in ("vertical", "diagonal", "vertical+diagonal", "heterogeneous"):
        assert got[name] == name, (n, got)


@pytest.mark.parametrize("n", [24, 40])
def test_block_on_pairs(n):
    got = classify(n, pair=True)
    assert got["block"] == "block", got
    assert got["heterogeneous"] == "heterogeneous" and got["vertical"] == "vertical", got


def test_raw_rules_had_the_short_sentence_bias_the_baseline_removes():
    assert classify(6, pair=False, with_baseline=False)["heterogeneous"] == "vertical+diagonal"
    assert classify(6, pair=False)["heterogeneous"] == "heterogeneous"


def test_uniform_baselines_equal_the_statistics_of_uniform_maps():
    real = torch.tensor(
        [[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0]], dtype=torch.bool
    )
    cls = torch.zeros_like(real)
    cls[:, 0] = True
    sep = torch.zeros_like(real)
    sep[0, 5], sep[1, 3], sep[1, 7], sep[2, 2] = True, True, True, True
    roles = TokenRoles(real, cls, sep, torch.zeros_like(real))
    n = real.sum(-1, keepdim=True).float()
    attn = (real[:, None, :].float() / n[:, :, None]).expand(-1, 8, -1)[:, None, None]
    grids = {k: float(v) for k, v in aggregate(compute_stats(attn, roles, rules.PATTERN_REQUIRED)).items()}
    want = {
        "vertical": grids["cls_mass"] + grids["sep_mass"],
        "diagonal": grids["prev"] + grids["next"] + grids["self"],
    }
    got = uniform_baselines([roles.select(slice(0, 2)), roles.select(2)])
    assert got == pytest.approx(want, abs=1e-6)


def test_shares_count_every_head_once():
    grids = {k: np.zeros((2, 3)) for k in rules.PATTERN_REQUIRED}
    grids["cls_mass"][0, :2] = 0.9
    grids["prev"][1, 0] = 0.9
    shares = grid_pattern_shares(grids)
    assert shares == pytest.approx(
        {"heterogeneous": 3 / 6, "vertical": 2 / 6, "diagonal": 1 / 6, "vertical+diagonal": 0.0, "block": 0.0}
    )
    assert rules.rules_json()["patterns"]["mixed"] == rules.PATTERN_THRESHOLDS.mixed
