"""``bertwatch ablate``: the sweep on a fine-tuned checkpoint and a GLUE split, or a local file of any task type
(CoNLL tokens, SQuAD questions, multiple choice, texts with labels or label lists, plain text for masked LM)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
import torch

from bertwatch.ablation.settings import DEFAULT_BUDGET_MINUTES, DEFAULT_RANDOM_ORDERS
from bertwatch.ablation.store import Processes
from bertwatch.ablation.sweep import ablate
from bertwatch.cli import eval_data
from bertwatch.cli.argv import command_parser
from bertwatch.cli.eval_data import DATA_FILES, add_eval_arguments
from bertwatch.core.modes import MODES
from bertwatch.core.removable import DEFAULT_DELTA
from bertwatch.heads.loading import load_model


def _ablate_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch ablate",
        description="Disable every head and every layer of a fine-tuned checkpoint (and prune it by importance); "
        "write ablation.json, ablation.csv, report.html and TensorBoard summaries with bootstrap intervals. On a CPU it "
        "reads the first 128 examples unless --limit says otherwise; the plan line it prints first says what the "
        "budget left out, what the fuller sweep would take and the flags that ask for it.",
    )
    eval_data.add_model_argument(parser, "checkpoint folder of a fine-tuned task model", packaged=False)
    add_eval_arguments(
        parser,
        "a GLUE task name (sst2, mrpc, cola, stsb, ...; read from --glue-dir), or a task type read from --data: "
        + "; ".join(f"{t}: {what}" for t, what in DATA_FILES.items()),
    )
    parser.add_argument(
        "--max-answer-length", type=int, default=30, help="QA: longest answer span in tokens (default 30)"
    )
    parser.add_argument("--mode", choices=MODES, default="uniform", help="uniform (Kovaleva) or zero (Michel)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--logdir", default=None, help="TensorBoard run folder for the summaries (default: OUT)")
    parser.add_argument("--metric", default=None, help="metric to compare (default: the task's primary metric)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--configs-per-batch", type=int, default=None, help="configurations stacked in one batch")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument(
        "--device", default=None, help="torch device (default: cpu, or the process's device under accelerate)"
    )
    parser.add_argument(
        "--keep-only",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="score the keep-one-head-per-layer configurations (default: when the sweep with them fits the budget)",
    )
    parser.add_argument("--no-prune", action="store_true", help="skip the pruning curves")
    parser.add_argument(
        "--delta",
        type=float,
        default=DEFAULT_DELTA,
        help="δ of the answer 'up to N%% of heads removed with the metric within δ of the baseline', in the "
        f"metric's units (default {DEFAULT_DELTA}: one point of accuracy)",
    )
    parser.add_argument(
        "--random-orders",
        type=int,
        default=None,
        help=f"random pruning orders beside the importance order (default: {DEFAULT_RANDOM_ORDERS} when the sweep "
        "with them fits the budget, else none)",
    )
    parser.add_argument(
        "--iterative",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the iterative-importance order, one gradient pass a step (default: when the sweep with it fits the "
        "budget)",
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=DEFAULT_BUDGET_MINUTES,
        help="what the sweep may take by its estimate: keep-one-head and the iterative and random orders, unless "
        f"asked for, run only when it still fits (default {DEFAULT_BUDGET_MINUTES:g}; 0: no budget, they all run)",
    )
    parser.add_argument("--no-resume", action="store_true", help="start over even if OUT/partial.jsonl exists")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def cli_ablate(argv: Sequence[str]) -> int:
    """``bertwatch ablate --model CKPT --task NAME [--glue-dir DIR] [--split dev] [--limit N] [--mode M] --out DIR``."""
    args = _ablate_parser().parse_args(list(argv))

    wanted = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    processes = Processes(None, cpu=wanted.startswith("cpu"))
    device = args.device
    if device is None and processes.state is not None:
        device = str(processes.state.device)
    try:
        task_type = eval_data.task_type(args)
        head = "sequence-classification" if task_type in ("regression", "multi-label") else task_type
        model, tokenizer = load_model(args.model, device, head=head)
        examples = eval_data.read_examples(args, task_type, model)
        result = ablate(
            model,
            examples,
            tokenizer,
            task=args.task,
            mode=args.mode,
            out_dir=args.out,
            logdir=args.logdir or args.out,
            metric=args.metric,
            n_resamples=args.resamples,
            seed=args.seed,
            batch_size=args.batch_size,
            configs_per_batch=args.configs_per_batch,
            max_length=args.max_length,
            max_examples=args.limit,
            max_answer_length=args.max_answer_length,
            keep_only=args.keep_only,
            prune=not args.no_prune,
            delta=args.delta,
            prune_random=args.random_orders,
            prune_iterative=args.iterative,
            budget_minutes=args.budget_minutes or None,
            resume=not args.no_resume,
            progress=not args.quiet,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"bertwatch ablate: {error}", file=sys.stderr)
        return 2
    if processes.is_main:
        print(summary_lines(result, args.out))
    return 0


def summary_lines(result, out: str) -> str:
    """What ``bertwatch ablate`` prints: first, when the model is no better than always giving one answer, that
    verdict (:mod:`bertwatch.core.baseline`); the task type and metrics by name, the full model's metric, the
    trivial baseline beside it, the best single head, and how many heads the pruning orders can remove with the
    metric within δ, with what the examples resolve. An improvement from disabling heads is said to be one."""
    from bertwatch.core.baseline import improvement_note
    from bertwatch.report.pruning_section import answer_lines

    best = np.nanargmax(result.heads[..., 1])
    l, h = divmod(int(best), result.shape[1])
    label = result.metric_label
    greater = bool(result.config.get("greater_is_better", True))
    lines = answer_lines(result) or [result.resolution().clause()]
    trivial = result.trivial
    first = trivial.lines() if trivial is not None and trivial.no_better() else []
    beside = trivial.lines() if trivial is not None and not first else []
    if trivial is None:
        beside = ["none measured: a constant answer is compared on accuracy, F1, Matthews and correlations only"]
    cell = result.heads[l, h]
    text = "".join(f"bertwatch ablate: {line}\n" for line in first)
    text += (
        f"bertwatch ablate: {result.task} [{result.task_type}]: {result.description}\n"
        + "".join(f"  trivial baseline: {line}\n" for line in beside)
        + f"  mode {result.mode}, {result.num_examples} examples, full model {label} ({result.metric}) "
        f"{result.baseline:.4f}; best single-head change {cell[1]:+.4f} [{cell[2]:+.4f}, {cell[3]:+.4f}] "
        f"(L{l} H{h}, p={cell[4]:.3f}){improvement_note(cell[1], cell[2], cell[3], greater)}\n"
        + f"  {'pruning' if result.pruning else 'resolution'}: {lines[0]}\n"
        + "".join(f"  pruning, {line}\n" for line in lines[1:])
        + _pruning_gain(result, label, greater)
        + f"  -> {out}/ablation.json, ablation.csv, report.html"
    )
    return text


def _pruning_gain(result, label: str, greater: bool) -> str:
    """A line when a step of the importance order improves the metric beyond resampling noise ('' otherwise)."""
    from bertwatch.core.baseline import improvement_note

    gains = [e for e in result.pruning if improvement_note(e.get("delta"), e.get("ci_low"), e.get("ci_high"), greater)]
    if not gains:
        return ""
    top = max(gains, key=lambda e: e["delta"] if greater else -e["delta"])
    note = improvement_note(top["delta"], top["ci_low"], top["ci_high"], greater)
    return (
        f"  pruning, {top['pruned']} heads removed changes {label} by {top['delta']:+.4f} "
        f"[{top['ci_low']:+.4f}, {top['ci_high']:+.4f}]{note}\n"
    )
