"""Per-example statistics to grids (``heads.aggregate``): the unweighted mean over examples with NaN examples
skipped, for one batch and across batches, against a float64 loop over the examples written here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertwatch.heads.aggregate import StatsAccumulator, aggregate

pytestmark = pytest.mark.fast


def plain_mean(examples: list[np.ndarray]) -> np.ndarray:
    """[layers, heads]: per cell, the mean of the examples whose value there is not NaN (NaN when none is)."""
    layers, heads = examples[0].shape
    out = np.full((layers, heads), math.nan)
    for l in range(layers):
        for h in range(heads):
            kept = [float(e[l, h]) for e in examples if not math.isnan(float(e[l, h]))]
            if kept:
                out[l, h] = sum(kept) / len(kept)
    return out


def _batches(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    batches = [torch.rand(n, 3, 4, generator=g, dtype=torch.float64) * 10 for n in (5, 1, 7)]
    batches[0][2, 1, 1] = math.nan  # one example lacks one cell
    batches[1][0, 0, :] = math.nan  # a whole row missing in another
    for b in batches:
        b[:, 2, 3] = math.nan  # no example defines L2 H3
    return batches


def test_one_batch_is_the_mean_over_its_examples_skipping_nan() -> None:
    batch = _batches(0)[0]
    grids = aggregate({"entropy": batch, "cls_mass": batch.float() / 10})
    expected = plain_mean(list(batch.numpy()))
    assert grids["entropy"].dtype == torch.float32 and grids["entropy"].shape == (3, 4)
    np.testing.assert_allclose(grids["entropy"].numpy(), expected, rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(grids["cls_mass"].numpy(), expected / 10, rtol=1e-6, equal_nan=True)


def test_several_batches_weigh_every_example_alike_not_every_batch() -> None:
    batches = _batches(1)
    acc = StatsAccumulator()
    for b in batches:
        acc.add({"entropy": b.float()})
    result = acc.result()["entropy"]
    examples = [e for b in batches for e in b.float().double().numpy()]
    assert result.dtype == torch.float32 and result.device.type == "cpu"
    np.testing.assert_allclose(result.numpy(), plain_mean(examples), rtol=1e-6, equal_nan=True)
    per_batch_mean = np.mean([np.mean(b.numpy()[:, 0, 2]) for b in batches])
    assert not np.isclose(float(result[0, 2]), per_batch_mean)  # unequal batches: a different number
    assert math.isnan(float(result[2, 3]))


def test_a_statistic_first_seen_in_a_later_batch_counts_from_there() -> None:
    acc = StatsAccumulator()
    acc.add({"a": torch.ones(2, 1, 1)})
    acc.add({"a": torch.full((1, 1, 1), 4.0), "b": torch.full((3, 1, 1), 2.0)})
    out = acc.result()
    assert float(out["a"]) == pytest.approx(2.0) and float(out["b"]) == pytest.approx(2.0)
