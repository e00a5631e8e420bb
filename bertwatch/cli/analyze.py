"""``bertwatch analyze``: every per-head statistic of a model on a file of texts, as ``stats.json`` and figures."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bertwatch.cli.argv import command_parser
from bertwatch.cli.eval_data import add_model_argument

__all__ = ["cli_analyze"]


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch analyze",
        description="Compute every per-head attention statistic of a model on a file of texts.",
    )
    add_model_argument(parser, "model folder or Hub name")
    parser.add_argument("--texts", required=True, help="one example per line; a tab separates a sentence pair")
    parser.add_argument("--out", required=True, help="output folder for stats.json and the figures")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per example (default 128)")
    parser.add_argument("--batch-size", type=int, default=16)
    add_model_argument(
        parser, "a second model (e.g. the pretrained one): adds drift", required=False, flag="--reference"
    )
    parser.add_argument("--device", default=None, help="torch device, e.g. cuda:0 (default: cpu)")
    parser.add_argument("--no-figures", action="store_true", help="write stats.json only")
    parser.add_argument(
        "--mixing",
        action="store_true",
        help="add every context-mixing measure (norms, ALTI, rollout): mixing.json, mixing.npz, their grids",
    )
    parser.add_argument(
        "--value-zeroing",
        type=int,
        default=0,
        metavar="N",
        help="value zeroing on the first N examples (costs layers x tokens forward passes per example)",
    )
    return parser


def cli_analyze(argv: Sequence[str]) -> int:
    """Run ``bertwatch analyze``; returns the process exit code."""
    args = _parser().parse_args(list(argv))
    from bertwatch.analysis.text_stats import analyze

    result = analyze(
        args.model,
        args.texts,
        out=args.out,
        max_length=args.max_length,
        batch_size=args.batch_size,
        reference=args.reference,
        device=args.device,
        figures=not args.no_figures,
        mixing=args.mixing,
        value_zeroing=args.value_zeroing,
    )
    print(
        f"bertwatch: {result['num_examples']} examples, {result['num_layers']} layers x {result['num_heads']} "
        f"heads -> {args.out}/stats.json"
    )
    return 0
