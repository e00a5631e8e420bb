"""Clark's head clustering: JS distances against plain loops and scipy, MDS on a known geometry, TensorBoard."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

import bertwatch.linguistics.clustering as clustering
from bertwatch.linguistics.clustering import HeadDistances, clustering_figure, js_rows, mds_embedding


def _plain_js(p: np.ndarray, q: np.ndarray) -> float:
    n = len(p)
    p = 0.999 * p + 0.001 / n
    q = 0.999 * q + 0.001 / n
    total = 0.0
    for j in range(n):
        m = 0.5 * (p[j] + q[j])
        total += 0.5 * p[j] * math.log(p[j] / m) + 0.5 * q[j] * math.log(q[j] / m)
    return total


def _examples(layers=2, heads=3, lengths=(5, 8), seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.dirichlet(np.ones(n) * 0.3, size=(layers, heads, n)).astype(np.float32) for n in lengths]


def test_js_rows_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(9), size=2)
    ps, qs = 0.999 * p + 0.001 / 9, 0.999 * q + 0.001 / 9
    assert js_rows(torch.tensor(p), torch.tensor(q)).item() == pytest.approx(jensenshannon(ps, qs) ** 2, rel=1e-9)


@pytest.mark.parametrize("chunk", [1 << 22, 7])
def test_distances_are_sums_over_tokens_of_js(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clustering, "_CHUNK_ELEMENTS", chunk)
    examples = _examples()
    acc = HeadDistances(2, 3)
    for ex in examples:
        acc.add(torch.from_numpy(ex))
    d = acc.distances
    assert d.shape == (6, 6) and acc.tokens == 13 and acc.examples == 2
    for k1 in range(6):
        for k2 in range(6):
            expected = 0.0
            for ex in examples:
                flat = ex.reshape(6, *ex.shape[-2:])
                for i in range(ex.shape[-1]):
                    expected += _plain_js(flat[k1, i].astype(np.float64), flat[k2, i].astype(np.float64))
            assert d[k1, k2] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert np.all(np.diag(d) == 0) and np.allclose(d, d.T)


def test_add_batch_crops_padding() -> None:
    examples = _examples(lengths=(4, 6))
    padded = torch.full((2, 2, 3, 6, 6), 9.0)
    for b, ex in enumerate(examples):
        n = ex.shape[-1]
        padded[b, :, :, :n, :n] = torch.from_numpy(ex)
    one, two = HeadDistances(2, 3), HeadDistances(2, 3)
    one.add_batch(padded, [4, 6])
    for ex in examples:
        two.add(torch.from_numpy(ex))
    np.testing.assert_allclose(one.distances, two.distances)
    with pytest.raises(ValueError, match="must be"):
        one.add(torch.zeros(3, 3, 4, 4))


def test_mds_recovers_a_euclidean_configuration() -> None:
    rng = np.random.default_rng(2)
    points = rng.normal(size=(10, 2)) * 50
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    coords = mds_embedding(d, seed=0)
    got = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    assert coords.shape == (10, 2)
    np.testing.assert_allclose(got, d, rtol=1e-3, atol=1e-2 * d.max())
    np.testing.assert_allclose(mds_embedding(d, seed=0), coords)


def test_identical_heads_embed_together(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    layers, heads = 2, 3
    acc = HeadDistances(layers, heads)
    for n in (6, 9, 7):
        base = rng.dirichlet(np.ones(n) * 0.2, size=(layers, heads, n))
        base[1, 2] = base[0, 1]
        acc.add(torch.from_numpy(base))
    d = acc.distances
    assert d[1, 5] == pytest.approx(0.0, abs=1e-9) and d[1, 4] > 0.1
    coords = mds_embedding(d)
    spread = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    assert spread[1, 5] < 0.05 * spread.max()
    labels = [["cls", "", "broad"], ["", "prev", "cls"]]
    path = clustering_figure(coords, layers, heads, labels, tmp_path / "c.png", marks={(0, 1): "det"})
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_coordinates_go_to_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    from bertwatch.tb.writer.summary import SummaryWriter

    coords = np.arange(12, dtype=np.float32).reshape(6, 2)
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_embedding("js_mds", coords, 2, 3, step=0)
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    stored = tensor_util.make_ndarray(events.Tensors("bertwatch/clustering/js_mds")[0].tensor_proto)
    np.testing.assert_array_equal(stored, coords)
