"""A sweep's runs side by side, whoever read them (``bertwatch sweep`` from the event files, the plugin's Runs view
from TensorBoard's data): each run's verdict now and over its judged steps, its setting, ranked worst first by the
verdict's failure rank, and the failing runs still training, to stop now; the judged steps of any verdict series.
Pure; no file is read here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertwatch.core.verdict import LEVELS, Verdict

#: The scalar the Trainer logs once its training ended (``report_to="tensorboard"``).
TRAINER_END_TAG = "train/train_runtime"
#: The first part of the text tag the Trainer logs its ``TrainingArguments`` under, as JSON.
TRAINER_ARGS_TAG = "args"

__all__ = [
    "STRIP_MARKS",
    "TRAINER_ARGS_TAG",
    "TRAINER_END_TAG",
    "SweepRun",
    "judged_steps",
    "ranked",
    "stop_now",
    "strip",
    "sweep_json",
    "sweep_run",
]

#: One character a judged step in the history strip: healthy, cannot tell, at risk, failing.
STRIP_MARKS = {"healthy": "+", "cannot tell": "?", "at risk": "!", "failing": "X"}
#: The widest strip: longer histories show the worst level of each of this many equal stretches of steps.
STRIP_WIDTH = 24


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: ``name`` (its folder under the log folder, ``#n`` for the n-th run of a folder),
    ``verdict`` (the last judged, with its
    reasons), ``history`` (``(step, label)`` of every judged step), its setting as the Trainer logged it
    (``learning_rate``, ``seed``, ``max_steps``; None where it did not), and ``ended``: the Trainer logged the
    end of its training."""

    name: str
    verdict: Verdict
    history: tuple[tuple[int, str], ...]
    learning_rate: float | None = None
    seed: int | None = None
    max_steps: int | None = None
    ended: bool = False
    args: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def steps_left(self) -> int | None:
        """The steps stopping it now would save (None where ``max_steps`` is unknown; 0 once it ended)."""
        if self.ended:
            return 0
        return None if self.max_steps is None else max(0, self.max_steps - self.verdict.step)


def _number(value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (int, float), None where it is missing or not one."""
    try:
        return None if value is None else kind(value)
    except (TypeError, ValueError):
        return None


def judged_steps(
    steps: Sequence[int], levels: Sequence[float], reasons: Mapping[int, Sequence[str]] | None = None
) -> list[tuple[int, int, list[str]]]:
    """``(step, level, reasons)`` of each judged step of a ``verdict`` series, in order: the steps whose level is
    a finite index of ``LEVELS`` (any other value is skipped), with the reasons its text holds for that step
    (``reasons``; empty where it holds none).

    Example:
        >>> judged_steps([0, 10, 20], [0.0, float("nan"), 2.0], {20: ["diverged"]})
        [(0, 0, []), (20, 2, ['diverged'])]
    """
    given = reasons or {}
    return [
        (int(step), int(level), list(given.get(int(step), [])))
        for step, level in zip(steps, levels)
        if math.isfinite(level) and 0 <= int(level) < len(LEVELS)
    ]


def sweep_run(
    name: str,
    judged: Sequence[tuple[int, int, Sequence[str]]],
    columns: Mapping[str, Mapping[int, float]],
    args: Mapping[str, Any],
    ended: bool,
) -> SweepRun:
    """The :class:`SweepRun` called ``name`` from its ``verdict`` series: ``judged``, ``(step, level, reasons)`` of
    each judged step in order (at least one); ``columns``, the series' other values by name and step
    (``known``, ``evidence``, ``margin``, ``regression``; a missing one: known, NaN, not one); ``args``, the
    Trainer's arguments as it logged them (empty where it did not); ``ended``: it logged the end of its training."""
    known = columns.get("known", {})
    step, level, reasons = judged[-1]
    evidence = float(columns.get("evidence", {}).get(step, math.nan))
    margin = float(columns.get("margin", {}).get(step, math.nan))
    regression = bool(columns.get("regression", {}).get(step, 0.0))
    verdict = Verdict(step, level, tuple(reasons), bool(known.get(step, 1)), evidence, margin, regression)
    history = tuple((s, Verdict(s, lv, known=bool(known.get(s, 1))).label) for s, lv, _ in judged)
    max_steps = _number(args.get("max_steps"), int)
    return SweepRun(
        name=name,
        verdict=verdict,
        history=history,
        learning_rate=_number(args.get("learning_rate"), float),
        seed=_number(args.get("seed"), int),
        max_steps=max_steps if max_steps is not None and max_steps > 0 else None,
        ended=ended,
        args=dict(args),
    )


def ranked(runs: Sequence[SweepRun]) -> list[SweepRun]:
    """``runs`` worst first: by ``Verdict.rank`` descending, then by name."""
    return sorted(runs, key=lambda r: (-r.verdict.rank, r.name))


def stop_now(runs: Sequence[SweepRun]) -> list[SweepRun]:
    """The failing runs that have not ended: stopping them now loses nothing the verdict expects them to give."""
    return [run for run in runs if run.verdict.level == LEVELS.index("failing") and not run.ended]


def strip(history: Sequence[tuple[int, str]], width: int = STRIP_WIDTH) -> str:
    """The verdict over the judged steps, one mark a step (``STRIP_MARKS``: ``+`` healthy, ``?`` cannot tell,
    ``!`` at risk, ``X`` failing); over ``width`` steps, the worst of each of ``width`` equal stretches.

    Example:
        >>> strip([(0, "cannot tell"), (2, "at risk"), (4, "failing")])
        '?!X'
    """
    order = ["healthy", "cannot tell", "at risk", "failing"]
    labels = [label for _, label in history]
    if len(labels) > width:
        edges = np.linspace(0, len(labels), width + 1).astype(int)
        labels = [max(labels[a:b], key=order.index) for a, b in zip(edges[:-1], edges[1:])]
    return "".join(STRIP_MARKS[label] for label in labels)


def sweep_json(runs: Sequence[SweepRun], root: str) -> dict[str, Any]:
    """The same table as a JSON-ready dict: ``runs`` worst first, ``stop_now`` and ``steps_saved``."""
    stop = stop_now(runs)

    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {
        "root": root,
        "runs": [
            {
                "run": run.name,
                "level": run.verdict.level,
                "label": run.verdict.label,
                "known": run.verdict.known,
                "evidence": finite(run.verdict.evidence),
                "margin": finite(run.verdict.margin),
                "rank": run.verdict.rank,
                "step": run.verdict.step,
                "max_steps": run.max_steps,
                "ended": run.ended,
                "reasons": list(run.verdict.reasons),
                "history": [{"step": s, "label": label} for s, label in run.history],
                "strip": strip(run.history),
                "learning_rate": run.learning_rate,
                "seed": run.seed,
            }
            for run in runs
        ],
        "stop_now": [{"run": run.name, "steps_left": run.steps_left} for run in stop],
        "steps_saved": sum(run.steps_left or 0 for run in stop),
    }
