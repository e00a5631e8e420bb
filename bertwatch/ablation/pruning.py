"""Michel et al.'s iterative pruning curve, each step evaluated from the previous step's states where they agree."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.configs import HeadMask, pruning_masks
from bertwatch.ablation.evaluate import evaluate_configs, in_input_order, progress_bar
from bertwatch.ablation.inputs import EvalData
from bertwatch.ablation.runner import Runner
from bertwatch.ablation.store import Processes, Store


def head_importance(model: nn.Module, data: EvalData, regression: bool, loss_fn: Callable | None) -> np.ndarray:
    """Michel et al.'s importance ``E_x |dL/d gate|`` over the evaluation set, L2-normalised per layer."""
    from bertwatch.ablation.tasks import label_batch
    from bertwatch.heads.importance import gradient_stats, normalize_by_layer
    from bertwatch.heads.roles import TokenRoles

    device = next(model.parameters()).device
    total, count = None, 0
    for shard in data.shards:
        for batch in shard:
            inputs = {k: v.to(device) for k, v in batch.inputs.items()}
            real = inputs["attention_mask"].bool().reshape(-1, inputs["attention_mask"].shape[-1])
            none = torch.zeros_like(real)
            roles = TokenRoles(real=real, cls=none, sep=none, punct=none)
            task_type = "regression" if regression else data.task_type
            labels = label_batch(task_type, data.labels[batch.index], real.shape[-1], device)
            stats = gradient_stats(model, {**inputs, **labels}, roles, loss_fn=loss_fn)
            part = stats["head_importance"].double().sum(0).cpu()
            total = part if total is None else total + part
            count += batch.size
    return normalize_by_layer(total / count).numpy()


def _first_change(mask: np.ndarray, previous: np.ndarray | None) -> int:
    """The lowest layer where two head masks differ (where a pass relative to ``previous`` must start)."""
    if previous is None:
        return 0
    rows = np.flatnonzero((mask != previous).any(axis=1))
    return int(rows[0]) if rows.size else int(mask.shape[0])


def _carry_bytes(data: EvalData, runner: Runner) -> int:
    """Memory to keep one layer's hidden states for the whole evaluation set (float32)."""
    hidden = int(getattr(runner.model.config, "hidden_size", 0) or getattr(runner.model.config, "dim", 0))
    return sum(b.inputs["input_ids"].numel() for shard in data.shards for b in shard) * hidden * 4


def _chain_step(
    runner: Runner,
    data: EvalData,
    store: Store,
    masks: Sequence[np.ndarray],
    j: int,
    carried: dict[tuple[int, int], torch.Tensor] | None,
) -> tuple[dict[str, np.ndarray], dict[tuple[int, int], torch.Tensor] | None]:
    """Pruning step ``j`` evaluated from step ``j-1``'s states where the two agree (the layers below the lowest
    newly pruned head), keeping this step's states entering the layer step ``j+1`` will start from.

    ``carried`` maps (shard, batch) to the states entering ``_first_change(masks[j], masks[j-1])`` under step
    ``j-1``, or is None (then step ``j`` runs from layer 0). Returns its logits and what step ``j+1`` needs.
    """
    config = HeadMask(f"prune:{int(masks[j].sum())}", masks[j])
    start = _first_change(masks[j], masks[j - 1] if j else None) if carried is not None else 0
    following = _first_change(masks[j + 1], masks[j]) if j + 1 < len(masks) else None
    keep = following if following is not None and max(start, 1) <= following < runner.num_layers else None
    nxt: dict[tuple[int, int], torch.Tensor] | None = {} if keep is not None else None
    parts = []
    for s, shard in enumerate(data.shards):
        stored = store.get(s, config)
        if stored is not None:
            parts.append(stored)
            nxt = None  # this shard's states were not computed: the next step starts over
            continue
        chunks = []
        for b, batch in enumerate(shard):
            states = None
            if start > 0:
                states = [None] * runner.num_layers
                states[start] = carried[(s, b)].to(runner.device)
            if keep is not None:
                logits, kept = runner.run_keeping(batch.inputs, states, config.mask, start, keep)
                if nxt is not None:
                    nxt[(s, b)] = kept.cpu()
            else:
                logits = runner.run(batch.inputs, states, config.mask[None], start)[0]
            chunks.append(logits.float().cpu().numpy())
        parts.append(np.concatenate(chunks, axis=0))
        store.put(s, config, parts[-1])
    return {config.id: in_input_order(data, parts)}, nxt


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
    """Evaluate the pruning steps in order until one crosses the limit (kept) or no head is left.

    In one process, each step starts from the previous step's states at the lowest newly pruned layer (masks
    are nested), keeping one layer of states for the whole evaluation set (at most ``carry_limit`` bytes).
    Returns one ``{"pruned", "fraction", "value", "heads"}`` entry per step and its logits ``[n, C]``.
    """
    masks = pruning_masks(importance, step)
    total = importance.size
    chain = processes.world == 1 and runner.reuses and _carry_bytes(data, runner) <= carry_limit
    chunk = max(1, processes.world)  # one step per process at a time
    bar = progress_bar(progress and processes.is_main, len(masks), f"prune ({mode})", "step")
    entries: list[dict[str, Any]] = []
    found: list[np.ndarray] = []
    carried: dict[tuple[int, int], torch.Tensor] | None = None
    try:
        for first in range(0, len(masks), chunk):
            configs = [HeadMask(f"prune:{int(m.sum())}", m) for m in masks[first : first + chunk]]
            if chain:
                got, carried = _chain_step(runner, data, store, masks, first, carried)
            else:
                got = evaluate_configs(runner, data, configs, store, processes, configs_per_batch, progress=False)
            if bar is not None:
                bar.update(len(configs))
            for config in configs:
                value = score(got[config.id])
                entries.append(
                    {
                        "pruned": int(config.mask.sum()),
                        "fraction": int(config.mask.sum()) / total,
                        "value": value,
                        "heads": [[int(l), int(h)] for l, h in zip(*np.nonzero(config.mask))],
                    }
                )
                found.append(got[config.id])
                if crossed(value) or not math.isfinite(value):
                    return entries, found
    finally:
        if bar is not None:
            bar.close()
    return entries, found
