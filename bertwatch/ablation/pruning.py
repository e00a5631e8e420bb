"""Pruning curves: nested head masks evaluated step by step, each from the states earlier steps left where their
masks agree (the importance order with its stop, and the baseline orders at the same steps)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bertwatch.ablation.configs import HeadMask, pruning_masks
from bertwatch.ablation.evaluate import evaluate_configs, in_input_order, progress_bar
from bertwatch.ablation.inputs import EvalData
from bertwatch.ablation.runner import Runner
from bertwatch.ablation.store import Processes, Store


def first_change(mask: np.ndarray, previous: np.ndarray | None) -> int:
    """The lowest layer where two head masks ``[layers, heads]`` differ (where a pass relative to ``previous`` must
    start; ``layers`` when they are equal, 0 without a previous mask)."""
    if previous is None:
        return 0
    rows = np.flatnonzero((mask != previous).any(axis=1))
    return int(rows[0]) if rows.size else int(mask.shape[0])


def _layer_bytes(data: EvalData, runner: Runner) -> int:
    """Memory to keep one layer's hidden states for the whole evaluation set (float32)."""
    hidden = int(runner.model.config.hidden_size)  # DistilBertConfig maps it to dim
    return sum(b.inputs["input_ids"].numel() for shard in data.shards for b in shard) * hidden * 4


def kept_layers(masks: Sequence[np.ndarray], num_layers: int, room: int) -> list[int]:
    """The layers (at most ``room``, above 0) whose entering states a chain keeps between steps: those where most
    steps start (``first_change`` of each step against the one before), lower layers first among equals."""
    starts = [first_change(masks[j], masks[j - 1]) for j in range(1, len(masks))]
    counts = {l: starts.count(l) for l in range(1, num_layers) if starts.count(l)}
    return sorted(sorted(counts, key=lambda l: (-counts[l], l))[: max(0, room)])


def _batch_start(have: dict[int, torch.Tensor], need: int) -> int:
    """The highest layer at or below ``need`` whose entering states are kept (0: run from the embeddings)."""
    return max((l for l in have if l <= need), default=0)


def chain_logits(
    runner: Runner,
    data: EvalData,
    store: Store,
    configs: Sequence[HeadMask],
    stop: Callable[[np.ndarray], bool] | None = None,
    bar: Any = None,
    carry_limit: int = 2**30,
) -> list[np.ndarray]:
    """Logits ``[n, C]`` (input order) of nested configurations evaluated in order, in one process, each step from
    the states the previous steps left where their masks agree; stops after the first step for which ``stop``
    is True.

    Between steps, the states entering the layers of :func:`kept_layers` are kept for the whole evaluation set
    (as many layers as fit in ``carry_limit`` bytes). A state entering layer ``l`` depends only on the masks of
    the layers below ``l``, so it stays valid until a step disables a head below ``l``.
    """
    layer = _layer_bytes(data, runner)
    keep = kept_layers([c.mask for c in configs], runner.num_layers, carry_limit // max(1, layer))
    cache: dict[tuple[int, int], dict[int, torch.Tensor]] = {}
    found: list[np.ndarray] = []
    for j, config in enumerate(configs):
        need = first_change(config.mask, configs[j - 1].mask if j else None)
        last = j + 1 == len(configs)
        parts = []
        for s, shard in enumerate(data.shards):
            stored = store.get(s, config)
            if stored is not None:
                parts.append(stored)
                for b in range(len(shard)):
                    cache.pop((s, b), None)  # this shard's states under this step were not computed
                continue
            chunks = []
            for b, batch in enumerate(shard):
                have = cache.get((s, b), {})
                start = _batch_start(have, need)
                states = None
                if start > 0:
                    states = [None] * runner.num_layers
                    states[start] = have[start].to(runner.device)
                wanted = [] if last else [l for l in keep if l > start]
                fresh: dict[int, torch.Tensor] = {}
                if wanted:
                    logits, fresh = runner.run_keeping(batch.inputs, states, config.mask, start, wanted)
                else:
                    logits = runner.run(batch.inputs, states, config.mask[None], start)[0]
                cache[(s, b)] = {
                    **{l: t for l, t in have.items() if l <= start},
                    **{l: t.cpu() for l, t in fresh.items()},
                }
                chunks.append(logits.float().cpu().numpy())
            parts.append(np.concatenate(chunks, axis=0))
            store.put(s, config, parts[-1])
        found.append(in_input_order(data, parts))
        if bar is not None:
            bar.update(1)
        if stop is not None and stop(found[-1]):
            break
    return found


def curve_logits(
    runner: Runner,
    data: EvalData,
    store: Store,
    processes: Processes,
    configs_per_batch: int,
    configs: Sequence[HeadMask],
    stop: Callable[[np.ndarray], bool] | None = None,
    bar: Any = None,
    carry_limit: int = 2**30,
) -> list[np.ndarray]:
    """:func:`chain_logits` in one process with layer reuse; otherwise the steps split across processes (one step
    per process at a time, each from layer 0)."""
    if processes.world == 1 and runner.reuses:
        return chain_logits(runner, data, store, configs, stop, bar, carry_limit)
    found: list[np.ndarray] = []
    chunk = max(1, processes.world)
    for first in range(0, len(configs), chunk):
        group = list(configs[first : first + chunk])
        got = evaluate_configs(runner, data, group, store, processes, configs_per_batch, progress=False)
        for config in group:
            found.append(got[config.id])
            if bar is not None:
                bar.update(1)
            if stop is not None and stop(found[-1]):
                return found
    return found


def curve_entry(mask: np.ndarray, value: float) -> dict[str, Any]:
    """One step of a curve as the result records it: ``{"pruned", "fraction", "value", "heads"}``."""
    pruned = int(mask.sum())
    return {
        "pruned": pruned,
        "fraction": pruned / mask.size,
        "value": value,
        "heads": [[int(l), int(h)] for l, h in zip(*np.nonzero(mask))],
    }


def pruning_curve(
    runner: Runner,
    data: EvalData,
    store: Store,
    processes: Processes,
    configs_per_batch: int,
    score: Callable[[np.ndarray], float],
    importance: np.ndarray,
    step: float,
    crossed: Callable[[float], bool],
    progress: bool,
    mode: str,
    carry_limit: int = 2**30,
) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Evaluate the importance-ordered pruning steps in order until one crosses the limit (kept) or no head is left.

    Returns one ``{"pruned", "fraction", "value", "heads"}`` entry per step and its logits ``[n, C]``.
    """
    configs = [HeadMask(f"prune:{int(m.sum())}", m) for m in pruning_masks(importance, step)]
    bar = progress_bar(progress and processes.is_main, len(configs), f"prune ({mode})", "step")
    values: list[float] = []

    def stop(logits: np.ndarray) -> bool:
        values.append(score(logits))
        return crossed(values[-1]) or not math.isfinite(values[-1])

    try:
        found = curve_logits(runner, data, store, processes, configs_per_batch, configs, stop, bar, carry_limit)
    finally:
        if bar is not None:
            bar.close()
    return [curve_entry(c.mask, v) for c, v in zip(configs, values)], found


def baseline_curves(
    runner: Runner,
    data: EvalData,
    store: Store,
    processes: Processes,
    configs_per_batch: int,
    named_masks: dict[str, Sequence[np.ndarray]],
    score: Callable[[np.ndarray], float],
    progress: bool,
    mode: str,
) -> dict[str, tuple[list[dict[str, Any]], list[np.ndarray]]]:
    """Each named sequence of nested masks (``"random0"``, ..., ``"iterative"``) evaluated in full:
    ``{name: (entries, logits)}`` as :func:`pruning_curve` returns them (configuration ids ``{name}:{pruned}``)."""
    total = sum(len(m) for m in named_masks.values())
    bar = progress_bar(progress and processes.is_main and total > 0, total, f"prune baselines ({mode})", "step")
    out = {}
    try:
        for name, masks in named_masks.items():
            configs = [HeadMask(f"{name}:{int(m.sum())}", m) for m in masks]
            found = curve_logits(runner, data, store, processes, configs_per_batch, configs, None, bar)
            out[name] = ([curve_entry(c.mask, score(x)) for c, x in zip(configs, found)], found)
    finally:
        if bar is not None:
            bar.close()
    return out
