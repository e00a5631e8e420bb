"""``bertwatch report PATH``: one HTML report from a run's logs or an ablation folder."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from bertwatch.report.events import read_run
from bertwatch.report.gain_section import gain_files, gain_section
from bertwatch.report.html import build_html
from bertwatch.report.result import atomic_write
from bertwatch.report.ship_section import ship_files, ship_glance, ship_section
from bertwatch.report.syntax_section import html_section


def _report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertwatch report",
        description="Build one self-contained HTML report from a run: first what happened to the heads (drift, the "
        "largest change of each family of statistics, the heads the loss depends on, the ablation's verdict), then "
        "the ablation results (ablation.json or the TensorBoard ablation summaries) and every head statistic logged "
        "in training, by family.",
    )
    parser.add_argument("path", help="a training output folder, a TensorBoard run folder or an ablation folder")
    parser.add_argument("--out", default=None, help="HTML file to write (default: PATH/report.html)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the marks (default 0.05)")
    parser.add_argument(
        "--linguistics",
        default=None,
        help="a `bertwatch probe-syntax` output folder to add (default: PATH or PATH/linguistics "
        "when it holds syntax.json)",
    )
    return parser


def _linguistics_folder(root: Path, given: str | None) -> Path | None:
    if given:
        if not (Path(given) / "syntax.json").is_file():
            raise FileNotFoundError(f"no syntax.json in {given}; pass the --out folder of `bertwatch probe-syntax`")
        return Path(given)
    return next((d for d in (root, root / "linguistics") if (d / "syntax.json").is_file()), None)


def cli_report(argv: Sequence[str]) -> int:
    """``bertwatch report PATH [--out FILE]``: the HTML report of a run's logs; returns the exit status."""
    args = _report_parser().parse_args(list(argv))
    root = Path(args.path)
    try:
        results, training = read_run(root)
        linguistics = _linguistics_folder(root, args.linguistics)
    except FileNotFoundError as error:
        print(f"bertwatch report: {error}")
        return 2
    extra = []
    if linguistics is not None:
        extra.append(html_section(linguistics))
    extra.extend(gain_section(path) for path in gain_files(root))
    ships = ship_files(root)
    extra.extend(ship_section(path) for path in ships)
    if not results and not training["grids"] and not training["series"] and not extra:
        print(
            f"bertwatch report: found no ablation.json, no ship.json and no bertwatch summaries under {root}; run "
            "`bertwatch ablate` or `bertwatch ship`, or train with BertWatchCallback first"
        )
        return 2
    out = Path(args.out) if args.out else (root if root.is_dir() else root.parent) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    glance = [ship_glance(path) for path in ships]
    atomic_write(out, build_html(results, training, alpha=args.alpha, extra_sections=extra, glance=glance))
    modes = ", ".join(r.mode for r in results) or "none"
    print(
        f"bertwatch report: ablation modes: {modes}; {len(training['grids'])} training grids, "
        f"{len(training['series'])} series" + (f"; {len(ships)} ship table(s)" if ships else "") + f" -> {out}"
    )
    return 0
