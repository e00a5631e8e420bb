"""benchmarks/gpu_check.sh in its smoke mode (tiny shapes on the CPU): every section runs and prints its rows, the
table is written to $OUT/gpu_check.txt, and the device-path pass reads back to the host in one copy only; its
helpers against what they stand for (the sync origins, the budget that scales the long runs)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


@pytest.fixture(scope="module")
def check():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_check"]
    sys.path.remove(str(ROOT / "benchmarks"))


def test_the_smoke_mode_runs_every_section_on_the_cpu_and_writes_its_table(tmp_path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(SCRIPT), "--smoke", "--threads", "1"], capture_output=True, text=True,
                          env=env, timeout=1500)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (tmp_path / "gpu_check.txt").read_text()
    assert table.splitlines()[1] == "| section | what | figure | target | s |"
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert Counter(r[0].strip("| ") for r in rows) == {"memory": 1, "pass": 1, "syncs": 1, "sweep": 3, "overhead": 2}
    assert not any("failed" in r[1] for r in rows) and "0 section(s) failed" in table
    syncs = next(r for r in rows if r[0] == "| syncs")
    assert "bertwatch cpu 1" in syncs[2] and "bertwatch item" not in syncs[2], syncs  # one copy, no per-unit read
    printed = [line for line in done.stdout.splitlines() if line in set(table.splitlines())]
    assert printed == table.splitlines()  # the same rows printed as they finished (amid the Trainer's own lines)


def test_sync_origins_are_read_from_the_warning_files(check) -> None:
    sep = os.sep
    assert check._origin(f"{sep}x{sep}bertwatch{sep}callbacks{sep}probe_pass.py") == "bertwatch"
    assert check._origin(f"{sep}site-packages{sep}transformers{sep}masking_utils.py") == "transformers"
    assert check._origin(f"{sep}site-packages{sep}torch{sep}nn{sep}functional.py") == "torch"
    assert check._origin(f"{sep}home{sep}me{sep}train.py") == "other"


def test_host_reads_count_bertwatch_calls_only_and_restore_the_tensor_methods(check) -> None:
    from bertwatch.heads import host
    from bertwatch.heads.outliers.activations import OutlierMoments

    methods = {n: getattr(torch.Tensor, n) for n in ("item", "cpu", "__float__")}

    def reads() -> None:
        x = torch.ones(2, 3, 4)
        float(x.sum())  # this test's own read: not bertwatch's
        assert not host.reads_free(x.device)  # the CPU taken for a device meanwhile
        moments = OutlierMoments()
        moments.add(x, torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, 3, dtype=torch.bool))  # reads nothing
        moments.result()  # reads its sums back once

    assert check._host_reads(reads) == Counter({"bertwatch cpu": 1, "bertwatch tolist": 1})
    assert {n: getattr(torch.Tensor, n) for n in methods} == methods and host.reads_free(torch.device("cpu"))
