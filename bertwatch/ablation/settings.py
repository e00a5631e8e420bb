"""The settings of one ablation sweep: one frozen, documented value instead of two dozen keyword arguments."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bertwatch.core.modes import check_mode
from bertwatch.core.removable import DEFAULT_DELTA

__all__ = ["AblationSettings"]


@dataclass(frozen=True)
class AblationSettings:
    """What to evaluate, how to score it and how to run it. Every field has a default; see :func:`ablate`.

    What: ``task`` (a GLUE task name or a task type such as ``"token-classification"``; None = what the model's
    head does), ``mode`` ("uniform": Kovaleva's uniform attention, "zero": Michel's zeroed context), ``keep_only``
    (also "only head h of layer l left on"), ``prune`` (the importance-ordered pruning curve, ``prune_step`` of the
    remaining heads a step, until the metric falls below ``prune_threshold`` x baseline), beside it
    ``prune_random`` random orders (seeded by ``seed``; 0: none) and, with ``prune_iterative``, Michel's iterative
    order (importance re-estimated after each step), at the same steps; ``delta`` is the δ of the answer "up to N%
    of heads removed with the metric within δ of the baseline" (:mod:`bertwatch.core.removable`), in the
    metric's units (default 0.01: one point of accuracy).
    Scoring: ``metric`` (a key of ``compute_metrics``' result, or a built-in name), ``greater_is_better``,
    ``n_resamples``/``seed``/``confidence`` of the paired bootstrap.
    QA: ``max_answer_length``, the longest span (in tokens) the best answer may have.
    Running: ``batch_size`` examples a batch, ``configs_per_batch`` configurations stacked in one batch (None: on
    a GPU as many as fit in half its free memory at the longest example, at most 512; elsewhere 128 rows, i.e.
    128 // ``batch_size`` configurations; see ``bertwatch.ablation.runner.default_configs_per_batch``), ``shard_size`` examples per resumable unit, ``max_length`` tokens per example,
    ``reuse`` (lower-layer reuse), ``resume`` (from ``out_dir/partial.jsonl``), ``distributed`` (None: when
    launched under accelerate / torchrun), ``progress`` (a progress bar).
    Output: ``out_dir`` (ablation.json, ablation.csv, report.html, partial.jsonl), ``logdir`` (a TensorBoard run
    folder) and the global ``step`` the summaries are written at.
    """

    task: str | None = None
    mode: str = "uniform"
    out_dir: str | os.PathLike | None = None
    metric: str | None = None
    greater_is_better: bool = True
    logdir: str | os.PathLike | None = None
    step: int = 0
    keep_only: bool = True
    prune: bool = True
    prune_step: float = 0.1
    prune_threshold: float = 0.9
    prune_random: int = 5
    prune_iterative: bool = True
    delta: float = DEFAULT_DELTA
    n_resamples: int = 1000
    seed: int = 0
    confidence: float = 0.95
    batch_size: int = 32
    configs_per_batch: int | None = None
    shard_size: int = 256
    max_length: int = 128
    max_answer_length: int = 30
    reuse: bool = True
    resume: bool = True
    distributed: bool | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        check_mode(self.mode)
        for name in ("batch_size", "shard_size", "max_length", "max_answer_length", "n_resamples"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.configs_per_batch is not None and self.configs_per_batch < 1:
            raise ValueError(f"configs_per_batch must be >= 1 (or None), got {self.configs_per_batch}")
        if not 0 < self.prune_step <= 1:
            raise ValueError(f"prune_step must be in (0, 1], got {self.prune_step}")
        if int(self.prune_random) < 0:
            raise ValueError(f"prune_random must be >= 0 (random pruning orders), got {self.prune_random}")
        if not (isinstance(self.delta, (int, float)) and 0 <= self.delta < float("inf")):
            raise ValueError(f"delta must be a finite number >= 0 in the metric's units, got {self.delta!r}")
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def resolve(cls, settings: AblationSettings | None = None, **overrides: Any) -> AblationSettings:
        """``settings`` (or the defaults) with ``overrides`` applied; an unknown name is a ``TypeError`` that lists
        the known ones (as a misspelt keyword argument would be)."""
        unknown = sorted(set(overrides) - set(cls.names()))
        if unknown:
            raise TypeError(
                f"ablate() got unexpected keyword argument(s) {', '.join(unknown)}; settings are: "
                f"{', '.join(cls.names())}"
            )
        base = settings if settings is not None else cls()
        if not isinstance(base, cls):
            raise TypeError(f"settings must be an AblationSettings, not {type(base).__name__}")
        return dataclasses.replace(base, **overrides) if overrides else base
