"""One run's report in one place: ``PATH/report.html``, built from everything found under ``PATH`` (ablation.json
files, the TensorBoard summaries, ship.json, gain and linguistics folders). ``bertwatch report PATH`` writes it,
and so does ``ablate_on_end=True`` when its sweep ends: the same page in the same place. The ablation folder's own
``report.html`` then points to it (:func:`pointer_page`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bertwatch.report.events import read_run
from bertwatch.report.gain_section import gain_files, gain_section
from bertwatch.report.html import build_html
from bertwatch.report.markup import escape
from bertwatch.report.result import AblationResult, atomic_write
from bertwatch.report.ship_section import ship_files, ship_glance, ship_section
from bertwatch.report.syntax_section import html_section

__all__ = ["RunReport", "pointer_page", "report_path", "write_run_report"]

#: The report's file name, in the run's folder.
REPORT_FILE = "report.html"


@dataclass(frozen=True)
class RunReport:
    """Where the report was written and what it holds, in the line ``bertwatch report`` prints."""

    path: Path
    line: str


def report_path(root: str | os.PathLike) -> Path:
    """Where a run's report goes: ``root/report.html`` (beside a file when ``root`` is one)."""
    root = Path(root)
    return (root if root.is_dir() or not root.suffix else root.parent) / REPORT_FILE


def _linguistics_folder(root: Path, given: str | None) -> Path | None:
    if given:
        if not (Path(given) / "syntax.json").is_file():
            raise FileNotFoundError(f"no syntax.json in {given}; pass the --out folder of `bertwatch probe-syntax`")
        return Path(given)
    return next((d for d in (root, root / "linguistics") if (d / "syntax.json").is_file()), None)


def write_run_report(
    root: str | os.PathLike,
    out: str | os.PathLike | None = None,
    alpha: float = 0.05,
    linguistics: str | None = None,
    results: Sequence[AblationResult] = (),
) -> RunReport | None:
    """Build the report of everything under ``root`` and write it to ``out`` (default :func:`report_path`).

    Args:
        root: a training output folder, a TensorBoard run folder or an ablation folder.
        out: the HTML file to write.
        alpha: significance level of the ablation's marks.
        linguistics: a ``bertwatch probe-syntax`` folder (default: ``root`` or ``root/linguistics`` with a
            syntax.json).
        results: ablation results to show beside those found under ``root`` (a mode found there wins).

    Returns:
        The :class:`RunReport`, or None when ``root`` holds nothing to report.

    Raises:
        FileNotFoundError: ``root`` does not exist, or ``linguistics`` has no syntax.json.
    """
    root = Path(root)
    found, training = read_run(root)
    modes = {r.mode for r in found}
    found = sorted([*found, *(r for r in results if r.mode not in modes)], key=lambda r: r.mode)
    folder = _linguistics_folder(root, linguistics)
    extra = [html_section(folder)] if folder is not None else []
    extra.extend(gain_section(path) for path in gain_files(root))
    ships = ship_files(root)
    extra.extend(ship_section(path) for path in ships)
    if not found and not training["grids"] and not training["series"] and not extra:
        return None
    path = Path(out) if out else report_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    glance = [ship_glance(p) for p in ships]
    atomic_write(path, build_html(found, training, alpha=alpha, extra_sections=extra, glance=glance))
    parts = [f"the ablation ({', '.join(r.mode for r in found)})"] if found else ["no ablation"]
    parts.append(f"{len(training['grids'])} head statistics and {len(training['series'])} run charts over training")
    parts += [f"the ship table{'s' if len(ships) > 1 else ''}"] if ships else []
    line = ", ".join(parts) + f" -> {path}"
    return RunReport(path, line)


def pointer_page(at: str | os.PathLike, report: str | os.PathLike) -> None:
    """Write at ``at`` a page that sends the reader to ``report`` (the run's one report), so an old link to the
    ablation folder's report.html still lands on it."""
    target = os.path.relpath(report, Path(at).parent)
    atomic_write(
        Path(at),
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0; url={escape(target)}"><title>bertwatch report</title></head>'
        f'<body><p>This run\'s report, with this ablation, is <a href="{escape(target)}">{escape(target)}</a> '
        "(<code>bertwatch report</code> on the run's folder writes the same page there).</p></body></html>\n",
    )
