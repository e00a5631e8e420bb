"""The one tolerance rule of the tests: how far a value computed in float32 may be from its reference.

A float32 result differs from the exact value by rounding, and which roundings occur depends on the order of the
sums: the CPU's vector width (``ATEN_CPU_CAPABILITY``), the thread count, the batch shape. Every rounding is at
most ``EPS32`` relative to the *magnitudes that enter the operation*, not to the result. So a result is compared
with an absolute bound proportional to those magnitudes (``scale``), and with a relative bound where it is itself
of the size of its inputs:

    |got - want| <= ROUNDINGS * EPS32 * max(scale, |want|)

``scale`` is what the caller knows about its quantity: 1 for probabilities, attention masses, entropies and
cosines of float32 maps (their inputs are O(1)); ``max |input|`` for a difference or sum of inputs; and, for a
metric that cancels (a Pearson correlation near zero, a difference of two close losses), the factor by which the
metric amplifies a rounding of its inputs (see :func:`pearson_scale`). A value computed in float64 all the way
uses the same rule with ``eps=EPS64``.

``ROUNDINGS`` bounds how many float32 roundings of its scale a value of the tiny test models accumulates: a
forward pass of a few layers sums a few dot products of length <= 64 per layer, each contributing at most a few
``EPS32`` of its terms in practice (error grows like the square root of the length for sums in any order);
measured on the converted tests: at most 5 ``EPS32`` of the scale (batched against one-at-a-time outputs,
float32 against the float64 oracles), with and without ``ATEN_CPU_CAPABILITY=default``, so 64 leaves a
margin of ten.
It is a fixed property of float32, never raised to make one machine pass: a larger difference is a bug.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
ROUNDINGS = 64


def float32_bound(scale: float = 1.0, roundings: int = ROUNDINGS, eps: float = EPS32) -> float:
    """The absolute bound ``roundings * EPS32 * scale`` for a float32 value whose inputs have magnitude ``scale``.

    Example:
        >>> float32_bound(1.0) < 1e-4
        True
    """
    return roundings * eps * float(scale)


def assert_float32_close(
    got: Any, want: Any, scale: float = 1.0, roundings: int = ROUNDINGS, msg: str = "", eps: float = EPS32
) -> None:
    """Assert ``|got - want| <= float32_bound(max(scale, |want|))`` elementwise; NaN must meet NaN.

    Args:
        got: the value under test (array-like, tensor or number), computed in float32.
        want: its reference (usually a float64 oracle), same shape.
        scale: the magnitude of the inputs that entered the value (1 for values of probability maps).
        roundings: the number of float32 roundings allowed, ``ROUNDINGS`` unless a test justifies another.
        msg: shown on failure.
        eps: the rounding unit, ``EPS64`` for a value computed in float64 all the way.
    """
    got, want = _numpy(got), _numpy(want)
    bound = float32_bound(1.0, roundings, eps) * np.maximum(float(scale), np.abs(np.nan_to_num(want)))
    assert got.shape == want.shape, (got.shape, want.shape, msg)
    same_nan = np.isnan(got) == np.isnan(want)
    diff = np.abs(np.nan_to_num(got) - np.nan_to_num(want))
    bad = ~same_nan | (diff > bound)
    if bad.any():
        where = np.argwhere(bad)[:5].tolist()
        raise AssertionError(
            f"{msg}: {int(bad.sum())} of {bad.size} values differ by more than {roundings}"
            f" float32 roundings of scale {scale}: max |diff| {float(diff.max()):.3g}, bound {float(bound.max()):.3g},"
            f" first at {where}: got {got[bad][:5].tolist()} want {want[bad][:5].tolist()}"
        )


def pearson_scale(x: Any) -> float:
    """How much a Pearson correlation of ``x`` ``[n]`` with any fixed vector moves per unit of rounding in ``x``.

    With ``x~ = x - mean(x)``, a perturbation ``d`` moves ``r = <x~, y~> / (|x~| |y~|)`` by at most
    ``|d|_2 / |x~|_2``; each ``|d_i| <= rounding * max|x|``, so ``|dr| <= rounding * sqrt(n) max|x| / |x~|_2``.
    The factor is large when the predictions barely vary around a large mean: exactly where a fixed tolerance fails.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    spread = float(np.linalg.norm(x - x.mean()))
    return float(np.sqrt(x.size) * np.abs(x).max() / spread) if spread > 0 else float("inf")


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)
