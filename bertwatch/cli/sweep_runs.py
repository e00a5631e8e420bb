"""``bertwatch sweep LOGDIR``: every run under a log folder in one table, worst first, and the runs to stop now."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from bertwatch.cli.argv import command_parser
from bertwatch.core.sweep_verdicts import sweep_json
from bertwatch.report.sweep_table import read_sweep, sweep_lines


def _sweep_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch sweep",
        description="Every run under a log folder in one table: each run's verdict now (healthy, cannot tell, at "
        "risk, failing), the step, why, its verdict over the judged steps as a strip, its learning rate and seed "
        "where the Trainer logged them (report_to='tensorboard'), ranked worst first; then the failing runs still "
        "training, which to stop now, and the training steps that saves.",
    )
    parser.add_argument("logdir", help="the folder the sweep's runs write their logs under (searched recursively)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead")
    return parser


def cli_sweep(argv: Sequence[str]) -> int:
    """``bertwatch sweep LOGDIR [--json]``: print the sweep's table; returns the exit status (2: no run found)."""
    args = _sweep_parser().parse_args(list(argv))
    runs = read_sweep(args.logdir)
    if args.json:
        print(json.dumps(sweep_json(runs, args.logdir), indent=2))
    else:
        print(
            "\n".join(
                f"bertwatch sweep: {line}" if i == 0 else line for i, line in enumerate(sweep_lines(runs, args.logdir))
            )
        )
    return 0 if runs else 2
