"""What a sweep will run and how long it will take on this machine, said once at its start: the first batch's
baseline pass and its first stacked chunk of configurations are timed, and the rest scaled from them: by the layers
each configuration runs (a configuration whose first disabled layer is l runs layers l..L-1) and by the padded
tokens of the batches; the pruning orders per step from the same rate."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bertwatch.ablation.configs import HeadMask
from bertwatch.ablation.inputs import EvalBatch, EvalData
from bertwatch.ablation.settings import AblationSettings
from bertwatch.ablation.store import Store

__all__ = ["SweepPlan", "max_pruning_steps"]

#: A gradient pass (importance) costs about this many forward passes of one configuration.
GRADIENT_PASSES = 3


def max_pruning_steps(total_heads: int, step: float) -> int:
    """Steps until every head is pruned when each disables ``max(1, int(step * remaining))`` more.

    Example:
        >>> max_pruning_steps(72, 0.1), max_pruning_steps(144, 0.1)
        (33, 40)
    """
    remaining, steps = int(total_heads), 0
    while remaining > 0:
        remaining -= max(1, int(step * remaining))
        steps += 1
    return steps


def _duration(seconds: float) -> str:
    """``"40 s"``, ``"3.5 min"``, ``"1.2 h"``."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _tokens(batch: EvalBatch) -> int:
    return int(next(iter(batch.inputs.values())).numel())


@dataclass
class SweepPlan:
    """The sweep's configurations and pruning orders, and the evaluation set's padded tokens still to run."""

    configs: Sequence[HeadMask]
    data: EvalData
    todo: Sequence[HeadMask]  # configurations still to evaluate on the first shard that has any (resumed: fewer)
    shards: Sequence[int]  # the shards with a configuration still to evaluate
    prune: bool
    random_orders: int
    iterative: bool
    max_steps: int
    device: str
    layers: int
    reuse: bool  # configurations start at their first disabled layer (else every one runs every layer)
    said: bool = False

    @classmethod
    def of(cls, configs: Sequence[HeadMask], data: EvalData, store: Store, settings: AblationSettings,
           device: str, reuse: bool) -> SweepPlan:  # fmt: skip
        """The plan of a sweep over ``configs``, leaving out what ``store`` holds already."""
        missing = [[c for c in configs if store.get(s, c) is None] for s in range(len(data.shards))]
        shards = [s for s, todo in enumerate(missing) if todo]
        heads = int(configs[0].mask.size) if configs else 0
        return cls(
            configs,
            data,
            missing[shards[0]] if shards else [],
            shards,
            bool(settings.prune),
            int(settings.prune_random) if settings.prune else 0,
            bool(settings.prune and settings.prune_iterative),
            max_pruning_steps(heads, float(settings.prune_step)),
            device,
            int(configs[0].mask.shape[0]) if configs else 0,
            reuse,
        )

    def what(self) -> str:
        """``"151 configurations (baseline, 72 heads, 6 layers, 72 keep-one-head) on 128 examples"``."""
        kinds = {"head": "heads", "layer": "layers", "keep": "keep-one-head"}
        counts = {name: sum(c.id.startswith(key + ":") for c in self.configs) for key, name in kinds.items()}
        parts = ["baseline"] + [f"{count} {name}" for name, count in counts.items() if count]
        left = len(self.shards) < len(self.data.shards) or len(self.todo) < len(self.configs)
        resumed = f" (resumed: {len(self.shards)} of {len(self.data.shards)} shards left)" if left else ""
        return f"{len(self.configs)} configurations ({', '.join(parts)}) on {self.data.size} examples{resumed}"

    def orders(self) -> int:
        """Configurations a pruning step costs: the importance order's, each random order's and the iterative
        order's with its gradient pass."""
        return 1 + self.random_orders + ((1 + GRADIENT_PASSES) if self.iterative else 0)

    def _layers_run(self, config: HeadMask) -> int:
        return self.layers - (min(config.start_layer, self.layers) if self.reuse else 0)

    def line(self, base_seconds: float, chunk_seconds: float, batch: EvalBatch, chunk: Sequence[HeadMask]) -> str:
        """The plan in one line, its times scaled from the first batch's baseline pass (``base_seconds``) and its
        first ``chunk`` of stacked configurations (``chunk_seconds``)."""
        per_layer = chunk_seconds / max(1, sum(self._layers_run(c) for c in chunk))  # one configuration, one layer
        todo = [c for c in self.todo if c.start_layer < self.layers]  # the baseline pass is timed on its own
        scale = sum(_tokens(b) for s in self.shards for b in self.data.shards[s]) / max(1, _tokens(batch))
        units = (base_seconds + per_layer * sum(self._layers_run(c) for c in todo)) * scale
        text = f"bertwatch ablate: {self.what()}: about {_duration(units)} on this {self.device}"
        if self.prune:
            step = per_layer * self.layers * scale * self.orders()
            names = ["importance"] + (["iterative"] if self.iterative else [])
            names += [f"{self.random_orders} random orders"] if self.random_orders else []
            text += (
                f", then the pruning orders ({', '.join(names)}) at about {_duration(step)} a step, up to "
                f"{self.max_steps} steps (the curve stops where the metric leaves 90% of its baseline)"
            )
        return text + f" (timed on {len(chunk)} configurations of the first batch)"

    def first_chunk(self, base_seconds: float, chunk_seconds: float, batch: EvalBatch, chunk: Sequence[HeadMask]):
        """Say the plan once (to stderr, above the progress bar)."""
        if self.said:
            return
        self.said = True
        from tqdm.auto import tqdm

        tqdm.write(self.line(base_seconds, chunk_seconds, batch, chunk), file=sys.stderr)
