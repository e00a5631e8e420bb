"""Two CPU processes (torchrun, gloo) train with BertWatchCallback: no deadlock, equal statistics, one writer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.support.torchrun import torchrun

HELPER = Path(__file__).resolve().parents[1] / "support" / "dist_train.py"


@pytest.mark.distributed
def test_two_process_gloo_training_with_the_callback(tmp_path) -> None:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("TENSORBOARD_LOGGING_DIR", None)
    command = torchrun(str(HELPER), str(tmp_path))
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"distributed training did not finish in 150 s (deadlock?):\n{(err.stdout or '')[-3000:]}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    info = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["world_size"] for i in info] == [2, 2]
    assert [i["world_zero"] for i in info] == [True, False]
    assert info[0]["steps"] == info[1]["steps"] == [0, 2, 3, 4]
    assert info[0]["weights_sum"] == info[1]["weights_sum"]
    assert info[0]["run_dir"] is not None and info[1]["run_dir"] is None

    grids = [np.load(tmp_path / f"grids_rank{r}.npz") for r in (0, 1)]
    assert sorted(grids[0].files) == sorted(grids[1].files)
    assert "4/drift_cosine" in grids[0].files and "4/head_importance" in grids[0].files
    for key in grids[0].files:
        np.testing.assert_array_equal(grids[0][key], grids[1][key], err_msg=key)

    events = list((tmp_path / "train").rglob("*.bertwatch"))
    assert len(events) == 1 and str(events[0]).startswith(info[0]["run_dir"])
    caches = list((tmp_path / "train").rglob("reference.pt*"))
    assert [c.name for c in caches] == ["reference.pt"]
