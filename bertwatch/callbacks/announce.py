"""What bertwatch says while it watches: the lines when watching starts, once step 0 is measured, and at the end.

The lines are built from plain values (``start_lines``, ``cost_line``, ``end_lines``) and printed by ``say`` on
standard error with the prefix ``bertwatch:``, as W&B prints its ``wandb:`` lines. Only world process zero speaks;
``quiet=True`` or the environment variable ``BERTWATCH_QUIET=1`` silences it.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertwatch.callbacks.probe_context import ProbeContext
from bertwatch.report.changes import reference_value, settled
from bertwatch.tb.metadata import VIEW_FLAGS

__all__ = [
    "Pinned",
    "RunPlan",
    "RunSummary",
    "cost_line",
    "end_lines",
    "quiet",
    "report_command",
    "report_file",
    "run_plan",
    "say",
    "start_lines",
]

#: The environment variable that silences the start and end lines (``1``, ``true``, ``yes``).
_QUIET_ENV = "BERTWATCH_QUIET"


def quiet(setting: bool) -> bool:
    """Whether bertwatch keeps quiet: the ``quiet`` setting or ``BERTWATCH_QUIET`` set to a true value."""
    return bool(setting) or os.environ.get(_QUIET_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def say(lines: Sequence[str]) -> None:
    """Print each line as ``bertwatch: line`` on standard error (whatever ``sys.stderr`` is then), through
    ``tqdm.write`` so the Trainer's progress bar is redrawn below it rather than broken by it."""
    from tqdm.auto import tqdm

    for line in lines:
        tqdm.write(f"bertwatch: {line}", file=sys.stderr)


def _shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies inside it, else absolute; quoted for a shell."""
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute)
    except ValueError:  # another drive
        relative = absolute
    return shlex.quote(relative if not relative.startswith("..") else absolute)


def tensorboard_command(run_dir: str) -> str:
    """The ``tensorboard`` command that shows the run in ``run_dir`` beside its sibling runs, every step kept."""
    logdir = os.path.dirname(os.path.abspath(run_dir)) or run_dir
    return f"tensorboard --logdir {_shown_path(logdir)} {' '.join(VIEW_FLAGS)}"


def report_command(output_dir: str) -> str:
    """How to make the HTML report of a training run's output folder."""
    report = os.path.join(output_dir, "report.html")
    return f"bertwatch report {_shown_path(output_dir)}   (writes {_shown_path(report)})"


def report_file(path: str) -> str:
    """Where the report written at the end (with the ablation) lies."""
    return f"{_shown_path(path)}   (the ablation's verdict and the heads' statistics)"


@dataclass(frozen=True)
class Pinned:
    """The pinned passes of a run: step 0, the evaluations (their steps), the end, and a fixed ``every_n_steps``."""

    at_start: bool
    evaluations: tuple[int, ...]
    at_end: bool
    every_n_steps: int | None
    max_steps: int

    def events(self) -> tuple[str, ...]:
        """The pinned events, in words."""
        each = "the evaluation" if len(self.evaluations) == 1 else "each evaluation"
        chosen = (("step 0", self.at_start), (each, bool(self.evaluations)), ("the end", self.at_end))
        return tuple(what for what, on in chosen if on)

    def passes(self) -> int:
        """How many steps the pinned events measure (one pass a step)."""
        every = self.every_n_steps or 0
        steps = set(self.evaluations)
        steps.update(range(every, self.max_steps + 1, every) if every > 0 else ())
        steps.update(s for s, on in ((0, self.at_start), (self.max_steps, self.at_end and self.max_steps > 0)) if on)
        return len(steps)


@dataclass(frozen=True)
class RunPlan:
    """What a callback will measure, for the start line: the model, the probe set, the statistics, the cadence."""

    model: str
    layers: int
    heads: int
    examples: int
    source: str
    longest: int
    cut: int
    cut_to: int | None
    stats: int
    every_n_steps: int | None
    budget: float
    pinned: tuple[str, ...]
    run_dir: str | None
    verdict: bool = False


def run_plan(context: ProbeContext, stats: int, budget: float, pinned: Pinned, verdict: bool = False) -> RunPlan:
    """The start line's facts from the run's ``ProbeContext``, the callback's statistics and cadence; ``verdict``:
    the callback judges the run verdict (it measures the gradient statistics)."""
    info = context.probe.length_info()
    return RunPlan(
        model=type(context.encoder).__name__,
        layers=context.layers,
        heads=context.heads,
        examples=int(info["examples"] or 0),
        source=context.probe_source,
        longest=int(info["longest"] or 0),
        cut=int(info["truncated"] or 0),
        cut_to=info["max_length"],
        stats=stats,
        every_n_steps=pinned.every_n_steps,
        budget=budget,
        pinned=pinned.events(),
        run_dir=context.run_dir,
        verdict=verdict,
    )


def _listed(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def start_lines(plan: RunPlan) -> list[str]:
    """The start lines: what is watched, on which probe set, how often, where the events go and how to see them."""
    cut = f"{plan.cut} cut to {plan.cut_to} tokens" if plan.cut else "none cut"
    if plan.every_n_steps is None:
        cadence = f"as often as {plan.budget:.0%} of the wall time allows"
    elif plan.every_n_steps == 0:
        cadence = "only at pinned steps"
    else:
        cadence = f"every {_plural(plan.every_n_steps, 'step')}"
    pinned = f", plus {_listed(plan.pinned)}" if plan.pinned else ""
    lines = [
        f"watching {plan.model} ({plan.layers} layers x {plan.heads} heads): {_plural(plan.stats, 'statistic')} "
        f"on {_plural(plan.examples, 'probe example')} from {plan.source} (longest {plan.longest} tokens, {cut}), "
        f"measured {cadence}{pinned}" + ("; the run verdict is judged at each" if plan.verdict else "")
    ]
    if plan.run_dir is not None:
        lines.append(f"events go to {_shown_path(plan.run_dir)}")
        lines.append(f"see them live: {tensorboard_command(plan.run_dir)}   (the BERT heads tab)")
    return lines


#: A drift reference larger than this gets a line of its own at the start.
LARGE_REFERENCE = 512 * 2**20


def reference_line(total_bytes: int, examples: int, longest: int) -> str | None:
    """The line saying how large the drift reference is when it is large (None otherwise)."""
    if total_bytes <= LARGE_REFERENCE:
        return None
    return (
        f"the drift reference of the {examples} probe examples (up to {longest} tokens) takes "
        f"{total_bytes / 2**30:.1f} GiB (their float16 maps, on the model's device and in <output_dir>/bertwatch/"
        "reference.pt); fewer or shorter probe examples shrink it (num_probe_examples=, "
        "probing=ProbeOptions(max_length=...) for texts)"
    )


def maps_line(wanted: int, kept: int, longest: int, budget: int) -> str | None:
    """The line saying that fewer examples' maps are written than asked for (None when all are): ``kept`` of
    ``wanted`` fit in ``budget`` bytes a step, the probe examples being up to ``longest`` tokens long."""
    if kept >= wanted:
        return None
    what = "none" if kept == 0 else f"those of the first {_plural(kept, 'example')}"
    return (
        f"attention maps: {what} of the {wanted} asked for, since bertwatch writes at most {budget / 2**20:.3g} MiB "
        f"of maps a step (probe examples of up to {longest} tokens); the statistics cover every probe example"
    )


def cost_line(first_pass: float, pinned_passes: int, budgeted: bool, budget: float) -> str:
    """The line after step 0's pass: what it took, and what the pinned passes will cost in all."""
    rest = f"; between them bertwatch keeps under {budget:.0%} of the wall time" if budgeted else ""
    return (
        f"step 0 measured in {first_pass:.2f} s; the {pinned_passes} pinned pass{'' if pinned_passes == 1 else 'es'} "
        "of this run will cost "
        f"about {first_pass * pinned_passes:.1f} s in all{rest}"
    )


@dataclass(frozen=True)
class RunSummary:
    """What a callback measured, for the end line; ``verdict``: the last verdict on the run in words
    (``core.verdict.Verdict.describe``), None when none was judged."""

    steps: tuple[int, ...]
    alerts: int
    grids: Mapping[str, np.ndarray]
    own_seconds: float
    share: float
    report: str
    verdict: str | None = None

    @classmethod
    def of(
        cls,
        history: Sequence[tuple[int, Mapping[str, np.ndarray]]],
        alerts: int,
        meter: Any,
        report: str,
        verdict: str | None = None,
    ):
        """From a callback's ``history`` (``(step, grids)`` in order), its alert count, its ``OverheadMeter`` and
        its last verdict in words."""
        grids = history[-1][1] if history else {}
        return cls(tuple(step for step, _ in history), alerts, grids, meter.own, meter.share(), report, verdict)


def moved_most(grids: Mapping[str, np.ndarray], count: int = 3) -> list[str] | None:
    """The heads furthest from the reference by ``drift_js`` (else ``1 - drift_cosine``), as ``L2 H7 (JS 0.12)``;
    a drift within float32 rounding of "unchanged" is none (``report.changes.settled``, the report's rule), so the
    list may be empty. None when no drift statistic was measured."""
    stat = next((name for name in ("drift_js", "drift_cosine") if name in grids), None)
    if stat is None:
        return None
    reference = reference_value(stat)
    values = np.abs(settled(stat, grids[stat], reference) - reference)
    label = "JS" if stat == "drift_js" else "1-cos"
    flat = np.where(np.isfinite(values), values, -np.inf).ravel()
    order = [int(i) for i in np.argsort(-flat, kind="stable")[:count] if flat[i] > 0]
    heads = values.shape[1]
    return [f"L{i // heads} H{i % heads} ({label} {flat[i]:.3g})" for i in order]


def end_lines(summary: RunSummary) -> list[str]:
    """The end lines: the steps measured, the alerts, the heads that moved most, bertwatch's share; the verdict on
    the run (when one was judged); the report."""
    steps = summary.steps
    span = f" ({steps[0]} to {steps[-1]})" if len(steps) > 1 else (f" ({steps[0]})" if steps else "")
    moved = moved_most(summary.grids)
    parts = [
        f"measured {_plural(len(steps), 'step')}{span}",
        _plural(summary.alerts, "stability alert"),
    ]
    if moved:
        parts.append(f"moved most: {', '.join(moved)}")
    elif moved is not None:
        parts.append("no head moved beyond float32 rounding")
    parts.append(f"bertwatch took {summary.own_seconds:.1f} s, {summary.share:.1%} of the run")
    verdict = [f"verdict: {summary.verdict}"] if summary.verdict else []
    return ["; ".join(parts), *verdict, f"report: {summary.report}"]
