"""What bertwatch says while it watches: the lines when watching starts, after the first steps (what the run will
cost), at a new stability alert or a failing verdict, and at the end.

The lines are built from plain values (``start_lines``, ``forecast_line``, ``alert_lines``, ``end_lines``) in the
words of what the user did (step 0, the evaluations, the end), and printed by ``say`` on standard error with the
prefix ``bertwatch:``, as W&B prints its ``wandb:`` lines. Only world process zero speaks; ``quiet=True`` or the
environment variable ``BERTWATCH_QUIET=1`` silences it. The arithmetic of the cost is ``core.budget``'s.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertwatch.core.alerts import QUANTITY_STATS, Alert
from bertwatch.core.budget import CostForecast
from bertwatch.probe.probe_context import ProbeContext
from bertwatch.report.changes import reference_value, settled
from bertwatch.tb.writer.metadata import VIEW_FLAGS

__all__ = [
    "Pinned",
    "RunPlan",
    "RunSummary",
    "Speaker",
    "end_lines",
    "forecast_line",
    "more_points_line",
    "percents",
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
    """What a run measures whatever it costs: step 0, the evaluations (their steps), the end, and a fixed
    ``every_n_steps`` (None: between them the overhead budget decides); ``max_steps`` the run's last step."""

    at_start: bool
    evaluations: tuple[int, ...]
    at_end: bool
    every_n_steps: int | None
    max_steps: int

    @classmethod
    def of(cls, pinned: Any, evaluations: tuple[int, ...], every_n_steps: int | None, max_steps: int) -> Pinned:
        """From a pacing's pinned events (``callbacks.pacing.Pinned``: ``at_start``, ``at_end``), the steps the
        Trainer will evaluate at, the cadence and the last step."""
        return cls(pinned.at_start, evaluations, pinned.at_end, every_n_steps, max_steps)

    def events(self, counted: bool = False) -> tuple[str, ...]:
        """The events, in words: ``("step 0", "each evaluation", "the end")``; ``counted``: ``"the 2 evaluations"``
        and no end apart from an evaluation at the last step (the cost lines' words, each measurement once, the setup
        counted with step 0)."""
        n = len(self.evaluations)
        each = "the evaluation" if n == 1 else (f"the {n} evaluations" if counted else "each evaluation")
        start = self.at_start or counted
        end = self.at_end and not (counted and self.max_steps in self.evaluations)
        chosen = (("step 0", start), (each, bool(self.evaluations)), ("the end", end))
        return tuple(what for what, on in chosen if on)

    def steps(self) -> tuple[int, ...]:
        """The steps measured after step 0 for an event: the evaluations and the end (the forecast's ``events``)."""
        end = (self.max_steps,) if self.at_end and self.max_steps > 0 else ()
        return tuple(sorted(set(self.evaluations) | set(end)))


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


def run_plan(
    context: ProbeContext, stats: int, budget: float, pinned: Pinned, verdict: bool = False, run_dir: str | None = None
) -> RunPlan:
    """The start line's facts from the run's ``ProbeContext``, the callback's statistics and cadence; ``verdict``:
    the callback judges the run verdict (it measures the gradient statistics); ``run_dir``: where the events go."""
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
        run_dir=run_dir,
        verdict=verdict,
    )


def _listed(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def start_lines(plan: RunPlan) -> list[str]:
    """The start lines: what is watched, on which probe set, when, where the events go and how to see them."""
    cut = f"{plan.cut} cut to {plan.cut_to} tokens" if plan.cut else "none cut"
    when = list(plan.pinned)
    if plan.every_n_steps:
        when.insert(1 if "step 0" in when else 0, f"every {_plural(plan.every_n_steps, 'step')}")
    measured = f"measured at {_listed(when)}" if when else "measured at no step"
    if plan.every_n_steps is None:
        measured += f"{',' if when else ''} and in between as the {plan.budget:.0%} overhead budget allows"
    lines = [
        f"watching {plan.model} ({plan.layers} layers x {plan.heads} heads): {_plural(plan.stats, 'statistic')} "
        f"on {_plural(plan.examples, 'probe example')} from {plan.source} (longest {plan.longest} tokens, {cut}), "
        f"{measured}"
        + (
            "; the run verdict reads every step's training loss and each measurement's probe loss"
            if plan.verdict
            else ""
        )
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
        f"the drift reference of the {examples} probe examples (up to {longest} tokens) is "
        f"{total_bytes / 2**30:.1f} GiB of float16 maps, kept in host memory (none on a GPU; on a CPU a frozen copy "
        "of the model instead when that is smaller) and in <output_dir>/bertwatch/reference.pt; fewer or shorter "
        "probe examples shrink it (num_probe_examples=, probing=ProbeOptions(max_length=...) for texts)"
    )


def reference_lines(context: ProbeContext) -> list[str]:
    """The line on the size of a large drift reference of the run's probe set (none when it is small)."""
    info = context.probe.length_info()
    total = sum(context.probe.maps_bytes(context.layers, context.heads))
    line = reference_line(total, int(info["examples"] or 0), int(info["longest"] or 0))
    return [line] if line else []


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


def _duration(seconds: float) -> str:
    """``45 s``, ``3 min``, ``2.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


def percents(total: float, parts: Sequence[float], digits: int) -> tuple[str, list[str]]:
    """``total`` and its ``parts`` (shares, adding up to it) as percentages with ``digits`` decimals that add up as
    printed: each part rounded down, the units left given to the largest remainders (``["10.7%", "1.9%"]`` for
    ``12.6%``)."""
    scale = 100 * 10**digits
    whole = round(total * scale)
    floors = [int(np.floor(p * scale)) for p in parts]
    order = sorted(range(len(parts)), key=lambda i: floors[i] - parts[i] * scale)
    for i in order[: max(0, whole - sum(floors))]:
        floors[i] += 1
    return f"{whole / 10**digits:.{digits}f}%", [f"{f / 10**digits:.{digits}f}%" for f in floors]


def _split(shares: tuple[float, float, float], count: int, pinned: Pinned, of: str, digits: int) -> str:
    """``12.6% of the run: 10.7% for step 0, the evaluation and the end, 1.9% for 3 measurements between them``:
    ``shares`` (all, the events', those between them), ``count`` the measurements between them, ``pinned`` the
    events, ``of`` (`` of the run``; `` of that``: a forecast, whose count is "about"); when none was between,
    ``all for`` the events."""
    shown, (for_events, for_between) = percents(shares[0], shares[1:], digits)
    events = _listed(pinned.events(counted=True))
    if count == 0:
        return f"{shown}{of}, all for {events}"
    if pinned.every_n_steps:
        between = f"the {_plural(count, 'measurement')} every {_plural(pinned.every_n_steps, 'step')}"
    else:
        between = f"{'about ' if of == ' of that' else ''}{_plural(count, 'measurement')} between them"
    return f"{shown}{of}: {for_events} for {events}, {for_between} for {between}"


def _over_budget(share: float, budget: float, pinned: Pinned, count: int, tense: str) -> str:
    """Why nothing was measured between the events under a budget they alone exceed (else nothing)."""
    if count or pinned.every_n_steps is not None or share <= budget:
        return ""
    return f": more than the {budget:.0%} overhead budget, so nothing {tense} measured in between"


def forecast_step(first: int, last: int) -> int | None:
    """The step after which the cost line is said: 5 steps in, or a tenth of a short run (None: a run of one step,
    or of unknown length, has no pace to tell)."""
    steps = last - first
    return first + min(5, max(1, steps // 10)) if steps > 1 else None


def forecast_line(start_s: float, step_s: float, steps: int, cost: CostForecast, pinned: Pinned, budget: float) -> str:
    """The line after the first steps: what step 0 took, how long the run's ``steps`` steps will take at
    ``step_s`` seconds a step, and bertwatch's expected share (``core.budget.forecast``), split between the events
    (step 0, the evaluations, the end) and the measurements between them.

    Example:
        >>> cost = CostForecast(wall_s=220.0, events_s=16.0, between_s=4.0, between=2)
        >>> print(forecast_line(6.0, 1.0, 200, cost, Pinned(True, (100, 150), True, None, 200), 0.02))
        setting up and measuring step 0 took 6.0 s; at 1 s a step the run's 200 steps take about 4 min and bertwatch
        about 9% of that: 7% for step 0, the 2 evaluations and the end, 2% for about 2 measurements between them
    """
    shares = cost.shares()
    split = _split(shares, cost.between, pinned, " of that", 1 if shares[0] < 0.02 else 0)
    over = _over_budget(shares[0], budget, pinned, cost.between, "is")
    return (
        f"setting up and measuring step 0 took {start_s:.1f} s; at {step_s:.2g} s a step the run's "
        f"{_plural(steps, 'step')} take about {_duration(cost.wall_s)} and bertwatch about {split}{over}"
    )


#: A budgeted run measured at fewer steps than this is told, in its cost line, how to get more points.
FEW_POINTS = 4


def more_points_line(points: int, steps: int, every: int, more: CostForecast, now: float, budget: float) -> str:
    """What a run measured at only ``points`` steps of its ``steps`` can do to get a live line: ``every_n_steps=every``
    and its forecast ``more`` (what the run would cost with it), against ``now``, its share under the ``budget``.

    Example:
        >>> more = CostForecast(wall_s=100.0, events_s=6.0, between_s=8.0, between=8)
        >>> print(more_points_line(3, 80, 10, more, 0.06, 0.02))
        only 3 of the run's 80 steps will be measured, so its live lines are straight between them: every_n_steps=10
        (bertwatch run --every-n-steps 10) measures 8 more, for about 14% of the run's wall time instead of 6%; or
        raise overhead_budget= (now 2%) to let the budget take more
    """
    return (
        f"only {points} of the run's {steps} steps will be measured, so its live lines are straight between them: "
        f"every_n_steps={every} (bertwatch run --every-n-steps {every}) measures {more.between} more, for about "
        f"{more.share:.0%} of the run's wall time instead of {now:.0%}; or raise overhead_budget= (now "
        f"{budget:.0%}) to let the budget take more"
    )


@dataclass(frozen=True)
class RunSummary:
    """What a callback measured, for the end lines: the measured ``steps``, the ``alerts`` raised, the last
    ``grids``; bertwatch's ``own_seconds`` and its ``shares`` of the run's wall time (all, the events', those between
    them), the ``between`` measurements, the events (``pinned``) and the ``budget``; where the ``report`` is; the
    last ``verdict`` on the run in words (``core.verdict.Verdict.describe``), None when none was judged;
    ``after_training``: the seconds of the ablation after the last measurement, left out of the shares' wall time."""

    steps: tuple[int, ...]
    alerts: int
    grids: Mapping[str, np.ndarray]
    own_seconds: float
    shares: tuple[float, float, float]
    between: int
    pinned: Pinned
    budget: float
    report: str
    verdict: str | None = None
    after_training: float = 0.0
    in_force: int | None = None

    @classmethod
    def of(
        cls,
        history: Sequence[tuple[int, Mapping[str, np.ndarray]]],
        raised: Sequence[Alert],
        verdict: Any,
        pacing: Any,
        pinned: Pinned,
        report: str,
        after_training: float = 0.0,
        in_force: int | None = None,
    ):
        """From a callback's ``history`` (``(step, grids)`` in order), the alerts raised on its statistics, the last
        verdict (None: none, or the callback gives no run-health signals), its ``ProbePacing`` and the events it
        planned (``pinned``; those it measured are the pacing's); ``in_force``: the alerts on its statistics still in
        force at the end (the count the verdict reads)."""
        verdict = verdict.describe() if verdict is not None else None
        alerts, grids = len(raised), history[-1][1] if history else {}
        measured = pacing.measured("evaluation"), bool(pacing.measured("end"))
        pinned = dataclasses.replace(pinned, evaluations=measured[0], at_end=measured[1])
        events, between, count = pacing.spent()
        wall = pacing.meter.wall() - after_training
        shares = tuple(x / wall if wall > 0 else 0.0 for x in (events + between, events, between))
        steps = tuple(step for step, _ in history)
        budget = pacing.meter.budget
        return cls(
            steps, alerts, grids, events + between, shares, count, pinned, budget, report, verdict, after_training,
            in_force,
        )  # fmt: skip


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
    """The end lines: the steps measured, the alerts, the heads that moved most; what bertwatch took, split between
    the events and the measurements between them; the verdict on the run (when one was judged); the report."""
    steps = summary.steps
    span = f" ({steps[0]} to {steps[-1]})" if len(steps) > 1 else (f" ({steps[0]})" if steps else "")
    moved = moved_most(summary.grids)
    parts = [
        f"measured {_plural(len(steps), 'step')}{span}",
        _plural(summary.alerts, "stability alert") + _in_force(summary),
    ]
    if moved:
        parts.append(f"moved most: {', '.join(moved)}")
    elif moved is not None:
        parts.append("no head moved beyond float32 rounding")
    split = _split(summary.shares, summary.between, summary.pinned, " of the run", 1)
    over = _over_budget(summary.shares[0], summary.budget, summary.pinned, summary.between, "was")
    verdict = [f"verdict: {summary.verdict}"] if summary.verdict else []
    after = f"; then the ablation after training took {summary.after_training / 60:.1f} min"
    took = f"took {summary.own_seconds:.1f} s, {split}{over}" + (after if summary.after_training >= 1.0 else "")
    return ["; ".join(parts), took, *verdict, f"report: {summary.report}"]


def _in_force(summary: RunSummary) -> str:
    """How many of the alerts raised are still in force at the end (what the verdict counts), where not all."""
    if summary.in_force is None or not summary.alerts or summary.in_force == summary.alerts:
        return ""
    return f" raised, {summary.in_force} still in force at the end"


class Speaker:
    """What one callback says over a run: the start lines, the cost line after the first steps, the end lines.
    ``speaks``: world process zero and not quiet; ``pinned``: what the run measures whatever it costs."""

    def __init__(self) -> None:
        self.speaks = False
        self.pinned: Pinned | None = None
        self._forecast_at: int | None = None  # the step after which the cost line is printed

    def start(
        self, context: ProbeContext, side: Any, member: Any, pacing: Any, evaluations: tuple[int, ...], speaks: bool,
        first: bool, more: list[str],
    ) -> None:  # fmt: skip
        """The start lines of a callback that ``speaks``: what ``member`` measures with its ``pacing`` (the
        Trainer evaluating at ``evaluations``), where the events go (``side.run_dir``, the run's ``TrainerSide``)
        only from the run's ``first`` callback, and the callback's own lines (``more``)."""
        step, last = pacing.meter.first_step, int(side.state.max_steps or 0)
        self.pinned = Pinned.of(pacing.pinned, evaluations, pacing.every_n_steps, last)
        self.speaks = speaks
        if speaks:
            budget, names = pacing.meter.budget, member.stat_names
            lines = start_lines(run_plan(context, len(names), budget, self.pinned, member.gives_health, side.run_dir))
            say((lines if first else lines[:1]) + more)
            self._forecast_at = forecast_step(step, last)

    def forecast(self, step: int, pacing: Any) -> None:
        """The cost line, once, at the first step at or after the forecast's step with a measured cost."""
        if self._forecast_at is None or step < self._forecast_at or pacing.meter.last_cost is None:
            return
        self._forecast_at, start = None, pacing.clock()  # what the run will cost, at the pace so far
        expected = pacing.forecast(step, self.pinned.steps(), self.pinned.max_steps)
        say([forecast_line(*expected, self.pinned, pacing.meter.budget)] + self._more_points(step, pacing, expected))
        pacing.charge(pacing.clock() - start)

    def _more_points(self, step: int, pacing: Any, expected: tuple) -> list[str]:
        """The line on how to get more points, for a budgeted run that will be measured at fewer than
        ``FEW_POINTS`` steps (none otherwise)."""
        steps, cost = expected[2], expected[3]
        points = 1 + len(self.pinned.steps()) + cost.between
        if pacing.every_n_steps is not None or points >= FEW_POINTS or steps < 2 * FEW_POINTS:
            return []
        every = max(1, round(steps / 10))
        more = pacing.forecast(step, self.pinned.steps(), self.pinned.max_steps, every)[3]
        return [more_points_line(points, steps, every, more, cost.share, pacing.meter.budget)]

    def end(self, history: Sequence[tuple[int, Mapping[str, np.ndarray]]], alerting: Any, member: Any, pacing: Any,
            report: str, after_training: float = 0.0, verdict: Any = None) -> None:  # fmt: skip
        """The end lines (:class:`RunSummary`) of a callback: the run's alerts (``alerting``, read only) on
        ``member``'s statistics, and ``verdict``, the run's verdict to tell (``Alerting.verdict_to_tell``; None:
        none)."""
        if self.speaks:

            def measured(alert: Alert) -> bool:  # an alert on a quantity made of this callback's statistics
                return bool(set(QUANTITY_STATS.get(alert.stat, (alert.stat,))) & member.stat_names)

            raised = [a for a in alerting.raised if measured(a)]
            in_force = sum(1 for a in alerting.alerts if measured(a))
            summary = RunSummary.of(history, raised, verdict, pacing, self.pinned, report, after_training, in_force)
            say(end_lines(summary))
