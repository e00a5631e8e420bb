"""The settings of one ablation sweep: one frozen, checked value instead of two dozen keyword arguments.

Every field is declared with :func:`~bertwatch.core.schema.option` (default, help text, check and the flags of
``bertwatch ablate``, which builds its options from them), as the monitoring options are.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bertwatch.core.modes import MODES, check_mode
from bertwatch.core.removable import DEFAULT_DELTA
from bertwatch.core.schema import Checked, Flag, number, option, path_or_none, switch, text_or_none, whole

__all__ = ["DEFAULT_BUDGET_MINUTES", "DEFAULT_RANDOM_ORDERS", "AblationSettings"]

#: The random pruning orders a sweep runs when ``prune_random`` is left to the budget and the budget allows them.
DEFAULT_RANDOM_ORDERS = 5
#: The minutes a sweep may take with the pruning orders left to the budget (``bertwatch.ablation.estimate``).
DEFAULT_BUDGET_MINUTES = 5.0


def _mode(name: str, value: Any) -> str:
    """The check of a mode option: a string that is one of ``core.modes.MODES`` (``check_mode``'s message)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(repr(m) for m in MODES)}, not {value!r}")
    return check_mode(value, name)


@dataclass(frozen=True, eq=False, init=False)
class AblationSettings(Checked):
    """What to evaluate, how to score it and how to run it: every choice of one sweep, checked when made, compared by
    value, built from keywords. Every field has a default; :func:`~bertwatch.ablation.sweep.ablate` takes it as ``settings=`` and any field
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
        TypeError: a value of the wrong type, or a field name that does not exist (the constructor suggests the
            closest; :meth:`resolve` lists the fields, as ``ablate()`` refuses a misspelt keyword).

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

    task: str | None = option(
        None, "a GLUE task name or a task type such as token-classification (default: what the model's head does)",
        text_or_none,
    )  # fmt: skip
    mode: str = option(
        "uniform", "how a head is switched off: uniform (Kovaleva: it attends to every token equally) or zero "
        "(Michel: its output is zeroed)", _mode,
        Flag(("--mode",), "choice", choices=MODES),
    )  # fmt: skip
    out_dir: str | os.PathLike | None = option(
        None, "folder for ablation.json, ablation.csv, report.html and partial.jsonl (default: no files)", path_or_none
    )
    metric: str | None = option(
        None, "metric to compare (default: the task's primary metric)", text_or_none, Flag(("--metric",), "str")
    )
    greater_is_better: bool = option(
        True, "the metric's direction (a loss or perplexity is always lower-is-better)", switch()
    )
    logdir: str | os.PathLike | None = option(
        None, "a TensorBoard run folder for the summaries", path_or_none,
        Flag(("--logdir",), "str", metavar="DIR", help="TensorBoard run folder for the summaries (default: OUT)"),
    )  # fmt: skip
    step: int = option(0, "the global step the summaries are written at", whole(0))
    keep_only: bool | None = option(
        None, "score the keep-one-head-per-layer configurations (default: when the sweep with them fits the budget)",
        switch(optional=True), Flag(("--keep-only",), "yes_no"),
    )  # fmt: skip
    prune: bool = option(
        True, "the importance-ordered pruning curve", switch(),
        Flag(("--no-prune",), "false", help="skip the pruning curves"),
    )  # fmt: skip
    prune_step: float = option(0.1, "share of the heads pruned per step", number(0.0, at_most=1.0))
    prune_threshold: float = option(0.9, "where the pruning curve stops, as a share of the baseline", number(None))
    prune_random: int | None = option(
        None, f"random pruning orders beside the importance order (default: {DEFAULT_RANDOM_ORDERS} when the sweep "
        "with them fits the budget, else none)",
        whole(0, optional=True, meaning=" (random pruning orders) or None (as the budget allows)"),
        Flag(("--random-orders",), "int"),
    )  # fmt: skip
    prune_iterative: bool | None = option(
        None, "the iterative-importance order, one gradient pass a step (default: when the sweep with it fits the "
        "budget)", switch(optional=True), Flag(("--iterative",), "yes_no"),
    )  # fmt: skip
    budget_minutes: float | None = option(
        DEFAULT_BUDGET_MINUTES, "what the sweep may take by its estimate: keep-one-head and the iterative and random "
        f"orders, unless asked for, run only when it still fits (default {DEFAULT_BUDGET_MINUTES:g}; None, or 0 on the "
        "command line: no budget, they all run)", number(0.0, optional=True, meaning=" of minutes, or None for no budget"),
        Flag(("--budget-minutes",), "float_or_none", metavar="MINUTES"),
    )  # fmt: skip
    delta: float = option(
        DEFAULT_DELTA, "δ of the answer 'up to N% of heads removed with the metric within δ of the baseline', in the "
        f"metric's units (default {DEFAULT_DELTA}: one point of accuracy)",
        number(None, at_least=0.0, meaning=" in the metric's units"), Flag(("--delta",), "float"),
    )  # fmt: skip
    n_resamples: int = option(1000, "bootstrap resamples", whole(1), Flag(("--resamples",), "int"))
    seed: int = option(
        0, "seed of the bootstrap, the random orders and masked-LM masks", whole(), Flag(("--seed",), "int")
    )
    confidence: float = option(0.95, "two-sided confidence of the intervals", number(0.0, below=1.0))
    batch_size: int = option(32, "examples a batch", whole(1), Flag(("--batch-size",), "int"))
    configs_per_batch: int | None = option(
        None, "configurations stacked in one batch (default: as many as fit)", whole(1, optional=True, meaning=" (or None)"),
        Flag(("--configs-per-batch",), "int"),
    )  # fmt: skip
    shard_size: int = option(256, "examples per resumable unit", whole(1))
    max_examples: int | None = option(
        None, "the sweep reads the first this many examples (default: all on a GPU, the first 128 on a CPU)",
        whole(1, optional=True, meaning=" (or None: the default for the device)"),
    )  # fmt: skip
    max_length: int = option(
        128, "tokens per text example (capped by the model's maximum)", whole(1), Flag(("--max-length",), "int")
    )
    max_answer_length: int = option(
        30, "QA: longest answer span in tokens", whole(1), Flag(("--max-answer-length",), "int")
    )
    reuse: bool = option(True, "reuse the baseline's lower layers (exact; off only to compare)", switch())
    resume: bool = option(
        True, "resume from out_dir/partial.jsonl", switch(),
        Flag(("--no-resume",), "false", help="start over even if OUT/partial.jsonl exists"),
    )  # fmt: skip
    distributed: bool | None = option(
        None, "split the configurations across processes (default: when launched under accelerate or torchrun)",
        switch(optional=True),
    )  # fmt: skip
    progress: bool = option(True, "show a progress bar", switch(), Flag(("--quiet",), "false", help="no progress bar"))

    @classmethod
    def option_prefix(cls) -> str:
        return ""

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
