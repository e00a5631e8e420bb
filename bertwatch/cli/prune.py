"""``bertwatch prune``: remove attention heads for real and save a smaller model that loads with transformers."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from bertwatch.ablation.gain import TIMING_TEXT, GainOptions, measure_gain
from bertwatch.ablation.physical import (
    GAIN_FILE,
    PruneShare,
    heads_from_ablation,
    prune_model,
    save_pruned,
    write_gain,
)
from bertwatch.cli.argv import add_options, command_parser, given_options
from bertwatch.cli.eval_data import add_model_argument
from bertwatch.core.task_names import metric_label
from bertwatch.heads.loading import checkpoint_head, load_model
from bertwatch.heads.pruned_modeling import head_counts
from bertwatch.heads.task_heads import label_names

__all__ = ["ablation_heads", "cli_prune", "expand_heads", "parse_heads"]


def parse_heads(spec: str) -> dict[int, list[int]]:
    """``"0:1,5;3:all"`` or JSON ``{"0": [1, 5]}`` -> ``{0: [1, 5], 3: [-1]}`` (``all`` becomes ``[-1]``, expanded
    against the model by :func:`expand_heads`). Raises ValueError on anything else."""
    spec = spec.strip()
    try:
        if spec.startswith("{"):
            return {int(k): [int(h) for h in v] for k, v in json.loads(spec).items()}
        heads: dict[int, list[int]] = {}
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            layer, _, listed = part.partition(":")
            values = [-1] if listed.strip() == "all" else [int(h) for h in listed.split(",") if h.strip()]
            heads.setdefault(int(layer), []).extend(values)
        return heads
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(
            f"cannot read heads {spec!r}: write LAYER:HEAD,HEAD;LAYER:all (e.g. '0:1,5;3:all') or JSON "
            '{"0": [1, 5]}'
        ) from error


def expand_heads(heads: dict[int, list[int]], num_heads: int) -> dict[int, list[int]]:
    """``all`` (``[-1]`` from :func:`parse_heads`) as every head of a layer with ``num_heads`` heads."""
    return {layer: list(range(num_heads)) if -1 in listed else listed for layer, listed in heads.items()}


def ablation_heads(folder: str, given_as: str, share: PruneShare) -> dict[int, list[int]]:
    """The heads to remove from the ablation output ``folder`` (given on the command line as ``given_as``,
    ``--from-ablation`` or ``ship``'s ``--prune-from``): the first ``share.fraction`` of its importance order
    (``ablation.physical.heads_from_ablation``), which the command needs."""
    if share.fraction is None:
        raise ValueError(f"{given_as} needs --fraction (share of all heads to remove, e.g. 0.5)")
    return heads_from_ablation(folder, share.fraction)


def _parser() -> argparse.ArgumentParser:
    parser = command_parser(
        prog="bertwatch prune",
        description="Remove attention heads physically (Q/K/V rows, output columns; whole attention blocks when "
        "a layer loses every head) and save a folder that loads with AutoModel...from_pretrained(DIR, "
        "trust_remote_code=True). Writes OUT/pruning_gain.json: parameters, latency, throughput, metric.",
    )
    add_model_argument(parser, "checkpoint folder")
    parser.add_argument("--out", required=True, help="folder for the pruned model")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--heads", help="heads to remove: '0:1,5;3:all' or JSON '{\"0\": [1, 5]}'")
    which.add_argument("--from-ablation", metavar="DIR", help="a 'bertwatch ablate' output: its importance order")
    add_options(parser, PruneShare)
    parser.add_argument("--data", default=None, help="labelled texts (JSON lines / TSV) to measure accuracy on")
    parser.add_argument("--task", default=None, help="or a GLUE task, read from --glue-dir")
    parser.add_argument("--glue-dir", default=None, help="folder of GLUE files (offline)")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--limit", type=int, default=None, help="use the first N examples")
    parser.add_argument("--no-measure", action="store_true", help="only prune and save")
    add_options(parser.add_argument_group("measuring (in Python: measure_gain(options=GainOptions(...)))"), GainOptions)
    return parser


def cli_prune(argv: Sequence[str]) -> int:
    """``bertwatch prune --model CKPT (--heads SPEC | --from-ablation DIR --fraction F) --out DIR``."""
    args = _parser().parse_args(list(argv))
    try:
        options = GainOptions(**given_options(args, GainOptions))  # checked before the model loads
        share = PruneShare(**given_options(args, PruneShare))
        if args.from_ablation is not None:
            heads = ablation_heads(args.from_ablation, "--from-ablation", share)
        else:
            heads = parse_heads(args.heads)
        model, tokenizer = load_model(args.model, head=checkpoint_head(args.model))
        heads = expand_heads(heads, head_counts(model.config)[1])
        pruned = prune_model(model, heads)
        save_pruned(pruned, args.out, tokenizer)
        removed = sum(len(h) for h in heads.values())
        print(f"removed {removed} heads; pruned model saved to {args.out}")
        if args.no_measure:
            return 0
        examples = None
        if args.data is not None or args.task is not None:
            if not hasattr(model, "classifier") and "ForSequenceClassification" not in type(model).__name__:
                raise ValueError("the metric needs a sequence classifier; pass --no-measure or drop --data/--task")
            from bertwatch.data import files
            from bertwatch.data.glue import load_glue

            if args.data is not None:
                names = list(label_names(model.config))
                examples = files.read_labelled_texts(args.data, names, limit=args.limit)
            else:
                examples = load_glue(args.task, split=args.split, glue_dir=args.glue_dir, limit=args.limit)
        batch = options.batch_size
        texts = [e["text"] for e in examples[:batch]] if examples else [TIMING_TEXT] * batch
        gain = measure_gain(model, pruned, tokenizer, texts, examples=examples, options=options)
        gain["removed_heads"] = {str(layer): h for layer, h in sorted(heads.items())}
        write_gain(args.out, gain)
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"bertwatch prune: {error}", file=sys.stderr)
        return 2
    print(summary(gain))
    print(f"written: {args.out}/{GAIN_FILE}")
    return 0


def summary(gain: dict) -> str:
    """Three lines: parameters, latency/throughput, metric with its interval."""
    p, lat, thr = gain["parameters"], gain["latency_s"], gain["throughput"]
    lines = [
        f"parameters: {p['full']:,} -> {p['pruned']:,} ({p['ratio']:.1%})",
        f"latency ({gain['device']}, batch {gain['batch_size']} x {gain['tokens']} tokens): "
        f"{lat['full'] * 1e3:.1f} ms -> {lat['pruned'] * 1e3:.1f} ms (speed-up x{gain['speedup']:.2f}); "
        f"throughput {thr['full']:.1f} -> {thr['pruned']:.1f} examples/s",
    ]
    m = gain.get("metric")
    if m:
        lines.append(
            f"{metric_label(m['metric'])} on {m['num_examples']} examples: {m['full']:.4f} -> {m['pruned']:.4f} "
            f"(delta {m['delta']:+.4f}, 95% CI [{m['ci_low']:+.4f}, {m['ci_high']:+.4f}])"
        )
    return "\n".join(lines)
