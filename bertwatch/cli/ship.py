"""``bertwatch ship``: will this model ship? A fine-tuned classifier exported to ONNX, quantized to INT8 (and
optionally pruned), each variant measured in ONNX Runtime on the CPU against the float32 export."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from bertwatch.ablation.physical import PruneShare
from bertwatch.cli import eval_data
from bertwatch.cli.argv import add_options, command_parser, given_options
from bertwatch.cli.prune import ablation_heads, expand_heads, parse_heads

__all__ = ["cli_ship"]


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch ship",
        usage="bertwatch ship --model MODEL (--task TASK | --data FILE) [OPTIONS]",
        description="Export a fine-tuned sequence classifier to ONNX, quantize it to INT8 (and prune heads with "
        "--heads or --prune-from), and measure every variant in ONNX Runtime on the CPU against the float32 export: "
        "the task metric at the serving batch (one request at a time by default) with its paired-bootstrap interval, "
        "predictions unchanged, predictions that change in length-sorted batches of 32, latency at batch 1, "
        "throughput at batch 32, file size. Writes OUT/model.onnx, OUT/model.int8.onnx, ..., the tokenizer, "
        "OUT/examples.jsonl and OUT/ship.json.",
    )
    eval_data.add_model_argument(
        parser, "folder of a fine-tuned ...ForSequenceClassification checkpoint", required=False, packaged=False
    )
    eval_data.add_eval_arguments(
        parser,
        "a GLUE classification task (sst2, mrpc, cola, ...; read from --glue-dir), or sequence-classification "
        f"read from --data ({eval_data.DATA_FILES['sequence-classification']}); default with --data: "
        "sequence-classification",
        task_required=False,
    )
    parser.add_argument("--out", default="ship_out", help="output folder (default ship_out)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--heads", help="also a pruned model without these heads: '0:1,5;3:all' or JSON")
    which.add_argument("--prune-from", metavar="DIR", help="also a pruned model: a 'bertwatch ablate' output's order")
    add_options(parser, PruneShare)
    from bertwatch.ship.shipping import ShipOptions  # only here: `bertwatch ship --help` imports no torch

    add_options(parser.add_argument_group("measuring (in Python: ship_model(options=ShipOptions(...)))"), ShipOptions)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _heads(args: argparse.Namespace, share: PruneShare, num_heads: int) -> dict[int, list[int]] | None:
    if args.prune_from is not None:
        return ablation_heads(args.prune_from, "--prune-from", share)
    if share.fraction is not None:
        raise ValueError("--fraction goes with --prune-from DIR (a 'bertwatch ablate' output)")
    return None if args.heads is None else expand_heads(parse_heads(args.heads), num_heads)


def _metric(task: str) -> str:
    from bertwatch.data.glue import glue_task
    from bertwatch.data.metrics import primary_metric

    if task == "sequence-classification":
        return "accuracy"
    if glue_task(task).is_regression:
        raise ValueError(f"{task} is a regression task; bertwatch ship compares class predictions")
    return primary_metric(task)


def _constant_words(model, examples, metric: str, task: str) -> str:
    """What always giving the one best answer scores on ``examples`` (``core.baseline``), for the first line, so
    the comparison a practitioner makes first comes before any figure; empty where the labels are not class ids
    (ship then says what is wrong)."""
    import numpy as np

    from bertwatch.core.baseline import class_names
    from bertwatch.core.task_names import metric_label
    from bertwatch.heads.task_heads import label_names
    from bertwatch.ship.measure import against_constant

    try:
        labels = np.array([int(row["label"]) for row in examples])
        classes = class_names(label_names(model.config), task)
        found = against_constant({"labels": labels}, labels, int(model.config.num_labels), metric, 1, 0, 0.95, classes)
    except (KeyError, TypeError, ValueError, IndexError):
        return ""
    if found.value != found.value:  # NaN: undefined for a constant
        return ""
    return f"; always answering '{found.constant_name}' scores {metric_label(metric)} {found.value:.3f} on them"


def _load(args: argparse.Namespace):
    """The checkpoint, its tokenizer, the examples and the metric; errors say what to pass."""
    from bertwatch.heads.loading import load_model, local_folder
    from bertwatch.ship.export import check_classifier, require_onnx

    require_onnx()  # before the model loads: the one missing piece a user installs
    if args.task is None:
        if args.data is None:
            raise ValueError("pass --task GLUE_NAME (read from --glue-dir) or --data FILE (labelled texts)")
        args.task = "sequence-classification"
    if eval_data.task_type(args) != "sequence-classification":
        raise ValueError(f"bertwatch ship measures sequence classifiers; --task {args.task} is not one")
    local_folder(args.model)  # ship exports a folder: a Hub name is not enough
    model, tokenizer = load_model(args.model, head="sequence-classification")
    check_classifier(model)
    return model, tokenizer, eval_data.read_examples(args, "sequence-classification", model), _metric(args.task)


def cli_ship(argv: Sequence[str]) -> int:
    """``bertwatch ship --model CHECKPOINT (--task GLUE | --data FILE) [--heads SPEC | --prune-from DIR --fraction F]``."""
    from bertwatch.core.task_names import metric_label
    from bertwatch.heads.loading import max_input_length
    from bertwatch.heads.pruned_modeling import head_counts
    from bertwatch.report.ship_section import batch_phrase
    from bertwatch.ship.shipping import FILES, ShipOptions, ship_model
    from bertwatch.ship.table import SHIP_FILE, format_table

    parser = _parser()
    args = parser.parse_args(list(argv))
    if args.model is None:  # checked after the flags, so that a misspelt one is named first
        parser.error("the following arguments are required: --model")
    try:
        given = given_options(args, ShipOptions)
        options = ShipOptions(**given)  # checked before the model loads
        share = PruneShare(**given_options(args, PruneShare))
        model, tokenizer, examples, metric = _load(args)
        heads = _heads(args, share, head_counts(model.config)[1])
        length = max_input_length(model, tokenizer, given.get("max_length"))
        options = dataclasses.replace(options, max_length=length)
        names = list(FILES)[: 4 if heads else 2]
        removed = f" ({sum(map(len, heads.values()))} heads removed)" if heads else ""
        mixed = (
            f", int8 with the layer its error comes from most (on {min(len(examples), options.attribution_examples)} "
            "examples) kept in fp32,"
            if options.attribution_examples
            else ""
        )
        served = batch_phrase({"batch_size": options.serve_batch, "sorted": False})
        print(
            f"bertwatch ship: exporting {args.model} to ONNX as {', '.join(names)}{removed}{mixed} and measuring "
            f"each in ONNX Runtime on {len(examples)} examples of {args.task} ({metric_label(metric)}, {served})"
            f"{_constant_words(model, examples, metric, args.task)} -> {args.out}",
            flush=True,
        )
        source = {"checkpoint": str(args.model), "task": args.task, "split": args.split, "data": args.data}
        result = ship_model(
            model,
            tokenizer,
            examples,
            args.out,
            metric=metric,
            heads=heads,
            options=options,
            source=source,
            progress=not args.quiet,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"bertwatch ship: {error}", file=sys.stderr)
        return 2
    print(format_table(result))
    inputs = [*result["files"]["tokenizer"], result["files"]["examples"]]
    files = ", ".join([*(row["file"] for row in result["variants"]), *inputs, SHIP_FILE])
    print(f"-> {Path(args.out)}/ ({files})")
    return 0
