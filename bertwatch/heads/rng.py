"""One home for "leave the random generators as they were": bertwatch's own draws must not shift the user's."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["rng_untouched"]


@contextlib.contextmanager
def rng_untouched() -> Iterator[None]:
    """Restore the torch (CPU and every initialised CUDA device), numpy and Python random states on exit, also on
    error, so a training run draws the same numbers with bertwatch as without it."""
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    np_state = np.random.get_state()
    py_state = random.getstate()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        np.random.set_state(np_state)
        random.setstate(py_state)
