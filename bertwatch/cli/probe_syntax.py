"""``bertwatch probe-syntax``: the papers' linguistic analyses of one model on a CoNLL-U treebank.

One pass over the evaluation sentences gives Clark's syntactic heads, Kovaleva's attention to word classes and
[CLS] targets, Clark's head clustering and the dev side of the probes; a pass over training sentences trains the
probes. Results go to ``DIR/*.json``, PNG figures, TensorBoard summaries in ``--logdir`` (default DIR) and
``DIR/linguistics.html``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertwatch.cli.argv import command_parser
from bertwatch.cli.eval_data import add_model_argument
from bertwatch.heads.loading import load_model, max_input_length
from bertwatch.linguistics.outputs import best_grid, relation_marks, safe_tag, wordclass_json, write_json
from bertwatch.linguistics.scan import DEFAULT_CLUSTER_LIMIT, DEFAULT_PROBE_TRAIN_LIMIT, Scan, scan
from bertwatch.linguistics.syntax import DIRECTIONS, encode, read_conllu, skip_message, training_treebank
from bertwatch.report.syntax_section import write_linguistics_report

_MAIN_RELATIONS = (
    "all",
    "nsubj",
    "obj",
    "det",
    "amod",
    "case",
    "nmod",
    "obl",
    "advmod",
    "aux",
    "mark",
    "compound",
    "conj",
    "cc",
    "cop",
    "punct",
)


def _parser() -> argparse.ArgumentParser:
    p = command_parser(
        prog="bertwatch probe-syntax",
        description="Clark's syntactic heads and probes, Kovaleva's word-class and [CLS] analyses, and head "
        "clustering of one encoder on a CoNLL-U treebank.",
    )
    add_model_argument(p, "model folder or Hub name")
    p.add_argument("--conllu", required=True, type=Path, help="evaluation treebank, e.g. UD English-EWT dev")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--limit", type=int, default=None, help="use the first N sentences of --conllu")
    p.add_argument(
        "--train-conllu",
        type=Path,
        default=None,
        help="treebank to train the probes on (default: the -train file next to --conllu, if any)",
    )
    p.add_argument(
        "--probe-train-limit",
        type=int,
        default=DEFAULT_PROBE_TRAIN_LIMIT,
        help=f"train the probes on the first N training sentences (default {DEFAULT_PROBE_TRAIN_LIMIT}; 0 = all)",
    )
    p.add_argument("--probe-epochs", type=int, default=1, help="epochs over the probe's training sentences (Clark: 1)")
    p.add_argument("--no-probes", action="store_true", help="skip the probes")
    p.add_argument("--no-wordclass", action="store_true", help="skip word classes and [CLS] targets")
    p.add_argument(
        "--cluster-limit",
        type=int,
        default=DEFAULT_CLUSTER_LIMIT,
        help=f"sentences for the JS head distances (default {DEFAULT_CLUSTER_LIMIT}; 0 = skip clustering)",
    )
    add_model_argument(
        p, "a second model (e.g. the pretrained one) whose word-class analyses go side by side", required=False,
        flag="--reference",
    )  # fmt: skip
    p.add_argument(
        "--word-mode",
        choices=("mean", "first"),
        default="mean",
        help="attention FROM a split word: mean of its pieces (paper) or its first piece (Clark's code)",
    )
    p.add_argument("--subtypes", action="store_true", help="score UD relations with subtypes (nmod:poss)")
    p.add_argument("--max-length", type=int, default=None, help="skip longer sentences (default: the model's maximum)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--min-count",
        type=int,
        default=100,
        help="relations with fewer words stay out of the figure and TensorBoard (all are in the JSON)",
    )
    p.add_argument("--logdir", type=Path, default=None, help="TensorBoard run directory (default: --out)")
    p.add_argument("--step", type=int, default=0, help="global step of the TensorBoard summaries")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _log(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def _say_skipped(skipped: Mapping[str, int], used: int, max_length: int, source: Path, limit: int | None) -> None:
    """One console warning (also under ``--quiet``) when sentences were skipped: how many, why, the length."""
    if any(skipped.values()):
        remedy = "pass a larger --max-length" if limit is not None and limit <= max_length else ""
        print(f"warning: {skip_message(skipped, used, max_length, str(source), remedy)}", file=sys.stderr, flush=True)


def cli_probe_syntax(argv: Sequence[str]) -> int:
    """Run ``bertwatch probe-syntax``; returns the process exit code."""
    args = _parser().parse_args(list(argv))
    from bertwatch.heads.capture import model_shape

    started = time.time()
    progress = False if args.quiet else None
    if args.quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    torch.manual_seed(args.seed)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model(args.model, device)
    shape = model_shape(model)
    max_length = max_input_length(model, tokenizer, args.max_length, default=None)
    common = dict(word_mode=args.word_mode, subtypes=args.subtypes, batch_size=args.batch_size, progress=progress)

    sentences = read_conllu(args.conllu, args.limit)
    encoded, skipped = encode(tokenizer, sentences, max_length)
    if not encoded:
        print(f"no sentence of {args.conllu} fits the model ({skipped}); nothing to analyse", file=sys.stderr)
        return 1
    _say_skipped(skipped, len(encoded), max_length, args.conllu, args.max_length)
    train_path = None if args.no_probes else (args.train_conllu or training_treebank(args.conllu))
    if not args.no_probes and train_path is None:
        _log(args.quiet, f"no training treebank next to {args.conllu}: pass --train-conllu to train the probes")
    main_scan = scan(
        model,
        tokenizer,
        encoded,
        wordclass=not args.no_wordclass,
        cluster_limit=args.cluster_limit,
        probe_examples=train_path is not None,
        desc="eval sentences",
        **common,
    )
    relations = main_scan.accuracy.result()
    _write_syntax(args, relations, shape, len(encoded), skipped, max_length)
    grids = {safe_tag(f"syntax_{n}"): best_grid(r) for n, r in relations.items() if r["count"] >= args.min_count}

    probes_result = None
    if train_path is not None:
        probes_result = _run_probes(model, tokenizer, train_path, args, max_length, main_scan, common)
        write_json(args.out / "probes.json", probes_result)
    ref_scan = None
    if not args.no_wordclass:
        if args.reference:
            ref_scan = _reference_scan(args, device, sentences, max_length, common, shape)
        grids.update(_write_word_classes(args, main_scan, ref_scan))
    coords = _write_clustering(args, main_scan, relations, shape)

    logdir = args.logdir or args.out
    _write_tensorboard(logdir, args.step, grids, coords, ref_scan, shape)
    report = write_linguistics_report(args.out)
    _print_summary(relations, probes_result, len(encoded), skipped, args.min_count)
    _log(
        args.quiet,
        f"wrote {args.out}/syntax.json, figures and {report.name}; TensorBoard run {logdir} "
        f"({time.time() - started:.0f} s)",
    )
    return 0


def _write_syntax(
    args: argparse.Namespace,
    relations: Mapping[str, Mapping[str, Any]],
    shape: tuple[int, int],
    sentences: int,
    skipped: Mapping[str, int],
    max_length: int | None,
) -> None:
    """``syntax.json`` and ``syntax.png``: the best head per relation against the fixed-offset baseline."""
    from bertwatch.linguistics.syntax import syntax_figure

    write_json(
        args.out / "syntax.json",
        {
            "model": args.model,
            "conllu": str(args.conllu),
            "layers": shape[0],
            "heads": shape[1],
            "num_sentences": sentences,
            "skipped": skipped,
            "max_length": max_length,
            "word_mode": args.word_mode,
            "subtypes": args.subtypes,
            "directions": list(DIRECTIONS),
            "relations": relations,
        },
    )
    syntax_figure(
        relations,
        args.out / "syntax.png",
        args.min_count,
        f"{Path(args.model).name}: best head per relation vs fixed offset ({sentences} sentences)",
    )


def _reference_scan(
    args: argparse.Namespace,
    device: str,
    sentences: list,
    max_length: int | None,
    common: Mapping[str, Any],
    shape: tuple[int, int],
) -> Scan:
    """The word-class scan of ``--reference`` over the same sentences; refuses a model of another shape."""
    from bertwatch.heads.capture import model_shape

    ref_model, ref_tokenizer = load_model(args.reference, device)
    if model_shape(ref_model) != shape:
        raise SystemExit(f"--reference has shape {model_shape(ref_model)}, --model has {shape}")
    ref_encoded, _ = encode(ref_tokenizer, sentences, max_length)
    return scan(ref_model, ref_tokenizer, ref_encoded, syntax=False, desc="reference", **common)


def _write_word_classes(args: argparse.Namespace, main_scan: Scan, ref_scan: Scan | None) -> dict[str, np.ndarray]:
    """``wordclass.json`` and the word-class and [CLS]-target figures; returns their grids for TensorBoard."""
    from bertwatch.linguistics.wordclass import cls_targets_figure, wordclass_figure

    write_json(args.out / "wordclass.json", wordclass_json(args.model, main_scan, ref_scan, args.reference))
    panels: dict[str, dict[str, np.ndarray]] = {"model": main_scan.classes}
    cls_panels = {"model": {k: v[-1] for k, v in main_scan.cls_targets.items()}}
    if ref_scan is not None:
        panels["reference"] = ref_scan.classes
        panels["difference"] = {k: main_scan.classes[k] - ref_scan.classes[k] for k in main_scan.classes}
        cls_panels["reference"] = {k: v[-1] for k, v in ref_scan.cls_targets.items()}
    wordclass_figure(panels, args.out / "wordclass.png", "Attention to word classes (Kovaleva Sec 4.4)")
    cls_targets_figure(cls_panels, args.out / "cls_targets.png", "What [CLS] attends to (Kovaleva Sec 4.5)")
    return {
        **{f"wordclass_{k}": v for k, v in main_scan.classes.items()},
        **{f"cls_target_{k}": v for k, v in main_scan.cls_targets.items()},
    }


def _write_clustering(
    args: argparse.Namespace, main_scan: Scan, relations: Mapping[str, Mapping[str, Any]], shape: tuple[int, int]
) -> np.ndarray | None:
    """``clustering.json``, the distance matrix and the MDS figure; returns the coordinates (None if skipped)."""
    from bertwatch.heads.maps.stats import behaviour_label_lists
    from bertwatch.linguistics.clustering import clustering_figure, mds_embedding

    if main_scan.distances is None or not main_scan.distances.examples:
        return None
    layers, heads = shape
    distances = main_scan.distances.distances
    coords = mds_embedding(distances, seed=args.seed)
    labels = behaviour_label_lists(main_scan.behaviour) if main_scan.behaviour else None
    marks = relation_marks(relations, args.min_count)
    np.save(args.out / "clustering_distances.npy", distances)
    write_json(
        args.out / "clustering.json",
        {
            "layers": layers,
            "heads": heads,
            "examples": main_scan.distances.examples,
            "tokens": main_scan.distances.tokens,
            "coords": coords,
            "labels": labels,
            "marks": {f"{l}-{h}": t for (l, h), t in marks.items()},
            "distances_file": "clustering_distances.npy",
        },
    )
    clustering_figure(
        coords,
        layers,
        heads,
        labels,
        args.out / "clustering.png",
        marks,
        f"{Path(args.model).name}: heads embedded by JS distance (MDS)",
    )
    return coords


def _write_tensorboard(
    logdir: Path,
    step: int,
    grids: Mapping[str, np.ndarray],
    coords: np.ndarray | None,
    ref_scan: Scan | None,
    shape: tuple[int, int],
) -> None:
    """The grids (and the head embedding) into ``logdir``; the reference's word classes into ``logdir/reference``."""
    from bertwatch.tb.writer.summary import SummaryWriter

    with SummaryWriter(str(logdir)) as writer:
        writer.add_head_grids(grids, step)
        if coords is not None:
            writer.add_embedding("js_mds", coords, *shape, step)
    if ref_scan is not None:
        with SummaryWriter(str(Path(logdir) / "reference")) as ref_writer:
            ref_writer.add_head_grids(
                {
                    **{f"wordclass_{k}": v for k, v in ref_scan.classes.items()},
                    **{f"cls_target_{k}": v for k, v in ref_scan.cls_targets.items()},
                },
                step,
            )


def _run_probes(
    model: torch.nn.Module,
    tokenizer: Any,
    train_path: Path,
    args: argparse.Namespace,
    max_length: int,
    main_scan: Scan,
    common: Mapping[str, Any],
) -> dict[str, Any]:
    from bertwatch.heads.capture import model_shape
    from bertwatch.linguistics.parsing import (
        AttentionProbe,
        AttentionWordProbe,
        probe_uas,
        right_branching_uas,
        train_probe,
    )

    limit = args.probe_train_limit or None
    train_sentences = read_conllu(train_path, limit)
    train_encoded, train_skipped = encode(tokenizer, train_sentences, max_length)
    _say_skipped(train_skipped, len(train_encoded), max_length, train_path, args.max_length)
    train_scan = scan(
        model,
        tokenizer,
        train_encoded,
        syntax=False,
        wordclass=False,
        probe_examples=True,
        desc="probe train sentences",
        **{**common, "subtypes": False},
    )
    layers, heads = model_shape(model)
    maps = layers * heads
    dim = train_scan.examples[0].vectors.shape[-1]
    result: dict[str, Any] = {
        "train_conllu": str(train_path),
        "train_sentences": len(train_scan.examples),
        "train_skipped": train_skipped,
        "dev_sentences": len(main_scan.examples),
        "epochs": args.probe_epochs,
        "lr": 0.002,
        "word_vectors": "the model's input word embeddings (mean over a word's pieces), frozen",
        "uas": {},
        "train_loss": {},
    }
    for name, probe in (("attention", AttentionProbe(maps)), ("attention+embeddings", AttentionWordProbe(maps, dim))):
        torch.manual_seed(args.seed)
        result["train_loss"][name] = train_probe(
            probe, train_scan.examples, args.probe_epochs, seed=args.seed, progress=False if args.quiet else None
        )
        result["uas"][name] = probe_uas(probe, main_scan.examples)
    result["uas"]["right-branching"] = right_branching_uas(main_scan.examples)
    return result


def _print_summary(
    relations: Mapping[str, Mapping[str, Any]],
    probes: Mapping[str, Any] | None,
    sentences: int,
    skipped: Mapping[str, int],
    min_count: int,
) -> None:
    print(f"{sentences} sentences (skipped: {dict(skipped)}); layers and heads numbered from 0")
    print(f"{'relation':<12}{'count':>7}  {'best':>7} {'direction':<10}{'acc%':>6}  {'offset':>6}{'base%':>7}")
    shown = [r for r in relations if r in _MAIN_RELATIONS or relations[r]["count"] >= min_count]
    for name in shown:
        r = relations[name]
        best = f"L{r['best_layer']} H{r['best_head']}"
        print(
            f"{name:<12}{r['count']:>7}  {best:>7} {r['direction']:<10}"
            f"{100 * r['best_accuracy']:>6.1f}  {r['baseline_offset']:>+6d}{100 * r['baseline_accuracy']:>7.1f}"
        )
    if probes:
        print("probe UAS (no punct): " + ", ".join(f"{k} {100 * v:.1f}" for k, v in probes["uas"].items()))
