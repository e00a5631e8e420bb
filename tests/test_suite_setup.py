"""The suite's own rules: the thread count set once for every test, the one tolerance rule
(tests/support/tolerance.py), and shared helpers that import no test module (tests/support/)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import TEST_THREADS
from tests.support.tolerance import EPS32, ROUNDINGS, assert_float32_close, float32_bound, pearson_scale

pytestmark = pytest.mark.fast


def test_the_shared_helpers_import_no_test_module() -> None:
    """tests/support/ holds what several test files share; it imports from tests.support only, never a test module
    (what a test module and a helper both need moves into tests/support/)."""
    bad = []
    for path in sorted((Path(__file__).resolve().parent / "support").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):  # `from tests.x import y`, and `from tests import test_y`
                names += [f"tests.{a.name}" for a in node.names] if node.module == "tests" else [node.module or ""]
            bad += [
                f"{path.name}:{node.lineno} {n}"
                for n in names
                if n.startswith("tests.") and not n.startswith("tests.support")
            ]
    assert not bad, "tests/support/ imports a test module:\n" + "\n".join(bad)


def test_every_test_runs_with_the_thread_count_of_conftest() -> None:
    """No test module's import may change it: the suite must pass with 1 and with 2 threads, as asked."""
    assert torch.get_num_threads() == TEST_THREADS


def test_the_bound_is_absolute_near_zero_and_relative_elsewhere() -> None:
    bound = float32_bound(1.0)
    assert bound == ROUNDINGS * EPS32
    assert_float32_close(0.5 * bound, 0.0)
    with pytest.raises(AssertionError, match="differ by more than"):
        assert_float32_close(2 * bound, 0.0)
    assert_float32_close(1000.0 * (1 + 0.5 * bound), 1000.0)
    with pytest.raises(AssertionError):
        assert_float32_close(1000.0 * (1 + 2 * bound), 1000.0)
    assert_float32_close(3 * bound, 0.0, scale=4.0)
    assert_float32_close(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    with pytest.raises(AssertionError):
        assert_float32_close(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    with pytest.raises(AssertionError):
        assert_float32_close(np.zeros(3), np.zeros(4))


def test_pearson_scale_bounds_what_a_rounding_of_the_predictions_does() -> None:
    """Predictions that barely vary around a large mean (the case that differed between two CPUs): a float32
    rounding of each moves r by more than a fixed 1e-9, and never by more than the rule's bound."""
    rng = np.random.default_rng(0)
    gold = rng.normal(size=20)
    x = 3.0 + 1e-3 * rng.normal(size=20)
    r = np.corrcoef(x, gold)[0, 1]
    scale = pearson_scale(x)
    moved = []
    for _ in range(200):
        rounded = x * (1 + EPS32 * rng.uniform(-1, 1, size=x.size))
        moved.append(abs(np.corrcoef(rounded, gold)[0, 1] - r))
        assert_float32_close(np.corrcoef(rounded, gold)[0, 1], r, scale=scale, roundings=1)
    assert max(moved) > 1e-9
