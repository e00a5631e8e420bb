"""``bertwatch report PATH``: one HTML report from a run's logs or an ablation folder."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bertwatch.cli.argv import command_parser
from bertwatch.report.run_report import write_run_report


def _report_parser() -> argparse.ArgumentParser:
    parser = command_parser(
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


def cli_report(argv: Sequence[str]) -> int:
    """``bertwatch report PATH [--out FILE]``: the HTML report of a run's logs; returns the exit status."""
    args = _report_parser().parse_args(list(argv))
    try:
        written = write_run_report(args.path, args.out, alpha=args.alpha, linguistics=args.linguistics)
    except FileNotFoundError as error:
        print(f"bertwatch report: {error}")
        return 2
    if written is None:
        print(
            f"bertwatch report: found no ablation.json, no ship.json and no bertwatch summaries under {args.path}; "
            "run `bertwatch ablate` or `bertwatch ship`, or train with BertWatchCallback first"
        )
        return 2
    print(f"bertwatch report: {written.line}")
    return 0
