"""The statistics of ``bertwatch.heads.maps.stats`` written again as plain loops (numpy, float64, one map at a time):
the independent reference the statistics' tests and the per-example oracles compare with; and the random maps
and roles those tests draw."""

from __future__ import annotations

import math

import numpy as np
import torch

from bertwatch.core.stat_names import DRIFT_NAMES, STAT_NAMES
from bertwatch.heads.roles import TokenRoles
from tests.support.tolerance import assert_float32_close


def _cropped(attn: np.ndarray, real: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the real tokens of example b, and its maps cropped to them `[L, H, n, n]`."""
    idx = np.nonzero(real[b])[0]
    return idx, attn[b][:, :, idx][:, :, :, idx]


def _js(p: list[float], q: list[float]) -> float:
    total = 0.0
    for pj, qj in zip(p, q):
        m = 0.5 * (pj + qj)
        total += 0.5 * pj * math.log(pj / m) + 0.5 * qj * math.log(qj / m)
    return total


def reference_stats(attn, roles: TokenRoles, ref=None, compat_length=None) -> dict[str, np.ndarray]:
    """Every statistic of docs/statistics.md with explicit loops over examples, layers, heads, queries and keys."""
    attn = np.asarray(attn, dtype=np.float64)
    ref = None if ref is None else np.asarray(ref, dtype=np.float64)
    real = roles.real.numpy()
    cls, sep, punct = (m.numpy() & real for m in (roles.cls, roles.sep, roles.punct))
    seg = None if roles.segment is None else roles.segment.numpy()
    batch, layers, heads = attn.shape[:3]
    names = STAT_NAMES + (DRIFT_NAMES if ref is not None else ())
    out = {name: np.full((batch, layers, heads), np.nan) for name in names}
    for b in range(batch):
        idx, maps = _cropped(attn, real, b)
        n = len(idx)
        cls_k = [k for k, t in enumerate(idx) if cls[b, t]]
        sep_k = [k for k, t in enumerate(idx) if sep[b, t]]
        punct_k = [k for k, t in enumerate(idx) if punct[b, t]]
        content = [k for k in range(n) if k not in cls_k and k not in sep_k]
        segs = None if seg is None else [int(seg[b, t]) for t in idx]
        pair = segs is not None and len({segs[k] for k in content}) >= 2
        for l in range(layers):
            for h in range(heads):
                A = maps[l, h]
                v = {name: 0.0 for name in ("cls_mass", "sep_mass", "punct_mass", "self", "prev", "next", "entropy")}
                for i in range(n):
                    for j in range(n):
                        v["cls_mass"] += A[i, j] * (j in cls_k) / n
                        v["sep_mass"] += A[i, j] * (j in sep_k) / n
                        v["punct_mass"] += A[i, j] * (j in punct_k) / n
                        v["self"] += A[i, j] * (j == i) / n
                        v["prev"] += A[i, j] * (j == i - 1) / n
                        v["next"] += A[i, j] * (j == i + 1) / n
                        s = 0.9999 * A[i, j] + 0.0001 / n
                        v["entropy"] -= s * math.log(s) / n
                for name, value in v.items():
                    out[name][b, l, h] = value
                if sep_k:
                    out["sep_to_sep"][b, l, h] = sum(A[i, j] for i in sep_k for j in sep_k) / len(sep_k)
                    out["sep_mass_kovaleva"][b, l, h] = max(sum(A[i, j] for i in range(n)) / n for j in sep_k)
                if cls_k:
                    row = [0.9999 * A[cls_k[0], j] + 0.0001 / n for j in range(n)]
                    out["cls_entropy"][b, l, h] = -sum(x * math.log(x) for x in row)
                if pair:
                    own = [sum(A[i, j] for j in content if segs[j] == segs[i]) for i in content]
                    out["intra_segment_mass"][b, l, h] = sum(own) / len(own)
                if ref is None:
                    continue
                R = ref[b][l, h][np.ix_(idx, idx)]
                out["drift_js"][b, l, h] = (
                    sum(
                        _js(
                            [0.999 * A[i, j] + 0.001 / n for j in range(n)],
                            [0.999 * R[i, j] + 0.001 / n for j in range(n)],
                        )
                        for i in range(n)
                    )
                    / n
                )
                size = n if compat_length is None else compat_length
                full_a, full_r = np.zeros((size, size)), np.zeros((size, size))
                full_a[:n, :n], full_r[:n, :n] = A, R
                for i in range(n, size):
                    for j in range(n):
                        full_a[i, j] = full_r[i, j] = 1.0 / n
                x, y = full_a.ravel(), full_r.ravel()
                out["drift_cosine"][b, l, h] = (x @ y) / math.sqrt((x @ x) * (y @ y))
    return out


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        g = got[name].double().cpu().numpy()
        w = want[name]
        assert g.shape == w.shape, name
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"NaN pattern of {name}")
        assert_float32_close(g, w, msg=name)


# ---------------------------------------------------------------- random maps and roles


def random_case(seed: int, batch: int = 8, layers: int = 2, heads: int = 3, length: int = 12, segments: bool = True):
    """Row-stochastic maps over random contiguous real spans (not only right-padded), garbage pad rows."""
    rng = np.random.default_rng(seed)
    attn = rng.uniform(-5.0, 5.0, size=(batch, layers, heads, length, length))
    real = np.zeros((batch, length), bool)
    cls = np.zeros_like(real)
    sep = np.zeros_like(real)
    punct = np.zeros_like(real)
    seg = np.zeros((batch, length), np.int64)
    lengths = [length, 1, 2] + list(rng.integers(3, length + 1, size=batch))
    for b in range(batch):
        n = int(lengths[b])
        start = int(rng.integers(0, length - n + 1))
        idx = np.arange(start, start + n)
        real[b, idx] = True
        if rng.random() < 0.8 and b != 3:
            cls[b, idx[0]] = True
        others = idx[1:] if cls[b, idx[0]] else idx
        if len(others):
            nsep = int(rng.integers(0, min(3, len(others)) + 1)) if b % 4 else min(2, len(others))
            sep[b, rng.choice(others, size=nsep, replace=False)] = True
            punct[b, others[rng.random(len(others)) < 0.25]] = True
        if segments and b % 2 == 0 and n >= 4:
            seg[b, idx[n // 2 :]] = 1
        for l in range(layers):
            for h in range(heads):
                for i in idx:
                    kind = rng.integers(0, 3)
                    if kind == 0:
                        row = rng.dirichlet(np.full(n, 0.1))
                    elif kind == 1:
                        row = rng.dirichlet(np.ones(n))
                    else:
                        row = np.zeros(n)
                        row[rng.integers(0, n)] = 1.0
                    attn[b, l, h, i] = 0.0
                    attn[b, l, h, i, idx] = row
    roles = TokenRoles(
        real=torch.from_numpy(real),
        cls=torch.from_numpy(cls),
        sep=torch.from_numpy(sep),
        punct=torch.from_numpy(punct & ~cls & ~sep),
        segment=torch.from_numpy(seg) if segments else None,
    )
    return torch.from_numpy(attn).float(), roles


def other_maps(attn: torch.Tensor, seed: int) -> torch.Tensor:
    """Reference maps on the same batch: the same real rows, perturbed and renormalised over the same keys."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.rand(attn.shape, generator=gen)
    keys = (attn.abs().sum(-2, keepdim=True) > 0).float()
    mixed = (attn.clamp_min(0) + 0.3 * noise) * keys
    return mixed / mixed.sum(-1, keepdim=True).clamp_min(1e-12)


def roles_from_strings(tokenizer, enc) -> TokenRoles:
    """Roles the way Clark's notebook finds them: by token string."""
    real = enc["attention_mask"].bool()
    toks = [tokenizer.convert_ids_to_tokens(row) for row in enc["input_ids"].tolist()]
    mask = lambda pred: torch.tensor([[pred(t) for t in row] for row in toks]) & real
    return TokenRoles(
        real,
        mask(lambda t: t == "[CLS]"),
        mask(lambda t: t == "[SEP]"),
        mask(lambda t: t in (".", ",")),
        enc["token_type_ids"],
    )
