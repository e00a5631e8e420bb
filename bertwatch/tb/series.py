"""Stacked time series of the plugin's tensor tags, a byte-bounded LRU, and the decimation and number
formatting of the JSON responses (numpy only)."""

from __future__ import annotations

import collections
import threading
import warnings

import numpy as np
from tensorboard import errors

__all__ = ["LRU", "Series", "decimate_indices", "f32_list", "minmax_indices"]


def f32_list(array) -> list:
    """Nested lists of floats printed as the shortest decimal that round-trips the float32/16 value."""
    array = np.asarray(array)
    if array.dtype not in (np.float16, np.float32):
        array = array.astype(np.float32)
    return array.astype(str).astype(np.float64).tolist()


def decimate_indices(n: int, max_points: int) -> np.ndarray:
    """Evenly spaced indices, at most ``max_points`` of ``n`` (all when ``max_points`` is 0)."""
    if max_points <= 0 or n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


def minmax_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices keeping each bucket's first, min and max and the last point, so spikes survive decimation."""
    n = len(values)
    if max_points <= 0 or n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 3)
    bounds = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = [0, n - 1]
    finite = np.where(np.isnan(values), np.inf, values)
    finite_neg = np.where(np.isnan(values), -np.inf, values)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b <= a:
            continue
        keep += [a, a + int(np.argmin(finite[a:b])), a + int(np.argmax(finite_neg[a:b]))]
    return np.unique(np.asarray(keep, dtype=np.int64))


class Series:
    """All kept steps of one tensor tag, stacked: ``steps [N]``, ``wall [N]``, ``values [N, ...]``."""

    __slots__ = ("signature", "steps", "wall", "values", "content", "_layer_means", "_range")

    def __init__(self, signature, steps, wall, values, content):
        self.signature = signature
        self.steps = steps
        self.wall = wall
        self.values = values
        self.content = content
        self._layer_means = None
        self._range = None

    @classmethod
    def from_points(cls, signature, points, content) -> Series:
        """Stacked from a data provider's ``TensorDatum`` list (not empty), by step: a step logged twice (e.g. a
        resumed run) keeps its last datum, a shape change keeps the newest shape."""
        points = sorted(points, key=lambda d: d.step)
        shape = np.shape(points[-1].numpy)
        points = [d for d in points if np.shape(d.numpy) == shape]
        steps = np.fromiter((d.step for d in points), dtype=np.int64, count=len(points))
        if len(np.unique(steps)) != len(steps):
            _, first_from_end = np.unique(steps[::-1], return_index=True)
            points = [points[len(points) - 1 - i] for i in first_from_end]
            steps = np.fromiter((d.step for d in points), dtype=np.int64, count=len(points))
        wall = np.fromiter((d.wall_time for d in points), dtype=np.float64, count=len(points))
        values = np.stack([np.asarray(d.numpy, dtype=np.float32) for d in points])
        return cls(signature, steps, wall, values, content)

    def value_range(self) -> tuple:
        """(min, max) over the finite values of every step, or (None, None)."""
        if self._range is None:
            finite = self.values[np.isfinite(self.values)]
            self._range = (float(finite.min()), float(finite.max())) if finite.size else (None, None)
        return self._range

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.steps.nbytes + self.wall.nbytes

    def index_of(self, step: int) -> int:
        i = int(np.searchsorted(self.steps, step))
        if i >= len(self.steps) or self.steps[i] != step:
            raise errors.NotFoundError("no step %d" % step)
        return i

    def index_at_or_before(self, step: int) -> int | None:
        i = int(np.searchsorted(self.steps, step, side="right")) - 1
        return i if i >= 0 else None

    def layer_means(self) -> np.ndarray:
        if self._layer_means is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                self._layer_means = np.nanmean(self.values, axis=2)
        return self._layer_means


class LRU:
    """A small thread-safe LRU bounded by total bytes."""

    def __init__(self, max_bytes: int):
        self._max_bytes = max_bytes
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key, item, nbytes: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (item, nbytes)
            self._bytes += nbytes
            while self._bytes > self._max_bytes and len(self._items) > 1:
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size
