"""What a sweep will run and how long it will take on this machine, said once at its start, and the budget rule:
which of the optional parts it runs by default.

The first batch's baseline pass and its first stacked chunk of configurations are timed, and the rest scaled from
them: by the layers each configuration runs (a configuration whose first disabled layer is l runs layers l..L-1) and
by the padded tokens of the batches; the pruning orders per step from the same rate.

The budget rule (the one home of it): the keep-one-head configurations, the iterative order and the random orders,
where their settings are left to the budget (None), run when the whole sweep's estimate with them still fits
``budget_minutes``, tried in that order; the importance order's steps are counted at their most (``max_steps``).
Where no timing is known (nothing left to evaluate, or another process timed it), they run on a GPU only (and
keep-one-head where it is stored). On a CPU
a sweep reads at most ``CPU_EXAMPLES`` examples unless ``max_examples`` says otherwise."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bertwatch.ablation.configs import HeadMask
from bertwatch.ablation.inputs import EvalBatch, EvalData
from bertwatch.ablation.settings import DEFAULT_RANDOM_ORDERS, AblationSettings
from bertwatch.ablation.store import Store

__all__ = ["CPU_EXAMPLES", "Choice", "SweepPlan", "example_cap", "first_examples", "max_pruning_steps"]

#: A gradient pass (importance) costs about this many forward passes of one configuration.
GRADIENT_PASSES = 3
#: The examples a sweep reads on a CPU when ``max_examples`` is None (all of them on a GPU).
CPU_EXAMPLES = 128


def example_cap(max_examples: int | None, device_type: str) -> int | None:
    """How many examples a sweep reads (None: all): ``max_examples`` when given, else ``CPU_EXAMPLES`` on a CPU.

    Example:
        >>> example_cap(None, "cpu"), example_cap(None, "cuda"), example_cap(408, "cpu")
        (128, None, 408)
    """
    if max_examples is not None:
        return int(max_examples)
    return CPU_EXAMPLES if device_type == "cpu" else None


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


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


@dataclass(frozen=True)
class Choice:
    """The optional parts of a sweep: the keep-one-head configurations, the iterative order, the random orders."""

    keep: bool
    iterative: bool
    random: int


@dataclass
class SweepPlan:
    """The sweep's configurations and pruning orders, and the evaluation set's padded tokens still to run; the
    optional parts as asked (None: as the budget allows) and, once timed, the estimates."""

    configs: Sequence[HeadMask]  # the unit configurations, keep-one-head ones included when they may run
    data: EvalData
    todo: Sequence[HeadMask]  # configurations still to evaluate on the first shard that has any (resumed: fewer)
    shards: Sequence[int]  # the shards with a configuration still to evaluate
    prune: bool
    asked: tuple[bool | None, bool | None, int | None]  # keep_only, prune_iterative, prune_random as set
    max_steps: int
    device: str
    layers: int
    reuse: bool  # configurations start at their first disabled layer (else every one runs every layer)
    budget_s: float | None = None
    available: int = 0  # the examples given, before the cap
    said: bool = False
    #: Once timed: seconds of one configuration over one layer of the whole set, and of the baseline passes.
    rate: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, configs: Sequence[HeadMask], data: EvalData, store: Store, settings: AblationSettings,
           device: str, reuse: bool, available: int = 0) -> SweepPlan:  # fmt: skip
        """The plan of a sweep over ``configs``, leaving out what ``store`` holds already; ``available``: the
        examples given (more than ``data`` holds when the sweep reads only the first ones)."""
        missing = [[c for c in configs if store.get(s, c) is None] for s in range(len(data.shards))]
        shards = [s for s, todo in enumerate(missing) if todo]
        heads = int(configs[0].mask.size) if configs else 0
        prune = bool(settings.prune)
        asked = (
            settings.keep_only,
            settings.prune_iterative if prune else False,
            settings.prune_random if prune else 0,
        )
        budget = None if settings.budget_minutes is None else 60.0 * float(settings.budget_minutes)
        return cls(
            configs, data, missing[shards[0]] if shards else [], shards, prune, asked,
            max_pruning_steps(heads, float(settings.prune_step)), device,
            int(configs[0].mask.shape[0]) if configs else 0, reuse, budget, max(int(available), data.size),
        )  # fmt: skip

    def what(self) -> str:
        """``"151 configurations (baseline, 72 heads, 6 layers, 72 keep-one-head) on 128 examples"``."""
        configs = self.run_configs()
        kinds = {"head": "heads", "layer": "layers", "keep": "keep-one-head"}
        counts = {name: sum(c.id.startswith(key + ":") for c in configs) for key, name in kinds.items()}
        parts = ["baseline"] + [f"{count} {name}" for name, count in counts.items() if count]
        left = len(self.shards) < len(self.data.shards) or len(self.todo) < len(self.configs)
        resumed = f" (resumed: {len(self.shards)} of {len(self.data.shards)} shards left)" if left else ""
        of = f" of {self.available}" if self.available > self.data.size else ""
        return f"{len(configs)} configurations ({', '.join(parts)}) on {self.data.size}{of} examples{resumed}"

    def run_configs(self) -> list[HeadMask]:
        """The unit configurations the sweep runs: without the keep-one-head ones when the budget leaves them out."""
        keep = self.choice().keep
        return [c for c in self.configs if keep or not c.id.startswith("keep:")]

    def _layers_run(self, config: HeadMask) -> int:
        return self.layers - (min(config.start_layer, self.layers) if self.reuse else 0)

    def timed(self, base_seconds: float, chunk_seconds: float, batch: EvalBatch, chunk: Sequence[HeadMask]) -> None:
        """Keep the rates of the first batch's baseline pass (``base_seconds``) and its ``chunk`` of stacked
        configurations (``chunk_seconds``), scaled to the padded tokens still to run."""
        scale = sum(_tokens(b) for s in self.shards for b in self.data.shards[s]) / max(1, _tokens(batch))
        per_layer = chunk_seconds / max(1, sum(self._layers_run(c) for c in chunk))
        self.rate = {"layer": per_layer * scale, "base": base_seconds * scale, "chunk": float(len(chunk))}

    def _units(self, keep: bool) -> float:
        todo = [c for c in self.todo if c.start_layer < self.layers and (keep or not c.id.startswith("keep:"))]
        return self.rate["base"] + self.rate["layer"] * sum(self._layers_run(c) for c in todo)

    def step_seconds(self, choice: Choice) -> float:
        """One pruning step of every order: one configuration each, the iterative order's gradient pass too."""
        orders = 1 + choice.random + ((1 + GRADIENT_PASSES) if choice.iterative else 0)
        return self.rate["layer"] * self.layers * orders

    def seconds(self, choice: Choice) -> float:
        """The whole sweep's estimate with ``choice``: the unit configurations, the importance pass and every
        order's steps at their most."""
        pruning = self.rate["layer"] * self.layers * GRADIENT_PASSES + self.step_seconds(choice) * self.max_steps
        return self._units(choice.keep) + (pruning if self.prune else 0.0)

    def fuller(self) -> Choice:
        """Every optional part at what it is asked for, or at its default where left to the budget."""
        keep, iterative, random = self.asked
        return Choice(
            keep is not False,
            self.prune and iterative is not False,
            (DEFAULT_RANDOM_ORDERS if random is None else int(random)) if self.prune else 0,
        )

    def choice(self) -> Choice:
        """What runs: what was asked for, and each part left to the budget (keep-one-head, iterative, random, in
        this order) when the sweep with it fits the budget."""
        keep, iterative, random = self.asked
        fuller = self.fuller()
        chosen = Choice(bool(keep), bool(iterative), int(random or 0))
        if self.budget_s is None:
            return fuller
        if not self.rate:  # not timed: all stored (keep-one-head too, then), or timed by another process
            stored = Choice(keep is not False if not self.shards else bool(keep), chosen.iterative, chosen.random)
            return fuller if self.device == "GPU" else stored
        for name, left in (("keep", keep), ("iterative", iterative), ("random", random)):
            if left is None:
                tried = Choice(**{**chosen.__dict__, name: getattr(fuller, name)})
                if self.seconds(tried) <= self.budget_s:
                    chosen = tried
        return chosen

    def settled(self, settings: AblationSettings) -> AblationSettings:
        """``settings`` with the parts left to the budget decided."""
        choice = self.choice()
        return AblationSettings.resolve(
            settings, keep_only=choice.keep, prune_iterative=choice.iterative, prune_random=choice.random
        )

    def line(self) -> str:
        """The plan in one line: what runs and about how long it takes; what the budget left out (more examples,
        keep-one-head, the iterative and random orders), what the fuller sweep would take, and how to ask for it."""
        choice = self.choice()
        text = f"bertwatch ablate: {self.what()}: about {_duration(self._units(choice.keep))} on this {self.device}"
        if self.prune:
            names = ["importance"] + (["iterative"] if choice.iterative else [])
            names += [f"{choice.random} random orders"] if choice.random else []
            text += (
                f", then the pruning orders ({', '.join(names)}) at about {_duration(self.step_seconds(choice))} a "
                f"step, up to {self.max_steps} steps (the curve stops where the metric leaves 90% of its baseline)"
            )
        text += f" (timed on {int(self.rate['chunk'])} configurations of the first batch)"
        return text + self.left_out(choice)

    def left_out(self, choice: Choice) -> str:
        """What the fuller sweep adds to ``choice``, what it would take and the flags that ask for it ("" when
        nothing is left out)."""
        fuller = self.fuller()
        parts, flags, keywords = [], [], []
        if self.available > self.data.size:
            parts.append(f"all {self.available} examples (the first {self.data.size} read here)")
            flags.append(f"--limit {self.available}")
            keywords.append(f"max_examples={self.available}")
        skipped = []
        if fuller.keep and not choice.keep:
            skipped.append("keep-one-head")
            flags.append("--keep-only")
            keywords.append("keep_only=True")
        if fuller.iterative and not choice.iterative:
            skipped.append("the iterative order")
            flags.append("--iterative")
            keywords.append("prune_iterative=True")
        if fuller.random > choice.random:
            skipped.append(f"{fuller.random} random orders")
            flags.append(f"--random-orders {fuller.random}")
            keywords.append(f"prune_random={fuller.random}")
        if skipped:
            why = f"past the {self.budget_s / 60:g}-minute budget" if self.rate else f"not timed, on a {self.device}"
            parts.append(f"{_listed(skipped)} ({why})")
        if not parts:
            return ""
        scale = self.available / max(1, self.data.size)
        took = f" would take about {_duration(self.seconds(fuller) * scale)}" if self.rate else ""
        return f"; the fuller sweep, with {_listed(parts)},{took}: {' '.join(flags)} (ablate(): {', '.join(keywords)})"

    def first_chunk(self, base_seconds: float, chunk_seconds: float, batch: EvalBatch, chunk: Sequence[HeadMask]):
        """Time the plan once; say it (to stderr, above the progress bar) when ``said`` is False."""
        first = not self.rate
        self.timed(base_seconds, chunk_seconds, batch, chunk)
        if not first or self.said:
            return
        self.said = True
        from tqdm.auto import tqdm

        tqdm.write(self.line(), file=sys.stderr)


def first_examples(examples: Any, cap: int | None) -> tuple[Any, int]:
    """The first ``cap`` of ``examples`` (a list, a Hugging Face dataset, or anything sized and indexable; None:
    all) and how many there were (0 when not sized)."""
    if not hasattr(examples, "__len__"):
        return examples, 0
    total = len(examples)
    if cap is None or total <= cap:
        return examples, total
    if hasattr(examples, "select"):  # a datasets.Dataset
        return examples.select(range(cap)), total
    return [examples[i] for i in range(cap)], total
