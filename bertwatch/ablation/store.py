"""The resumable ``partial.jsonl`` store and the split of configurations across processes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertwatch.ablation.configs import HeadMask


class Store:
    """``partial.jsonl``: one line per (shard, configuration) with its logits; lines of another run are ignored."""

    def __init__(self, path: Path | None, fingerprint: str, writer: bool):
        self.path = path
        self.fingerprint = fingerprint
        self.writer = writer
        self.entries: dict[tuple[int, str], np.ndarray] = {}
        if path is None or not path.is_file():
            return
        stale = False
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n") and writer:
            with path.open("a", encoding="utf-8") as file:
                file.write("\n")  # end a line torn by an interruption, so the next one starts clean
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by an interruption
            if row.get("run") != self.fingerprint:
                stale = True
                continue
            data = np.frombuffer(base64.b64decode(row["logits"]), dtype=np.float32).reshape(row["shape"])
            self.entries[(int(row["shard"]), row["key"])] = data
        if stale and not self.entries and writer:
            path.unlink()

    def get(self, shard: int, config: HeadMask) -> np.ndarray | None:
        return self.entries.get((shard, config.key))

    def put(self, shard: int, config: HeadMask, logits: np.ndarray) -> None:
        logits = np.ascontiguousarray(logits, dtype=np.float32)
        self.entries[(shard, config.key)] = logits
        if self.path is None or not self.writer:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {
            "run": self.fingerprint,
            "shard": shard,
            "id": config.id,
            "key": config.key,
            "shape": list(logits.shape),
            "logits": base64.b64encode(logits.tobytes()).decode("ascii"),
        }
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
            file.flush()


class Processes:
    """This process's share of the work; one process unless launched with accelerate / torchrun.

    Replicated models (DDP, or one copy per process) split the configurations. With ``sharded`` weights (FSDP)
    every forward pass is a collective, so every process runs every configuration, in the same order, on its
    share of each shard's batches instead.
    """

    def __init__(self, distributed: bool | None, cpu: bool = False, sharded: bool = False):
        self.state = None
        self.sharded = bool(sharded)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed or (distributed is None and (world > 1 or initialised)):
            from accelerate import PartialState

            self.state = PartialState(cpu=cpu)  # cpu=True: gloo between CPU processes
        self.rank = self.state.process_index if self.state is not None else 0
        self.world = self.state.num_processes if self.state is not None else 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def split(self, configs: Sequence[HeadMask], num_layers: int) -> list[HeadMask]:
        """Balance the cost (layers to run) across processes, then let accelerate hand out the contiguous parts."""
        if self.world == 1 or self.sharded:
            return list(configs)
        ranked = sorted(configs, key=lambda c: (-(num_layers - min(c.start_layer, num_layers - 1)), c.id))
        base, extra = divmod(len(ranked), self.world)
        sizes = [base + (1 if r < extra else 0) for r in range(self.world)]
        buckets: list[list[HeadMask]] = [[] for _ in range(self.world)]
        cost = [0] * self.world
        for config in ranked:
            open_ranks = [r for r in range(self.world) if len(buckets[r]) < sizes[r]]
            r = min(open_ranks, key=lambda r: (cost[r], r))
            buckets[r].append(config)
            cost[r] += num_layers - min(config.start_layer, num_layers - 1)
        arranged = [c for bucket in buckets for c in bucket]
        with self.state.split_between_processes(arranged) as mine:
            return list(mine)

    def share_batches(self, count: int) -> list[int]:
        """The batch indices this process runs (every ``world``-th), padded by repeating one so that every process
        runs the same number of forward passes (``ceil(count / world)``), as sharded weights require."""
        mine = list(range(self.rank, count, self.world))
        rounds = -(-count // self.world)
        while len(mine) < rounds:
            mine.append(mine[-1] if mine else 0)
        return mine

    def gather(self, local: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.world == 1:
            return local
        from accelerate.utils import gather_object

        return dict(gather_object(list(local.items())))

    def gather_pairs(self, local: list[tuple]) -> list[tuple]:
        """Every process's ``local`` items, concatenated in rank order."""
        if self.world == 1:
            return list(local)
        from accelerate.utils import gather_object

        return list(gather_object(local))

    def share(self, store: Store) -> None:
        """Give every process rank 0's view of ``store``: on several machines only rank 0's ``partial.jsonl`` is
        written, and every process must agree on what is left to evaluate (or their collectives would not match)."""
        if self.world == 1:
            return
        from accelerate.utils import broadcast_object_list, gather_object

        digest = hashlib.sha1(json.dumps(sorted(f"{s}:{k}" for s, k in store.entries)).encode()).hexdigest()
        if len(set(gather_object([digest]))) > 1:
            payload = [store.entries if self.is_main else None]
            broadcast_object_list(payload, from_process=0)
            store.entries = payload[0]

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every process (where each decided from its own timing)."""
        if self.world == 1:
            return value
        from accelerate.utils import broadcast_object_list

        payload = [value]
        broadcast_object_list(payload, from_process=0)
        return payload[0]

    def barrier(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()
