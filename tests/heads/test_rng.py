"""heads.rng: bertwatch's own random draws leave the user's torch, numpy and Python generators where they were."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from bertwatch.heads.rng import rng_untouched

pytestmark = pytest.mark.fast


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_generators_continue_as_if_nothing_ran_also_after_an_error():
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    expected = draws()
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    with pytest.raises(RuntimeError), rng_untouched():
        draws()
        torch.manual_seed(99), np.random.seed(99), random.seed(99)
        raise RuntimeError("inside")
    assert draws() == expected
