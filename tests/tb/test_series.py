"""The plugin's stacked series, its byte-bounded cache and the decimation of its JSON responses (``tb.series``),
against plain reimplementations written here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from tensorboard import errors

from bertwatch.tb.series import LRU, Series, decimate_indices, f32_list, minmax_indices

pytestmark = pytest.mark.fast


def _datum(step: int, value, wall: float | None = None):
    return SimpleNamespace(step=step, wall_time=float(step) if wall is None else wall, numpy=np.asarray(value))


def test_points_are_stacked_by_step_a_repeated_step_keeps_its_last_datum_and_the_newest_shape_wins() -> None:
    points = [
        _datum(10, np.full((2, 3), 1.0)),
        _datum(0, np.full((2, 3), 0.0)),
        _datum(5, np.full((4, 3), 9.0)),  # an older shape: dropped
        _datum(10, np.full((2, 3), 2.0), wall=99.0),  # step 10 again (a resumed run): this one is kept
    ]
    series = Series.from_points(("sig",), points, {"kind": "x"})
    assert series.steps.tolist() == [0, 10]
    assert series.values.dtype == np.float32 and series.values.shape == (2, 2, 3)
    assert series.values[:, 0, 0].tolist() == [0.0, 2.0] and series.wall.tolist() == [0.0, 99.0]
    assert series.nbytes == series.values.nbytes + series.steps.nbytes + series.wall.nbytes


def test_range_layer_means_and_step_lookups() -> None:
    grid = np.array([[1.0, np.nan, 3.0], [np.inf, -2.0, 0.0]])
    series = Series.from_points(None, [_datum(0, grid), _datum(4, grid * 2)], {})
    assert series.value_range() == (-4.0, 6.0)  # finite values only
    np.testing.assert_allclose(series.layer_means(), [[2.0, np.inf], [4.0, np.inf]])  # NaN skipped per layer
    assert series.index_of(4) == 1 and series.index_at_or_before(3) == 0 and series.index_at_or_before(-1) is None
    with pytest.raises(errors.NotFoundError, match="no step 3"):
        series.index_of(3)
    empty = Series.from_points(None, [_datum(0, np.full((1, 1), np.nan))], {})
    assert empty.value_range() == (None, None)


def test_decimation_keeps_at_most_the_points_asked_evenly_spaced_ends_included() -> None:
    assert decimate_indices(5, 0).tolist() == [0, 1, 2, 3, 4] and decimate_indices(5, 10).tolist() == list(range(5))
    kept = decimate_indices(1000, 7)
    assert kept.tolist() == [round(i * 999 / 6) for i in range(7)]


def test_minmax_decimation_keeps_every_buckets_extremes_so_a_spike_survives() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=300)
    values[137], values[201] = 50.0, -50.0  # spikes
    values[50] = np.nan
    kept = minmax_indices(values, 30)
    assert len(kept) <= 30 + 2 and {0, 299, 137, 201} <= set(kept.tolist())
    bounds = np.linspace(0, 300, 11).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):  # each bucket's min and max (NaN ignored) are kept
        chunk = values[a:b]
        assert a + int(np.nanargmin(chunk)) in kept and a + int(np.nanargmax(chunk)) in kept
    assert minmax_indices(values[:10], 30).tolist() == list(range(10))


def test_numbers_print_as_the_shortest_decimal_of_their_float32() -> None:
    assert f32_list(np.array([0.1, 1 / 3], dtype=np.float32)) == [0.1, 0.33333334]
    assert f32_list([[0.1]]) == [[0.1]]  # float64 input is rounded to float32 first
    out = f32_list(np.array([np.nan, np.inf], dtype=np.float32))
    assert np.isnan(out[0]) and out[1] == float("inf")


def test_the_cache_drops_the_least_recently_used_past_its_bytes_but_keeps_one_item() -> None:
    cache = LRU(100)
    cache.put("a", "A", 40)
    cache.put("b", "B", 40)
    assert cache.get("a") == ("A", 40)  # "a" is now the most recent
    cache.put("c", "C", 40)  # 120 bytes: "b" goes
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    cache.put("a", "A2", 30)  # replacing counts the new size only
    cache.put("d", "D", 30)
    assert cache.get("c") is not None and cache.get("a") == ("A2", 30)
    cache.put("huge", "H", 500)  # larger than the bound alone: kept, everything else dropped
    assert cache.get("huge") is not None and cache.get("a") is None and cache.get("d") is None
