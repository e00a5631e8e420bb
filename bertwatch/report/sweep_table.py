"""Every run of a sweep side by side (``bertwatch sweep LOGDIR``): each run's verdict now, its history as a strip,
its setting where the Trainer logged it, ranked worst first, and the failing runs still training, to stop now.

A run is one training (one ``trainer.train()``): one bertwatch event file (``*.bertwatch``), named by its folder
(and its place among the folder's bertwatch files, ``folder#2``, where trials of ``hyperparameter_search`` without
``hp_name`` share one folder). Its verdict is read from the ``verdict`` series and text
(``report.events.read_series_and_texts``, ``verdict_steps``), its setting (learning rate, seed, ``max_steps``) and
whether it ended from the Trainer's own event file of the same name without ``.bertwatch``
(``report.events.trainer_run``: ``report_to="tensorboard"``; else the folder's Trainer files by their order). Ranked and
stripped by ``core.sweep_verdicts`` (the verdict's failure rank: failing first, then the smallest margin of learning).
Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertwatch.core.sweep_verdicts import SweepRun, ranked, stop_now, strip, sweep_run
from bertwatch.core.verdict import VERDICT_SERIES
from bertwatch.report.events import read_series_and_texts, trainer_run, verdict_steps

__all__ = ["find_runs", "read_sweep", "sweep_lines"]


def _is_bertwatch_file(path: Path) -> bool:
    return path.is_file() and "tfevents" in path.name and path.name.endswith(".bertwatch")


def find_runs(root: str | Path) -> list[Path]:
    """The bertwatch event files under ``root`` (a run each), sorted by folder, then by name (their start).

    Raises:
        FileNotFoundError: ``root`` does not exist (the message says what to pass).
    """
    top = Path(root)
    if not top.exists():
        raise FileNotFoundError(f"{top} does not exist; pass the log folder the sweep's runs write under")
    return sorted((p for p in top.rglob("*tfevents*") if _is_bertwatch_file(p)), key=lambda p: (p.parent, p.name))


def _trainer_files(file: Path, siblings: Sequence[Path]) -> list[Path]:
    """The Trainer's event files of the run of bertwatch ``file`` (``siblings``: the bertwatch files of its folder,
    sorted): the one of its name without ``.bertwatch``; else every Trainer file of the folder where ``file`` is
    its only run, or the one at its place where the folder holds as many Trainer files as runs; else none."""
    own = file.with_name(file.name.removesuffix(".bertwatch"))
    if own.is_file():
        return [own]
    folder = file.parent
    trainers = sorted(p for p in folder.iterdir() if p.is_file() and "tfevents" in p.name and not _is_bertwatch_file(p))
    if len(siblings) == 1:
        return trainers
    return [trainers[list(siblings).index(file)]] if len(trainers) == len(siblings) else []


def read_run_verdict(file: Path, name: str, siblings: Sequence[Path] = ()) -> SweepRun | None:
    """The :class:`SweepRun` of one bertwatch event ``file`` called ``name`` (``siblings``: the bertwatch files of
    its folder, sorted; none: it alone); None when it holds no verdict (no gradient statistics measured)."""
    training = read_series_and_texts([file])
    judged = verdict_steps(training)
    if not judged:
        return None
    series = training["series"][VERDICT_SERIES]
    values = np.asarray(series["values"], dtype=np.float64)
    column = {key: dict(zip(series["steps"], values[:, i])) for i, key in enumerate(series["names"])}
    trainer = trainer_run(_trainer_files(file, list(siblings) or [file]))
    return sweep_run(name, judged, column, trainer["args"], bool(trainer["ended"]))


def read_sweep(root: str | Path) -> list[SweepRun]:
    """Every run under ``root`` with a verdict, worst first (``Verdict.rank``, descending; then by name).

    Raises:
        FileNotFoundError: ``root`` does not exist.

    Example:
        >>> import tempfile
        >>> read_sweep(tempfile.mkdtemp())
        []
    """
    top = Path(root)
    files = find_runs(top)
    runs = []
    for folder in dict.fromkeys(file.parent for file in files):
        own = [file for file in files if file.parent == folder]
        shown = str(folder.relative_to(top)) if folder != top else folder.name
        for number, file in enumerate(own, 1):
            name = shown if len(own) == 1 else f"{shown}#{number}"
            run = read_run_verdict(file, name, own)
            runs += [run] if run is not None else []
    return ranked(runs)


def _shown(value: float | int | None) -> str:
    return "-" if value is None else f"{value:g}"


def sweep_lines(runs: Sequence[SweepRun], root: str, reason_width: int = 70) -> list[str]:
    """The terminal table: one row a run, worst first, then the runs to stop now and the steps that saves."""
    if not runs:
        return [f"no run under {root} has a verdict (train with bertwatch.watch(trainer); the verdict needs the "
                "gradient statistics, on by default)"]  # fmt: skip
    header = ("#", "run", "verdict", "step", "history", "lr", "seed", "reason")
    rows = []
    for number, run in enumerate(runs, 1):
        step = f"{run.verdict.step}/{run.max_steps}" if run.max_steps else str(run.verdict.step)
        reason = run.verdict.reasons[0] if run.verdict.reasons else ""
        reason = reason if len(reason) <= reason_width else reason[: reason_width - 3] + "..."
        label = run.verdict.label + ("" if run.ended else " *")
        rows.append((str(number), run.name, label, step, strip(run.history), _shown(run.learning_rate),
                     _shown(run.seed), reason))  # fmt: skip
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"{len(runs)} runs under {root}, worst first (*: the Trainer has not logged its end: still training, "
             "or killed; history: + healthy, ? cannot tell, ! at risk, X failing)", ""]  # fmt: skip
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.append("")
    lines += _stop_lines(stop_now(runs))
    return lines


def _stop_lines(stop: Sequence[SweepRun]) -> list[str]:
    if not stop:
        return ["stop these now: none (no failing run is still training)"]
    saved = [run.steps_left for run in stop]
    each = ", ".join(f"{run.name} ({'?' if s is None else s} steps left)" for run, s in zip(stop, saved))
    total = sum(s for s in saved if s is not None)
    unknown = sum(s is None for s in saved)
    more = f" and the unknown rest of {unknown} (no max_steps logged)" if unknown else ""
    return [f"stop these now: {each}", f"  saves {total} training steps{more}"]
