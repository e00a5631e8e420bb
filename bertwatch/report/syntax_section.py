"""The linguistics section of a report, read back from a ``probe-syntax`` output folder."""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertwatch.report.markup import head_name


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
            [
                name,
                r["count"],
                head_name(r["best_layer"], r["best_head"]),
                r["direction"],
                _pct(r["best_accuracy"]),
                f"{r['baseline_offset']:+d}",
                _pct(r["baseline_accuracy"]),
            ]
            for name, r in syntax["relations"].items()
        ]
        parts.append(
            f"<h3>Syntactic heads (Clark et al. Sec 4.2) — {html.escape(str(syntax.get('model')))}, "
            f"{syntax.get('num_sentences')} sentences</h3>"
        )
        parts.append("<p>Best head per UD relation against the best fixed offset.</p>")
        parts.append(
            _table(["relation", "count", "best head", "direction", "accuracy %", "offset", "baseline %"], rows)
        )
        parts.append(_img(out_dir / "syntax.png"))
    probes = load("probes.json")
    if probes:
        rows = [[k, _pct(v)] for k, v in probes.get("uas", {}).items()]
        parts.append(
            f"<h3>Attention probes (Clark et al. Sec 5) — UAS on {probes.get('dev_sentences')} sentences, "
            f"trained on {probes.get('train_sentences')}</h3>"
        )
        parts.append(_table(["probe", "UAS % (no punct)"], rows))
    wordclass = load("wordclass.json")
    if wordclass:
        has_ref = wordclass.get("reference") is not None
        header = ["class", "mean", "top heads (head: value)"] + (["reference mean"] if has_ref else [])
        rows = []
        for name, c in wordclass["classes"].items():
            top = ", ".join(f"{head_name(t['layer'], t['head'])}: {t['value']:.3f}" for t in c["top_heads"])
            rows.append([name, f"{c['mean']:.4f}", top] + ([f"{c['reference_mean']:.4f}"] if has_ref else []))
        parts.append("<h3>Attention to word classes and roles (Kovaleva et al. Sec 4.4)</h3>")
        parts.append(_table(header, rows))
        parts.append(_img(out_dir / "wordclass.png"))
        rows = [
            [name, f"{c['last_layer_mean']:.4f}", " ".join(_pct(v) for v in c["last_layer"])]
            for name, c in wordclass["cls_targets"].items()
        ]
        parts.append("<h3>[CLS] targets in the last layer (Kovaleva et al. Sec 4.5)</h3>")
        parts.append(_table(["token type", "mean over heads", "per head (%)"], rows))
        parts.append(_img(out_dir / "cls_targets.png"))
    clustering = load("clustering.json")
    if clustering:
        parts.append(
            f"<h3>Head clustering (Clark et al. Sec 6) — JS distances over {clustering.get('tokens')} tokens, MDS</h3>"
        )
        parts.append(_img(out_dir / "clustering.png"))
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


def write_linguistics_report(out_dir: Path) -> Path:
    style = (
        "body{font-family:sans-serif;margin:1.5em;max-width:72em}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:left}"
    )
    path = out_dir / "linguistics.html"
    path.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>bertwatch linguistics</title>'
        f"<style>{style}</style></head><body>{html_section(out_dir)}</body></html>\n",
        encoding="utf-8",
    )
    return path
