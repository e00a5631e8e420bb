"""FSDP2 on CPU: two processes (gloo) fine-tune a tiny BERT whose weights are sharded with ``fully_shard`` while
BertWatchCallback measures it; the grids equal one unsharded process's, one rank writes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertwatch.heads.sharding import ShardingError, check_sharding, is_sharded, is_zero3
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer
from tests.support.torchrun import torchrun

HELPER = Path(__file__).resolve().parents[1] / "support" / "fsdp_train.py"
ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    env.pop("TENSORBOARD_LOGGING_DIR", None)
    return env


def _run(command: list[str], what: str, timeout: int = 90) -> None:
    try:
        proc = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        pytest.fail(f"{what} did not finish in {timeout} s (a rank hung in a collective?):\n{out[-3000:]}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


@pytest.mark.distributed
def test_fsdp2_training_gives_the_single_process_grids(tmp_path: Path) -> None:
    sharded, single = tmp_path / "fsdp", tmp_path / "single"
    sharded.mkdir()
    single.mkdir()
    _run(torchrun(str(HELPER), str(sharded)), "the 2-process FSDP2 run")
    _run([sys.executable, str(HELPER), str(single), "single"], "the single-process run")

    info = [json.loads((sharded / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["sharded"] for i in info] == [True, True]
    assert [i["disabled"] for i in info] == [False, False]
    assert info[0]["steps"] == info[1]["steps"] == [0, 2, 4]
    assert info[0]["run_dir"] is not None and info[1]["run_dir"] is None

    grids = [np.load(sharded / f"grids_rank{r}.npz") for r in (0, 1)]
    reference = np.load(single / "grids_rank0.npz")
    assert sorted(grids[0].files) == sorted(grids[1].files) == sorted(reference.files)
    for name in ("4/drift_cosine", "4/head_importance", "4/entropy", "2/sep_mass"):
        assert name in reference.files
    for key in reference.files:
        for rank in (0, 1):
            np.testing.assert_allclose(grids[rank][key], reference[key], rtol=0, atol=1e-5, err_msg=f"{key} {rank}")
    assert not np.allclose(reference["4/drift_js"], 0), "training moved nothing: the comparison proves little"

    events = list(sharded.rglob("*.bertwatch"))
    assert len(events) == 1 and str(events[0]).startswith(info[0]["run_dir"])
    assert [c.name for c in sharded.rglob("reference.pt*")] == ["reference.pt"]

    two, one = (
        json.loads((d / "train" / "bertwatch_ablation" / "ablation.json").read_text()) for d in (sharded, single)
    )
    assert two["config"]["processes"] == 2 and one["config"]["processes"] == 1
    assert two["config"]["layer_reuse"] is False and one["config"]["layer_reuse"] is True
    assert two["num_examples"] == one["num_examples"] == 12
    sweeps = tuple(d / "train" / "bertwatch_ablation" for d in (sharded, single))
    _assert_same_ablation(two, one, ("baseline", "heads", "layers", "keep_only", "pruning", "importance"), sweeps)


def _numbers(value: object) -> list[float]:
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _numbers(value[k])]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return [float("nan") if value is None else float(value)]


def _logits(path: Path) -> dict[tuple[int, str], np.ndarray]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {
        (r["shard"], r["key"]): np.frombuffer(base64.b64decode(r["logits"]), np.float32).reshape(r["shape"])
        for r in rows
    }


def _assert_same_ablation(two: dict, one: dict, keys: tuple[str, ...], dirs: tuple[Path, Path]) -> None:
    """Every configuration's logits (the resumable stores) to 1e-5 and every reported number alike."""
    a, b = (_logits(d / "partial.jsonl") for d in dirs)
    assert sorted(a) == sorted(b) and len(a) > 0
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-5, err_msg=str(key))
    for key in keys:
        np.testing.assert_allclose(_numbers(two[key]), _numbers(one[key]), atol=1e-5, err_msg=key)


@pytest.mark.distributed
def test_sharded_sweep_resumes_after_a_rank_dies_even_on_another_machine(tmp_path: Path) -> None:
    from bertwatch.ablation.sweep import ablate
    from tests.support.fsdp_train import SWEEP
    from tests.support.tiny_trainer import toy_texts

    out = tmp_path / "two"
    crashed = subprocess.run(
        torchrun(str(HELPER), str(out), "sweep", "die"),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert crashed.returncode != 0 and not (out / "ablation.json").exists()
    before = (out / "partial.jsonl").read_text().splitlines()
    configs = 1 + 12 + 3 + 12  # baseline, heads, layers, keep-only of 3 layers x 4 heads
    units = 1 + 12 + 3  # the keep-one-head configurations run after every shard's units (the budget decides them)
    assert len(before) == units and {json.loads(r)["shard"] for r in before} == {0}

    # resumed with rank 1 blind to rank 0's partial.jsonl (another machine): it gets rank 0's view
    _run(torchrun(str(HELPER), str(out), "sweep", "apart"), "the resumed sweep")
    assert not (out / "elsewhere").exists()
    rows = [json.loads(r) for r in (out / "partial.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * configs and len({(r["shard"], r["key"]) for r in rows}) == 4 * configs
    two = json.loads((out / "ablation.json").read_text())
    assert two["config"]["processes"] == 2

    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer, layers=3).eval()
    one = ablate(model, toy_texts(30, 2), tokenizer, out_dir=tmp_path / "one", **SWEEP).to_json()
    _assert_same_ablation(two, one, ("baseline", "heads", "layers", "keep_only"), (out, tmp_path / "one"))
    assert two["num_examples"] == one["num_examples"] == 30


def test_sharding_detection_and_zero3_refusal() -> None:
    model = tiny_bert(tiny_tokenizer())
    assert not is_sharded(model) and not is_zero3(model)
    check_sharding(model)
    first = next(model.parameters())
    first.ds_id = 0  # what DeepSpeed ZeRO-3 puts on a partitioned parameter
    try:
        assert is_zero3(model)
        with pytest.raises(ShardingError, match="ZeRO stage 3.*FSDP2"):
            check_sharding(model)
    finally:
        del first.ds_id
    assert isinstance(first, torch.nn.Parameter)


def test_every_rank_runs_as_many_batches_and_together_they_cover_all() -> None:
    from bertwatch.ablation.store import Processes

    for world in (1, 2, 3):
        for count in (0, 1, 2, 5, 7):
            shares = []
            for rank in range(world):
                processes = Processes(False)
                processes.rank, processes.world = rank, world
                shares.append(processes.share_batches(count))
            assert len({len(s) for s in shares}) == 1 and len(shares[0]) == -(-count // world)
            assert sorted(set().union(*map(set, shares))) == list(range(count)) or count == 0
            assert all(b in range(max(count, 1)) for s in shares for b in s)
