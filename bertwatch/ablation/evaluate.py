"""Logits of many configurations over the evaluation set, shard by shard, resumable and split across processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bertwatch.ablation.configs import HeadMask
from bertwatch.ablation.inputs import EvalBatch, EvalData
from bertwatch.ablation.runner import Runner
from bertwatch.ablation.store import Processes, Store


def _group_by_start(configs: Sequence[HeadMask], reuse: bool) -> list[tuple[int, list[HeadMask]]]:
    groups: dict[int, list[HeadMask]] = {}
    for c in configs:
        groups.setdefault(c.start_layer if reuse else 0, []).append(c)
    return sorted(groups.items())


def run_shard(
    runner: Runner,
    batches: Sequence[EvalBatch],
    configs: Sequence[HeadMask],
    configs_per_batch: int,
    progress: Any,
    first_chunk: Callable[[float, float, EvalBatch, Sequence[HeadMask]], None] | None = None,
) -> dict[str, np.ndarray]:
    """Logits ``[shard examples, C]`` of each configuration, in the shard's batch order; ``first_chunk(baseline
    seconds, chunk seconds, batch, chunk)`` is told how long the first batch's baseline pass and its second stacked
    chunk of configurations took (the first when there is one only)."""
    num_layers = runner.num_layers
    baseline_ids = {c.id for c in configs if c.start_layer >= num_layers}
    others = [c for c in configs if c.start_layer < num_layers]
    need_states = runner.reuses and any(c.start_layer > 0 for c in others)
    parts: dict[str, list[np.ndarray]] = {c.id: [] for c in configs}
    timed: list[tuple[float, Sequence[HeadMask]]] = []  # the first batch's first chunks: (seconds, configurations)
    for number, batch in enumerate(batches):
        started = time.perf_counter()
        base_seconds = 0.0
        states = None
        if baseline_ids or need_states:
            logits, states = runner.baseline(batch.inputs, cache=need_states)
            for cid in baseline_ids:
                parts[cid].append(logits.float().cpu().numpy())
            if progress is not None:
                progress.update(batch.size * len(baseline_ids))
            base_seconds = time.perf_counter() - started
        for start, group in _group_by_start(others, runner.reuses):
            for i in range(0, len(group), configs_per_batch):
                chunk = group[i : i + configs_per_batch]
                chunk_started = time.perf_counter()
                out = runner.run(batch.inputs, states, np.stack([c.mask for c in chunk]), start)
                out = out.float().cpu().numpy()
                if number == 0 and first_chunk is not None:
                    timed.append((time.perf_counter() - chunk_started, chunk))
                    if len(timed) == 2:  # the second chunk: the first also pays for the first call's warm-up
                        first_chunk(base_seconds, timed[-1][0], batch, timed[-1][1])
                        first_chunk = None
                for j, c in enumerate(chunk):
                    parts[c.id].append(out[j])
                if progress is not None:
                    progress.update(batch.size * len(chunk))
        if number == 0 and first_chunk is not None and timed:  # a batch of one chunk
            first_chunk(base_seconds, timed[0][0], batch, timed[0][1])
            first_chunk = None
    return {cid: np.concatenate(chunks, axis=0) for cid, chunks in parts.items()}


def run_shard_split(
    runner: Runner,
    batches: Sequence[EvalBatch],
    configs: Sequence[HeadMask],
    configs_per_batch: int,
    processes: Processes,
) -> dict[str, np.ndarray]:
    """``run_shard`` for sharded weights: every process runs every configuration on its share of the batches, in
    step (the same number of forward passes each), and gets back the whole shard's logits."""
    local = [
        (b, run_shard(runner, [batches[b]], configs, configs_per_batch, None))
        for b in processes.share_batches(len(batches))
    ]
    found: dict[int, dict[str, np.ndarray]] = {}
    for b, logits in processes.gather_pairs(local):
        found[b] = logits
    return {c.id: np.concatenate([found[b][c.id] for b in range(len(batches))], axis=0) for c in configs}


def progress_bar(enabled: bool, total: int, desc: str, unit: str) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)


def evaluate_configs(
    runner: Runner,
    data: EvalData,
    configs: Sequence[HeadMask],
    store: Store,
    processes: Processes,
    configs_per_batch: int,
    progress: bool = True,
    desc: str = "ablate",
    first_chunk: Callable[[float, float, EvalBatch, Sequence[HeadMask]], None] | None = None,
) -> dict[str, np.ndarray]:
    """Logits ``[n, C]`` of every configuration in the evaluation set's order, shard by shard, resuming from and
    appending to ``store``; configurations missing from a shard are split across processes. ``first_chunk`` (see
    :func:`run_shard`) hears about the first batch this process runs."""
    parts: dict[str, list[np.ndarray]] = {c.id: [] for c in configs}
    todo_total = sum(
        sum(b.size for b in shard) * sum(store.get(s, c) is None for c in configs)
        for s, shard in enumerate(data.shards)
    )
    bar = progress_bar(progress and processes.is_main and todo_total > 0, todo_total, desc, "ex")
    try:
        for s, shard in enumerate(data.shards):
            found = {c.id: store.get(s, c) for c in configs}
            todo = [c for c in configs if found[c.id] is None]
            if todo and processes.sharded and processes.world > 1:
                gathered = run_shard_split(runner, shard, todo, configs_per_batch, processes)
                if bar is not None:
                    bar.update(sum(b.size for b in shard) * len(todo))
            elif todo:
                mine = processes.split(todo, runner.num_layers)
                local = run_shard(runner, shard, mine, configs_per_batch, bar, first_chunk)
                first_chunk = None
                gathered = processes.gather(local)
                if bar is not None and processes.world > 1:
                    bar.update(sum(b.size for b in shard) * (len(todo) - len(mine)))
            for c in todo:
                store.put(s, c, gathered[c.id])
                found[c.id] = gathered[c.id]
            for c in configs:
                parts[c.id].append(found[c.id])
    finally:
        if bar is not None:
            bar.close()
    return {cid: in_input_order(data, chunks) for cid, chunks in parts.items()}


def in_input_order(data: EvalData, shard_parts: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate per-shard results (length-sorted batch order) and put them back in the input order."""
    logits = np.concatenate(shard_parts, axis=0)
    restored = np.empty_like(logits)
    restored[np.concatenate([b.index for shard in data.shards for b in shard])] = logits
    return restored
