"""Ablation results as JSON, CSV and one self-contained HTML report; ``bertwatch report`` from a run's logs.

Everything here is numpy, matplotlib and TensorBoard's event reader: no torch. The HTML file embeds its figures
as base64 PNG and carries no scripts or external assets, so it opens offline; every user string is escaped.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bertwatch.bootstrap import benjamini_hochberg
from bertwatch.figures import png_bytes, pyplot as _pyplot

__all__ = [
    "FIELDS",
    "AblationResult",
    "build_html",
    "cli_report",
    "read_run",
    "write_outputs",
]

#: The fields of one table cell, in the order of the last axis of the TensorBoard ablation tables.
FIELDS = ("value", "delta", "ci_low", "ci_high", "p")
FORMAT_VERSION = 1


def _num(value: Any) -> float | None:
    """JSON has no NaN or infinity: write them as null."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _cell(row: np.ndarray) -> dict[str, float | None]:
    return {name: _num(v) for name, v in zip(FIELDS, row)}


def _uncell(cell: dict[str, Any]) -> list[float]:
    return [np.nan if cell.get(name) is None else float(cell[name]) for name in FIELDS]


@dataclass
class AblationResult:
    """One mode's sweep: every single head, every layer, keep-one-head, the pruning curve (cells per FIELDS)."""

    task: str | None
    mode: str
    metric: str
    num_examples: int
    baseline: float
    heads: np.ndarray  # [layers, heads, 5]
    layers: np.ndarray  # [layers, 5]
    keep_only: np.ndarray | None = None  # [layers, heads, 5]: only that head of its layer left on
    pruning: list[dict[str, Any]] = field(default_factory=list)  # {"pruned", "fraction", *FIELDS}
    importance: np.ndarray | None = None  # [layers, heads], the order of the pruning curve
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    #: logits ``[n, C]`` per configuration id (``baseline``, ``head:l:h``, ``layer:l``, ``keep:l:h``, ``prune:k``);
    #: in memory only, not written to the JSON
    logits: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.heads.shape[0]), int(self.heads.shape[1])

    def keep_best(self) -> list[dict[str, Any]]:
        """Per layer, the head that scores best when it is the only one left (Michel et al., Table 2)."""
        if self.keep_only is None:
            return []
        greater = self.config.get("greater_is_better", True)
        out = []
        for layer, rows in enumerate(self.keep_only):
            values = np.where(np.isfinite(rows[:, 0]), rows[:, 0], -np.inf if greater else np.inf)
            head = int(np.argmax(values) if greater else np.argmin(values))
            out.append({"layer": layer, "head": head, **_cell(rows[head])})
        return out

    def pruning_curve(self) -> np.ndarray:
        """``[k, 2]`` float32: (fraction of heads pruned, metric), starting at (0, baseline)."""
        points = [(0.0, self.baseline)] + [(p["fraction"], p["value"]) for p in self.pruning]
        return np.array([[f, np.nan if v is None else v] for f, v in points], dtype=np.float32)

    def to_json(self) -> dict[str, Any]:
        """The ``ablation.json`` document (layers and heads counted from 0; NaN written as null)."""
        doc: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "task": self.task,
            "mode": self.mode,
            "metric": self.metric,
            "num_examples": int(self.num_examples),
            "baseline": _num(self.baseline),
            "heads": [[_cell(c) for c in row] for row in self.heads],
            "layers": [_cell(c) for c in self.layers],
        }
        if self.keep_only is not None:
            doc["keep_only"] = [[_cell(c) for c in row] for row in self.keep_only]
            doc["keep_best"] = self.keep_best()
        if self.pruning:
            doc["pruning"] = [{k: (_num(v) if k in FIELDS or k == "fraction" else v) for k, v in p.items()}
                              for p in self.pruning]
        if self.importance is not None:
            doc["importance"] = [[_num(v) for v in row] for row in self.importance]
        doc["baseline_metrics"] = {k: _num(v) for k, v in self.baseline_metrics.items()}
        doc["config"] = self.config
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "AblationResult":
        """Read back what :meth:`to_json` wrote."""
        heads = np.array([[_uncell(c) for c in row] for row in doc["heads"]], dtype=np.float64)
        layers = np.array([_uncell(c) for c in doc["layers"]], dtype=np.float64)
        keep = doc.get("keep_only")
        importance = doc.get("importance")
        return cls(
            task=doc.get("task"),
            mode=doc["mode"],
            metric=doc["metric"],
            num_examples=int(doc["num_examples"]),
            baseline=np.nan if doc.get("baseline") is None else float(doc["baseline"]),
            heads=heads,
            layers=layers,
            keep_only=None if keep is None else np.array([[_uncell(c) for c in row] for row in keep], dtype=np.float64),
            pruning=[{k: (np.nan if v is None and k in FIELDS else v) for k, v in p.items()} for p in doc.get("pruning", [])],
            importance=None if importance is None else np.array(importance, dtype=np.float64),
            baseline_metrics={k: (np.nan if v is None else v) for k, v in doc.get("baseline_metrics", {}).items()},
            config=doc.get("config", {}),
        )

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per unit: ``unit`` (baseline / head / layer / keep_only / pruning), layer, head, pruned, cells."""
        rows: list[dict[str, Any]] = [{"unit": "baseline", "layer": "", "head": "", "pruned": 0,
                                       **_cell([self.baseline, 0.0, 0.0, 0.0, 1.0])}]
        num_layers, num_heads = self.shape
        for l in range(num_layers):
            for h in range(num_heads):
                rows.append({"unit": "head", "layer": l, "head": h, "pruned": 1, **_cell(self.heads[l, h])})
        for l in range(num_layers):
            rows.append({"unit": "layer", "layer": l, "head": "", "pruned": num_heads, **_cell(self.layers[l])})
        if self.keep_only is not None:
            for l in range(num_layers):
                for h in range(num_heads):
                    rows.append({"unit": "keep_only", "layer": l, "head": h, "pruned": num_heads - 1,
                                 **_cell(self.keep_only[l, h])})
        for p in self.pruning:
            rows.append({"unit": "pruning", "layer": "", "head": "", "pruned": p["pruned"],
                         **{k: _num(p.get(k)) for k in FIELDS}})
        return rows


def write_outputs(result: AblationResult, out_dir: str | Path, training: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write ``ablation.json``, ``ablation.csv`` and ``report.html`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ablation.json", "csv": out / "ablation.csv", "html": out / "report.html"}
    _atomic_write(paths["json"], json.dumps(result.to_json(), indent=1, allow_nan=False))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["unit", "layer", "head", "pruned", *FIELDS], lineterminator="\n")
    writer.writeheader()
    for row in result.csv_rows():
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    _atomic_write(paths["csv"], buffer.getvalue())
    _atomic_write(paths["html"], build_html([result], training))
    return paths


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# --------------------------------------------------------------------------------------------------------
# Figures


def _png(figure) -> str:
    return base64.b64encode(png_bytes(figure)).decode("ascii")


def _marks(p: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    """'**' where the BH-adjusted q < alpha, '*' where only the raw p < alpha, '' otherwise."""
    marks = np.full(p.shape, "", dtype=object)
    marks[np.nan_to_num(p, nan=1.0) < alpha] = "*"
    marks[np.nan_to_num(q, nan=1.0) < alpha] = "**"
    return marks


def _delta_heatmap(result: AblationResult, alpha: float) -> str:
    plt = _pyplot()
    delta = result.heads[..., 1]
    p = result.heads[..., 4]
    q = benjamini_hochberg(p.ravel()).reshape(p.shape)
    marks = _marks(p, q, alpha)
    num_layers, num_heads = result.shape
    fig, ax = plt.subplots(figsize=(max(4.5, 0.5 * num_heads + 2), max(2.8, 0.42 * num_layers + 1.3)))
    finite = delta[np.isfinite(delta)]
    span = max(float(np.max(np.abs(finite))) if finite.size else 0.0, 1e-9)
    image = ax.imshow(delta, cmap=plt.get_cmap("RdBu").with_extremes(bad="#bbbbbb"), vmin=-span, vmax=span,
                      aspect="auto")
    for l in range(num_layers):
        for h in range(num_heads):
            if marks[l, h]:
                dark = abs(np.nan_to_num(delta[l, h])) > 0.6 * span
                ax.text(h, l, marks[l, h], ha="center", va="center", fontsize=9, color="white" if dark else "black")
    ax.set_xticks(range(num_heads), [str(h + 1) for h in range(num_heads)])
    ax.set_yticks(range(num_layers), [str(l + 1) for l in range(num_layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"Δ {result.metric} when one head is disabled ({result.mode})")
    fig.colorbar(image, ax=ax, label=f"Δ {result.metric} (blue = better)")
    return _png(fig)


def _layer_bars(result: AblationResult) -> str:
    plt = _pyplot()
    rows = result.layers
    num_layers = rows.shape[0]
    xs = np.arange(1, num_layers + 1)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * num_layers + 2), 3.0))
    delta = rows[:, 1]
    lower = np.clip(delta - rows[:, 2], 0, None)
    upper = np.clip(rows[:, 3] - delta, 0, None)
    colors = ["#2c7bb6" if d >= 0 else "#d7191c" for d in np.nan_to_num(delta)]
    ax.bar(xs, np.nan_to_num(delta), color=colors, yerr=np.nan_to_num(np.vstack([lower, upper])), capsize=3)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(xs)
    ax.set_xlabel("layer disabled")
    ax.set_ylabel(f"Δ {result.metric}")
    ax.set_title(f"whole layers ({result.mode}), 95% bootstrap intervals")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _pruning_figure(result: AblationResult) -> str:
    plt = _pyplot()
    curve = result.pruning_curve()
    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    lows = [result.baseline] + [p.get("ci_low", np.nan) + result.baseline for p in result.pruning]
    highs = [result.baseline] + [p.get("ci_high", np.nan) + result.baseline for p in result.pruning]
    ax.fill_between(100 * curve[:, 0], lows, highs, color="#9ecae1", alpha=0.5, label="95% interval")
    ax.plot(100 * curve[:, 0], curve[:, 1], marker="o", ms=3, color="#08519c", label=result.metric)
    ax.axhline(0.9 * result.baseline if result.baseline >= 0 else 1.1 * result.baseline, color="#d7191c",
               ls="--", lw=1, label="90% of baseline")
    ax.set_xlabel("heads pruned (%), least important first")
    ax.set_ylabel(result.metric)
    ax.set_title(f"iterative pruning ({result.mode})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _grid_figure(grid: np.ndarray, title: str, diverging: bool = False) -> str:
    plt = _pyplot()
    grid = np.asarray(grid, dtype=float)
    num_layers, num_heads = grid.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.4 * num_heads + 2), max(2.4, 0.34 * num_layers + 1.2)))
    finite = grid[np.isfinite(grid)]
    if diverging and finite.size:
        span = max(float(np.max(np.abs(finite))), 1e-12)
        cmap, limits = "RdBu_r", {"vmin": -span, "vmax": span}
    else:
        cmap, limits = "viridis", {}
    image = ax.imshow(grid, cmap=plt.get_cmap(cmap).with_extremes(bad="#bbbbbb"), aspect="auto", **limits)
    ax.set_xticks(range(num_heads), [str(h + 1) for h in range(num_heads)])
    ax.set_yticks(range(num_layers), [str(l + 1) for l in range(num_layers)])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax)
    return _png(fig)


# --------------------------------------------------------------------------------------------------------
# HTML

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}img{max-width:100%;height:auto}.note{color:#555;font-size:0.9em}
.grids{display:flex;flex-wrap:wrap;gap:8px}.grids figure{margin:0}figcaption{font-size:0.85em;color:#555}
code{background:#f4f4f4;padding:1px 4px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "–"
    return f"{value:.{digits}f}"


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 0) -> str:
    head = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>' for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _top_heads(result: AblationResult, alpha: float, count: int = 10) -> str:
    delta = result.heads[..., 1]
    p = result.heads[..., 4]
    q = benjamini_hochberg(p.ravel()).reshape(p.shape)
    num_layers, num_heads = result.shape
    units = [(l, h) for l in range(num_layers) for h in range(num_heads) if np.isfinite(delta[l, h])]

    def rows(units_sorted):
        return [
            [f"{l + 1}-{h + 1}", f"{l}:{h}", _fmt(result.heads[l, h, 0]), _fmt(delta[l, h]),
             f"[{_fmt(result.heads[l, h, 2])}, {_fmt(result.heads[l, h, 3])}]", _fmt(p[l, h], 3), _fmt(q[l, h], 3)]
            for l, h in units_sorted
        ]

    header = ["layer-head (from 1)", "index (from 0)", result.metric, "Δ", "95% interval", "p", "q (BH)"]
    hurt = sorted(units, key=lambda u: (delta[u], u))[:count]
    helped = sorted(units, key=lambda u: (-delta[u], u))[:count]
    return (
        f"<h3>The {len(hurt)} heads whose removal hurts most</h3>" + _table(header, rows(hurt), left=2)
        + f"<h3>The {len(helped)} heads whose removal helps most</h3>" + _table(header, rows(helped), left=2)
    )


def _section(result: AblationResult, alpha: float) -> str:
    parts = [f"<h2>Mode <code>{_e(result.mode)}</code>: {_e(result.metric)} on {result.num_examples} examples"
             f"{' of ' + _e(result.task) if result.task else ''}</h2>"]
    metrics = ", ".join(f"{_e(k)} = {_fmt(v)}" for k, v in result.baseline_metrics.items())
    parts.append(f"<p>Baseline {_e(result.metric)} = <b>{_fmt(result.baseline)}</b>"
                 f"{' (' + metrics + ')' if metrics else ''}.</p>")
    n_resamples = result.config.get("n_resamples", "?")
    parts.append(
        f'<p class="note">Δ = metric with the unit disabled − baseline. Intervals: paired bootstrap over evaluation '
        f"examples ({_e(n_resamples)} resamples, percentile 95%). <b>*</b> p &lt; {alpha}; <b>**</b> also "
        f"significant after Benjamini–Hochberg correction over all {result.heads[..., 0].size} heads (FDR {alpha}). "
        "Layers and heads are numbered from 1 in figures, from 0 in files.</p>"
    )
    parts.append(_img(_delta_heatmap(result, alpha), "delta heatmap"))
    parts.append(_img(_layer_bars(result), "layer bars"))
    parts.append(_table(
        ["layer", result.metric, "Δ", "95% interval", "p"],
        [[l + 1, _fmt(r[0]), _fmt(r[1]), f"[{_fmt(r[2])}, {_fmt(r[3])}]", _fmt(r[4], 3)]
         for l, r in enumerate(result.layers)],
    ))
    parts.append(_top_heads(result, alpha))
    best = result.keep_best()
    if best:
        parts.append("<h3>Keep only the best head of a layer (Michel et al.)</h3>")
        parts.append('<p class="note">For each layer, every head was tried as the only one left on; the best is '
                     "shown. Picking the best of many makes its Δ optimistic.</p>")
        parts.append(_table(
            ["layer", "best head", result.metric, "Δ", "95% interval", "p"],
            [[b["layer"] + 1, b["head"] + 1, _fmt(b["value"]), _fmt(b["delta"]),
              f"[{_fmt(b['ci_low'])}, {_fmt(b['ci_high'])}]", _fmt(b["p"], 3)] for b in best],
        ))
    if result.pruning:
        parts.append("<h3>Iterative pruning curve</h3>")
        parts.append(_img(_pruning_figure(result), "pruning curve"))
        parts.append(_table(
            ["heads pruned", "fraction", result.metric, "Δ", "95% interval", "p"],
            [[p["pruned"], _fmt(p["fraction"], 3), _fmt(p["value"]), _fmt(p["delta"]),
              f"[{_fmt(p['ci_low'])}, {_fmt(p['ci_high'])}]", _fmt(p["p"], 3)] for p in result.pruning],
        ))
    if result.config:
        parts.append("<h3>Configuration</h3>")
        parts.append(_table(["setting", "value"],
                            [[k, json.dumps(v) if not isinstance(v, str) else v]
                             for k, v in sorted(result.config.items())], left=2))
    return "\n".join(parts)


def _training_section(training: dict[str, Any]) -> str:
    parts = ["<h2>During training: first and last step of each head statistic</h2>",
             f'<p class="note">Read from {_e(training.get("source", "the run"))}.</p>']
    for stat, entry in sorted(training.get("grids", {}).items()):
        first, last = entry["first"], entry["last"]
        figures = [
            (_grid_figure(first[1], f"{stat}, step {first[0]}"), f"{stat} at step {first[0]}"),
            (_grid_figure(last[1], f"{stat}, step {last[0]}"), f"{stat} at step {last[0]}"),
        ]
        if first[0] != last[0]:
            figures.append((_grid_figure(np.asarray(last[1]) - np.asarray(first[1]),
                                         f"{stat}: last − first", diverging=True), f"{stat} change"))
        cells = "".join(f"<figure>{_img(b64, alt)}<figcaption>{_e(alt)}</figcaption></figure>" for b64, alt in figures)
        parts.append(f"<h3>{_e(stat)}</h3><div class=\"grids\">{cells}</div>")
    return "\n".join(parts)


def build_html(results: Sequence[AblationResult], training: dict[str, Any] | None = None, alpha: float = 0.05,
               title: str = "bertwatch ablation report", extra_sections: Sequence[str] = ()) -> str:
    """One self-contained HTML page: per mode the Δ heatmap with significance marks, layer bars, top heads,
    keep-best table, pruning curve and the configuration; then training-time grids when ``training`` is given,
    then ``extra_sections`` (trusted HTML fragments, e.g. the linguistic analyses)."""
    body = [f"<h1>{_e(title)}</h1>"]
    if not results and not training:
        body.append("<p>No ablation results and no training statistics were found.</p>")
    for result in results:
        body.append(_section(result, alpha))
    if training and training.get("grids"):
        body.append(_training_section(training))
    body.extend(extra_sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(body) + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------------------------------------
# Reading a run's logs


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if "tfevents" in path.name else []
    return sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)


def read_run(path: str | Path) -> tuple[list[AblationResult], dict[str, Any]]:
    """Ablation results and training-time grids of a run: ``ablation.json`` files under ``path`` first, then the
    bertwatch summaries in its TensorBoard event files (ablation tables and the first/last step of each grid)."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist; pass a run's output folder, TensorBoard run or ablation folder")
    results: dict[str, AblationResult] = {}
    json_files = [root] if root.is_file() and root.suffix == ".json" else sorted(root.rglob("ablation.json")) if root.is_dir() else []
    for file in json_files:
        result = AblationResult.from_json(json.loads(file.read_text(encoding="utf-8")))
        results.setdefault(result.mode, result)
    tb_results, grids = _read_events(_event_files(root))
    for mode, result in tb_results.items():
        results.setdefault(mode, result)
    training = {"grids": grids, "source": str(root)}
    return [results[m] for m in sorted(results)], training


def _read_events(files: Sequence[Path]) -> tuple[dict[str, AblationResult], dict[str, Any]]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    from bertwatch.tb import metadata as md

    content: dict[str, dict[str, Any]] = {}
    series: dict[str, list[tuple[int, float, np.ndarray]]] = {}
    for file in files:
        for event in EventFileLoader(str(file)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("metadata") and value.metadata.plugin_data.plugin_name == md.PLUGIN_NAME:
                    try:
                        content[value.tag] = json.loads(value.metadata.plugin_data.content.decode("utf-8") or "{}")
                    except ValueError:
                        continue
                if value.tag not in content or not value.HasField("tensor"):
                    continue
                kind = content[value.tag].get("kind")
                if kind not in (md.KIND_HEAD_GRID, md.KIND_ABLATION_HEADS, md.KIND_ABLATION_LAYERS, md.KIND_PRUNING):
                    continue
                array = tensor_util.make_ndarray(value.tensor)
                series.setdefault(value.tag, []).append((int(event.step), float(event.wall_time), array))
    grids: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for tag, points in series.items():
        points.sort(key=lambda t: (t[0], t[1]))
        meta = content[tag]
        kind = meta.get("kind")
        if kind == md.KIND_HEAD_GRID:
            stat = meta.get("stat") or tag[len(md.HEADS_PREFIX):]
            grids[stat] = {"first": (points[0][0], points[0][2]), "last": (points[-1][0], points[-1][2])}
        else:
            mode = meta.get("mode") or tag[len(md.ABLATION_PREFIX):].split("/")[0]
            entry = tables.setdefault(mode, {})
            entry[kind] = points[-1][2]
            if kind == md.KIND_ABLATION_HEADS:
                entry["meta"] = meta
    results = {}
    for mode, entry in tables.items():
        if md.KIND_ABLATION_HEADS not in entry or md.KIND_ABLATION_LAYERS not in entry:
            continue
        meta = entry["meta"]
        heads = np.asarray(entry[md.KIND_ABLATION_HEADS], dtype=np.float64)
        baseline = float(meta.get("baseline", np.nan))
        pruning = []
        curve = entry.get(md.KIND_PRUNING)
        if curve is not None:
            total = heads.shape[0] * heads.shape[1]
            for fraction, value in np.asarray(curve, dtype=np.float64)[1:]:
                pruning.append({"pruned": int(round(fraction * total)), "fraction": float(fraction),
                                "value": float(value), "delta": float(value - baseline),
                                "ci_low": np.nan, "ci_high": np.nan, "p": np.nan})
        results[mode] = AblationResult(
            task=None, mode=mode, metric=str(meta.get("metric", "metric")), num_examples=int(meta.get("num_examples", 0)),
            baseline=baseline, heads=heads, layers=np.asarray(entry[md.KIND_ABLATION_LAYERS], dtype=np.float64),
            pruning=pruning, config={"source": "TensorBoard summaries"},
        )
    return results, grids


def _report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertwatch report",
        description="Build one self-contained HTML report from a run: the ablation results (ablation.json or the "
        "TensorBoard ablation summaries) and the first and last step of every head statistic logged in training.",
    )
    parser.add_argument("path", help="a training output folder, a TensorBoard run folder or an ablation folder")
    parser.add_argument("--out", default=None, help="HTML file to write (default: PATH/report.html)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the marks (default 0.05)")
    parser.add_argument("--linguistics", default=None,
                        help="a `bertwatch probe-syntax` output folder to add (default: PATH or PATH/linguistics "
                        "when it holds syntax.json)")
    return parser


def _linguistics_folder(root: Path, given: str | None) -> Path | None:
    if given:
        if not (Path(given) / "syntax.json").is_file():
            raise FileNotFoundError(f"no syntax.json in {given}; pass the --out folder of `bertwatch probe-syntax`")
        return Path(given)
    return next((d for d in (root, root / "linguistics") if (d / "syntax.json").is_file()), None)


def cli_report(argv: Sequence[str]) -> int:
    """``bertwatch report PATH [--out FILE]``: the HTML report of a run's logs; returns the exit status."""
    args = _report_parser().parse_args(list(argv))
    root = Path(args.path)
    try:
        results, training = read_run(root)
        linguistics = _linguistics_folder(root, args.linguistics)
    except FileNotFoundError as error:
        print(f"bertwatch report: {error}")
        return 2
    extra = []
    if linguistics is not None:
        from bertwatch.linguistics import html_section

        extra.append(html_section(linguistics))
    if not results and not training["grids"] and not extra:
        print(f"bertwatch report: found no ablation.json and no bertwatch summaries under {root}; run "
              "`bertwatch ablate` or train with BertWatchCallback first")
        return 2
    out = Path(args.out) if args.out else (root if root.is_dir() else root.parent) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out, build_html(results, training, alpha=args.alpha, extra_sections=extra))
    modes = ", ".join(r.mode for r in results) or "none"
    print(f"bertwatch report: ablation modes: {modes}; {len(training['grids'])} training grids -> {out}")
    return 0
