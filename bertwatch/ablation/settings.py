"""The settings of one ablation sweep: one frozen, documented value instead of two dozen keyword arguments."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bertwatch.core.modes import check_mode
from bertwatch.core.removable import DEFAULT_DELTA

__all__ = ["DEFAULT_BUDGET_MINUTES", "DEFAULT_RANDOM_ORDERS", "AblationSettings"]

#: The random pruning orders a sweep runs when ``prune_random`` is left to the budget and the budget allows them.
DEFAULT_RANDOM_ORDERS = 5
#: The minutes a sweep may take with the pruning orders left to the budget (``bertwatch.ablation.estimate``).
DEFAULT_BUDGET_MINUTES = 5.0


@dataclass(frozen=True)
class AblationSettings:
    """What to evaluate, how to score it and how to run it: every choice of one sweep, checked when made, compared by
    value. Every field has a default; :func:`~bertwatch.ablation.sweep.ablate` takes it as ``settings=`` and any field
    as a keyword that overrides it.

    Args:
        task: a GLUE task name or a task type such as ``"token-classification"``; None: what the model's head does.
        mode: ``"uniform"`` (Kovaleva's uniform attention) or ``"zero"`` (Michel's zeroed context).
        out_dir: folder for ablation.json, ablation.csv, report.html and partial.jsonl; None: no files.
        metric: a key of ``compute_metrics``' result, or a built-in metric name; None: the task's primary one.
        greater_is_better: the metric's direction (a loss or perplexity is always lower-is-better).
        logdir: a TensorBoard run folder for the summaries (or ``ablate(writer=...)``).
        step: the global step the summaries are written at.
        keep_only: also score "only head h of layer l left on"; None (the default): when the sweep with them fits
            ``budget_minutes``.
        prune: the importance-ordered pruning curve, ``prune_step`` of the heads a step, until the metric falls
            below ``prune_threshold`` x baseline.
        prune_step: share of the heads pruned per step, in (0, 1].
        prune_threshold: where the pruning curve stops, as a share of the baseline.
        prune_random: random orders at the same steps (seeded by ``seed``; 0: none); None (the default): 5 when the
            sweep with them fits ``budget_minutes``, else none.
        prune_iterative: Michel's iterative order too (importance re-estimated after each step); None (the default):
            when the sweep with it fits ``budget_minutes``.
        budget_minutes: what the whole sweep may take, by the estimate timed on its first batch
            (:mod:`bertwatch.ablation.estimate`, the rule's home): the parts left to it (None above: keep-one-head,
            the iterative order, the random orders) run when the sweep with them still fits, and are left out,
            said so with their cost and how to ask for them, when it does not (default 5; None: no budget, they
            run). Parts asked for (True, a number) always run.
        delta: the δ of the answer "up to N% of heads removed with the metric within δ of the baseline"
            (:mod:`bertwatch.core.removable`), in the metric's units (default 0.01: one point of accuracy).
        n_resamples: paired bootstrap resamples.
        seed: seed of the bootstrap, the random orders and masked-LM masks.
        confidence: two-sided confidence of the intervals, in (0, 1).
        batch_size: examples a batch.
        configs_per_batch: configurations stacked in one batch. None: on a GPU as many as fit in half its free
            memory at the longest example, at most 512; elsewhere 128 rows, i.e. 128 // ``batch_size``
            configurations (``bertwatch.ablation.runner``: ``MEMORY_SHARE``, ``MAX_CONFIGS``, ``CPU_ROWS``).
        shard_size: examples per resumable unit.
        max_examples: the sweep reads the first this many examples; None (the default): all of them on a GPU, the
            first 128 on a CPU (``bertwatch.ablation.estimate.CPU_EXAMPLES``), which the plan line says with what
            all of them would take.
        max_length: tokens per text example (capped by the model's maximum; longer ones are cut, with a warning).
        max_answer_length: QA: the longest span (in tokens) the best answer may have.
        reuse: reuse the baseline's lower layers (exact; off only to compare).
        resume: resume from ``out_dir/partial.jsonl``.
        distributed: split the configurations across processes; None: when launched under accelerate / torchrun.
        progress: show a progress bar.

    Raises:
        ValueError: a mode, size, step, count, δ or confidence out of range (the message names the field).
        TypeError: from :meth:`resolve`, a field name that does not exist (the message lists the fields).

    Example:
        >>> from bertwatch.ablation import AblationSettings
        >>> s = AblationSettings(mode="zero", n_resamples=200)
        >>> s == AblationSettings(n_resamples=200, mode="zero")
        True
        >>> AblationSettings.resolve(s, seed=3).seed
        3
        >>> AblationSettings(mode="half")
        Traceback (most recent call last):
        ValueError: unknown mode 'half': use 'uniform' (Kovaleva) or 'zero' (Michel)
        >>> AblationSettings.resolve(s, resamples=10)
        Traceback (most recent call last):
        TypeError: ablate() got unexpected keyword argument(s) resamples; settings are: task, mode, ...
    """

    task: str | None = None
    mode: str = "uniform"
    out_dir: str | os.PathLike | None = None
    metric: str | None = None
    greater_is_better: bool = True
    logdir: str | os.PathLike | None = None
    step: int = 0
    keep_only: bool | None = None
    prune: bool = True
    prune_step: float = 0.1
    prune_threshold: float = 0.9
    prune_random: int | None = None
    prune_iterative: bool | None = None
    budget_minutes: float | None = DEFAULT_BUDGET_MINUTES
    delta: float = DEFAULT_DELTA
    n_resamples: int = 1000
    seed: int = 0
    confidence: float = 0.95
    batch_size: int = 32
    configs_per_batch: int | None = None
    shard_size: int = 256
    max_examples: int | None = None
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
        if self.max_examples is not None and int(self.max_examples) < 1:
            raise ValueError(
                f"max_examples must be >= 1 (or None: the default for the device), got {self.max_examples}"
            )
        if self.configs_per_batch is not None and self.configs_per_batch < 1:
            raise ValueError(f"configs_per_batch must be >= 1 (or None), got {self.configs_per_batch}")
        if not 0 < self.prune_step <= 1:
            raise ValueError(f"prune_step must be in (0, 1], got {self.prune_step}")
        if self.prune_random is not None and int(self.prune_random) < 0:
            raise ValueError(
                f"prune_random must be >= 0 (random pruning orders) or None (as the budget allows), got "
                f"{self.prune_random}"
            )
        if self.budget_minutes is not None and not 0 < self.budget_minutes < float("inf"):
            raise ValueError(
                f"budget_minutes must be a number of minutes > 0, or None for no budget, got {self.budget_minutes!r}"
            )
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
