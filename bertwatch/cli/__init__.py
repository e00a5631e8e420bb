"""The ``bertwatch`` command: analyze, ablate, prune, ship, report, probe-syntax, demo, run, sweep, stats.

Each subcommand's module is imported only when it runs, so ``bertwatch --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence

from bertwatch.cli.argv import command_parser, unknown_command

__all__ = ["main"]

_DELEGATED = {
    "analyze": ("bertwatch.cli.analyze", "cli_analyze", "per-head statistics of a model on a file of texts"),
    "ablate": ("bertwatch.cli.ablate", "cli_ablate", "disable heads and layers of a checkpoint and measure each"),
    "report": ("bertwatch.cli.report", "cli_report", "build the HTML report from a run's logs or an ablation folder"),
    "probe-syntax": (
        "bertwatch.cli.probe_syntax",
        "cli_probe_syntax",
        "find the heads that track dependency relations (UD)",
    ),
    "demo": ("bertwatch.cli.demo", "cli_demo", "fine-tune MiniLM on SST-2 with bertwatch, ablate, report, TensorBoard"),
    "prune": ("bertwatch.cli.prune", "cli_prune", "remove heads for real: a smaller, faster model folder"),
    "ship": (
        "bertwatch.cli.ship",
        "cli_ship",
        "export to ONNX, quantize to INT8, measure each variant in ONNX Runtime",
    ),
    "run": ("bertwatch.cli.run", "cli_run", "run an unchanged training script with bertwatch on every Trainer"),
    "sweep": ("bertwatch.cli.sweep_runs", "cli_sweep", "every run under a log folder by its verdict, worst first"),
    "stats": ("bertwatch.cli.list_stats", "cli_stats", "list every statistic with its family and what it measures"),
}


def _command(name: str) -> Callable[[Sequence[str]], int]:
    module, function, _ = _DELEGATED[name]
    return getattr(importlib.import_module(module), function)


def _top_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch",
        description="Watch the attention heads of a BERT-family encoder: statistics, ablation, TensorBoard.",
        epilog="Run 'bertwatch COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"bertwatch {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, _, help_text) in _DELEGATED.items():
        commands.add_parser(name, help=help_text, add_help=False)
    return parser


def _version() -> str:
    from bertwatch import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bertwatch`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _top_parser()
    if not argv or argv[0].startswith("-"):
        parser.parse_args(argv or ["--help"])
        return 0
    name, rest = argv[0], argv[1:]
    if name not in _DELEGATED:
        parser.error(unknown_command(name, list(_DELEGATED)))
    if name == "run":  # a script run by `bertwatch run` keeps Python's own warning filters and format
        return _run_command(name, rest)
    previous_format = warnings.formatwarning
    with warnings.catch_warnings():  # the caller's filters and format come back afterwards (main() in-process)
        warnings.simplefilter("default", UserWarning)
        warnings.formatwarning = lambda message, *_, **__: f"bertwatch {name}: warning: {message}\n"
        try:
            return _run_command(name, rest)
        finally:
            warnings.formatwarning = previous_format


def _run_command(name: str, rest: list[str]) -> int:
    """Run one command, turning the errors a user can fix into a one-line message and exit status 2."""
    try:
        return int(_command(name)(rest) or 0)
    except (FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"bertwatch {name}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bertwatch {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertwatch stats | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
