"""``bertwatch ablate``: the sweep on a fine-tuned checkpoint and a GLUE split, a CoNLL file (token
classification) or a SQuAD file (question answering)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np
import torch

from bertwatch.ablation.configs import MODES
from bertwatch.ablation.store import Processes
from bertwatch.ablation.sweep import ablate
from bertwatch.heads.loading import load_model


def _ablate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertwatch ablate",
        description="Disable every head and every layer of a fine-tuned checkpoint (and prune it by importance); "
        "write ablation.json, ablation.csv, report.html and TensorBoard summaries with bootstrap intervals.",
    )
    parser.add_argument("--model", required=True, help="checkpoint folder of a fine-tuned task model")
    parser.add_argument(
        "--task",
        required=True,
        help="a GLUE task name (sst2, mrpc, cola, stsb, ...), token-classification (alias ner: --data is a CoNLL "
        "file) or question-answering (alias qa: --data is a SQuAD JSON file)",
    )
    parser.add_argument("--data", default=None, help="the evaluation file of a token-classification or QA task")
    parser.add_argument(
        "--max-answer-length", type=int, default=30, help="QA: longest answer span in tokens (default 30)"
    )
    parser.add_argument(
        "--glue-dir", default=None, help="local GLUE folder (default: $GLUE_DIR or $BERTWATCH_DATA/glue)"
    )
    parser.add_argument("--split", default="dev", help="split to evaluate on (default: dev)")
    parser.add_argument("--limit", type=int, default=None, help="use the first N examples (file order)")
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
    parser.add_argument("--no-keep-only", action="store_true", help="skip the keep-one-head-per-layer configurations")
    parser.add_argument("--no-prune", action="store_true", help="skip the iterative pruning curve")
    parser.add_argument("--no-resume", action="store_true", help="start over even if OUT/partial.jsonl exists")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _task_type(args: argparse.Namespace) -> str:
    """The head ``--task`` needs (its file is checked here, before the model loads)."""
    from bertwatch.ablation.tasks import ALIASES, TASK_TYPES

    wanted = ALIASES.get(args.task.lower(), args.task.lower())
    if wanted in ("token-classification", "question-answering"):
        if args.data is None:
            kind = "a CoNLL file (token and tag per line)" if wanted == "token-classification" else "a SQuAD JSON file"
            raise ValueError(f"--task {args.task} reads its examples from --data: pass {kind}")
        return wanted
    if wanted in TASK_TYPES:
        raise ValueError(
            f"--task {args.task} has no file reader on the command line; use bertwatch.ablate() from Python, or a "
            "GLUE task, token-classification or question-answering"
        )
    from bertwatch.data.glue import glue_task

    glue_task(args.task)
    return "sequence-classification"


def _examples(args: argparse.Namespace, task_type: str) -> list:
    from bertwatch.data.files import read_conll, read_squad
    from bertwatch.data.glue import load_glue

    if task_type == "token-classification":
        return read_conll(args.data, limit=args.limit)
    if task_type == "question-answering":
        return read_squad(args.data, limit=args.limit)
    return load_glue(args.task, split=args.split, glue_dir=args.glue_dir, limit=args.limit)


def cli_ablate(argv: Sequence[str]) -> int:
    """``bertwatch ablate --model CKPT --task NAME [--glue-dir DIR] [--split dev] [--limit N] [--mode M] --out DIR``."""
    args = _ablate_parser().parse_args(list(argv))

    wanted = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    processes = Processes(None, cpu=wanted.startswith("cpu"))
    device = args.device
    if device is None and processes.state is not None:
        device = str(processes.state.device)
    try:
        task_type = _task_type(args)
        model, tokenizer = load_model(args.model, device, head=task_type)
        examples = _examples(args, task_type)
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
            max_answer_length=args.max_answer_length,
            keep_only=not args.no_keep_only,
            prune=not args.no_prune,
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
    """What ``bertwatch ablate`` prints: the task type and metrics by name, the baseline, the best single head."""
    best = np.nanargmax(result.heads[..., 1])
    l, h = divmod(int(best), result.shape[1])
    label = result.metrics[0]["label"] if result.metrics else result.metric
    return (
        f"bertwatch ablate: {result.task} [{result.task_type}]: {result.description}\n"
        f"  mode {result.mode}, {result.num_examples} examples, baseline {label} ({result.metric}) "
        f"{result.baseline:.4f}; best single-head change {result.heads[l, h, 1]:+.4f} (layer {l}, head {h}, "
        f"p={result.heads[l, h, 4]:.3f})\n"
        f"  -> {out}/ablation.json, ablation.csv, report.html"
    )
