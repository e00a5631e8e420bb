"""``bertwatch ablate``: the sweep on a fine-tuned checkpoint and a GLUE split, or a local file of any task type
(CoNLL tokens, SQuAD questions, multiple choice, texts with labels or label lists, plain text for masked LM)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
import torch

from bertwatch.ablation.settings import AblationSettings
from bertwatch.ablation.store import Processes
from bertwatch.ablation.sweep import ablate
from bertwatch.cli import eval_data
from bertwatch.cli.argv import add_options, command_parser, given_options
from bertwatch.cli.eval_data import DATA_FILES, add_eval_arguments
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
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--device", default=None, help="torch device (default: cpu, or the process's device under accelerate)"
    )
    add_options(
        parser.add_argument_group("sweep options (in Python: the keywords of bertwatch.ablate)"), AblationSettings
    )
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
        given = given_options(args, AblationSettings)  # checked before the model loads
        given["logdir"] = given.get("logdir") or args.out
        settings = AblationSettings(task=args.task, out_dir=args.out, max_examples=args.limit, **given)
        task_type = eval_data.task_type(args)
        head = "sequence-classification" if task_type in ("regression", "multi-label") else task_type
        model, tokenizer = load_model(args.model, device, head=head)
        examples = eval_data.read_examples(args, task_type, model)
        result = ablate(model, examples, tokenizer, settings=settings)
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
