"""The self-contained HTML report of ablation results and training-time grids.

It embeds its figures as base64 PNG and carries no scripts or external assets, so it opens offline; every user
string is escaped.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.significance import benjamini_hochberg
from bertwatch.report.alerts_section import alerts_section
from bertwatch.report.colour_grid import GRID_STYLE, change_grid, change_scale_half
from bertwatch.report.figures import png_bytes
from bertwatch.report.figures import pyplot as _pyplot
from bertwatch.report.markup import b64, escape, head_name, image, number, table
from bertwatch.report.pruning_section import answer_lines, curves_figure
from bertwatch.report.result import FIELDS, AblationResult, atomic_write
from bertwatch.report.summary_section import summary_section
from bertwatch.report.training_section import details_section
from bertwatch.tb.colours import diverging_hex, mark_hex


def write_outputs(
    result: AblationResult, out_dir: str | Path, training: dict[str, Any] | None = None
) -> dict[str, Path]:
    """Write ``ablation.json``, ``ablation.csv`` and ``report.html`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "ablation.json", "csv": out / "ablation.csv", "html": out / "report.html"}
    atomic_write(paths["json"], json.dumps(result.to_json(), indent=1, allow_nan=False))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["unit", "layer", "head", "pruned", *FIELDS], lineterminator="\n")
    writer.writeheader()
    for row in result.csv_rows():
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    atomic_write(paths["csv"], buffer.getvalue())
    atomic_write(paths["html"], build_html([result], training))
    return paths


def _png(figure) -> str:
    return b64(png_bytes(figure))


def _marks(p: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    """'**' where the BH-adjusted q < alpha, '*' where only the raw p < alpha, '' otherwise."""
    marks = np.full(p.shape, "", dtype=object)
    marks[np.nan_to_num(p, nan=1.0) < alpha] = "*"
    marks[np.nan_to_num(q, nan=1.0) < alpha] = "**"
    return marks


def _delta_grid(result: AblationResult, alpha: float) -> str:
    """Δ per head as HTML cells on the plugin's diverging scale (red = worse), with the marks of :func:`_marks`."""
    p = result.heads[..., 4]
    q = benjamini_hochberg(p.ravel()).reshape(p.shape)
    greater = bool(result.config.get("greater_is_better", True))
    return f"<h3>Δ {escape(result.metric_label)} when one head is disabled ({escape(result.mode)})</h3>" + change_grid(
        result.heads, _marks(p, q, alpha).tolist(), result.metric_label, greater, f"heads-{result.mode}", q
    )


def _layer_bars(result: AblationResult) -> str:
    plt = _pyplot()
    rows = result.layers
    num_layers = rows.shape[0]
    xs = np.arange(num_layers)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * num_layers + 2), 3.0))
    delta = rows[:, 1]
    lower = np.clip(delta - rows[:, 2], 0, None)
    upper = np.clip(rows[:, 3] - delta, 0, None)
    greater, half = bool(result.config.get("greater_is_better", True)), change_scale_half(delta)
    colors = [diverging_hex(float(np.float32(d)), 0.0, half, greater) for d in delta]  # the plugin's bars' colours
    whiskers = np.nan_to_num(np.vstack([lower, upper]))
    ax.bar(xs, np.nan_to_num(delta), color=colors, yerr=whiskers, ecolor=mark_hex("whisker"), capsize=3)
    ax.axhline(0, color=mark_hex("zero"), lw=0.8)
    ax.set_xticks(xs)
    ax.set_xlabel("layer disabled")
    ax.set_ylabel(f"Δ {result.metric_label}")
    ax.set_title(f"whole layers ({result.mode}), 95% bootstrap intervals")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


# --------------------------------------------------------------------------------------------------------
# HTML

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}img{max-width:100%;height:auto}.note{color:#555;font-size:0.9em}
figure{margin:0}figcaption{font-size:0.85em;color:#555}code{background:#f4f4f4;padding:1px 4px}
dl.glance{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:2px 10px;font-size:0.88em;
margin:8px 0;padding:6px 10px;background:#f6f6f6;border-radius:6px}dl.glance dt{font-weight:600}dl.glance dd{margin:0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:10px;margin-top:10px}
.card{border:1px solid #ddd;border-radius:6px;padding:6px 10px;background:#fcfcfc}.card h3{font-size:0.95em;margin:2px 0}
.card p{margin:3px 0;font-size:0.84em}.card .meaning{color:#555}.verdict{border-color:#2c7bb6;background:#f3f8fc}
img.traj{display:block;margin-top:4px;width:100%}.stat h4{margin:12px 0 2px}.stat p{margin:2px 0;font-size:0.88em}
.def{color:#555}img.panels{max-width:880px}
"""
_STYLE += GRID_STYLE


def _top_heads(result: AblationResult, alpha: float, count: int = 10) -> str:
    delta = result.heads[..., 1]
    p = result.heads[..., 4]
    q = benjamini_hochberg(p.ravel()).reshape(p.shape)
    num_layers, num_heads = result.shape
    units = [(l, h) for l in range(num_layers) for h in range(num_heads) if np.isfinite(delta[l, h])]

    def rows(units_sorted):
        return [
            [
                head_name(l, h),
                number(result.heads[l, h, 0]),
                number(delta[l, h]),
                f"[{number(result.heads[l, h, 2])}, {number(result.heads[l, h, 3])}]",
                number(p[l, h], 3),
                number(q[l, h], 3),
            ]
            for l, h in units_sorted
        ]

    header = ["head", result.metric_label, "Δ", "95% interval", "p", "q (BH)"]
    hurt = sorted(units, key=lambda u: (delta[u], u))[:count]
    helped = sorted(units, key=lambda u: (-delta[u], u))[:count]
    return (
        f"<h3>The {len(hurt)} heads whose removal hurts most</h3>"
        + table(header, rows(hurt), left=1)
        + f"<h3>The {len(helped)} heads whose removal helps most</h3>"
        + table(header, rows(helped), left=1)
    )


def _section(result: AblationResult, alpha: float) -> str:
    parts = [
        f"<h2>Mode <code>{escape(result.mode)}</code>: {escape(result.metric_label)} on {result.num_examples} examples"
        f"{' of ' + escape(result.task) if result.task else ''}</h2>"
    ]
    parts.append(_task_paragraph(result))
    n_resamples = result.config.get("n_resamples", "?")
    parts.append(
        f'<p class="note">Δ = metric with the unit disabled − baseline. Intervals: paired bootstrap over evaluation '
        f"examples ({escape(n_resamples)} resamples, percentile 95%). <b>*</b> p &lt; {alpha}; <b>**</b> also "
        f"significant after Benjamini–Hochberg correction over all {result.heads[..., 0].size} heads (FDR {alpha}). "
        "Layers and heads are numbered from 0: <code>L2 H7</code> is head 7 of layer 2.</p>"
    )
    parts.append(_delta_grid(result, alpha))
    parts.append(image(_layer_bars(result), "layer bars"))
    parts.append(
        table(
            ["layer", result.metric_label, "Δ", "95% interval", "p"],
            [
                [f"L{l}", number(r[0]), number(r[1]), f"[{number(r[2])}, {number(r[3])}]", number(r[4], 3)]
                for l, r in enumerate(result.layers)
            ],
        )
    )
    parts.append(_top_heads(result, alpha))
    parts.append(_keep_best_section(result))
    parts.append(_pruning_section(result))
    if result.config:
        parts.append("<h3>Configuration</h3>")
        parts.append(
            table(
                ["setting", "value"],
                [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in sorted(result.config.items())],
                left=2,
            )
        )
    return "\n".join(p for p in parts if p)


def _task_paragraph(result: AblationResult) -> str:
    """The task type and every metric measured (the compared one first): label, key, baseline value, definition."""
    task = f"Task: <b>{escape(result.description)}</b>. " if result.description else ""
    head = (
        f'<p class="task">{task}Baseline {escape(result.metric_label)} = '
        f"<b>{number(result.baseline)}</b>; Δ below is in this metric.</p>"
    )
    if result.trivial is not None:  # the trivial baseline beside the model's (bertwatch.core.baseline)
        head += (
            '<p class="task">Against the constant answer: '
            + "<br>".join(escape(line) for line in result.trivial.lines())
            + "</p>"
        )
    rows = []
    for m in result.metrics:
        value = result.baseline if m["name"] == result.metric else result.baseline_metrics.get(m["name"])
        rows.append([m["label"], m["name"], m.get("description", ""), number(value)])
    return head + table(["metric", "key", "definition", "baseline"], rows, left=3) if rows else head


def _keep_best_section(result: AblationResult) -> str:
    """Michel et al.'s keep-one-head table: per layer, the best head left on alone ('' when not swept)."""
    parts = []
    best = result.keep_best()
    if best:
        parts.append("<h3>Keep only the best head of a layer (Michel et al.)</h3>")
        parts.append(
            '<p class="note">For each layer, every head was tried as the only one left on; the best is '
            "shown. Picking the best of many makes its Δ optimistic.</p>"
        )
        parts.append(
            table(
                ["layer", "best head", result.metric_label, "Δ", "95% interval", "p"],
                [
                    [
                        f"L{b['layer']}",
                        head_name(b["layer"], b["head"]),
                        number(b["value"]),
                        number(b["delta"]),
                        f"[{number(b['ci_low'])}, {number(b['ci_high'])}]",
                        number(b["p"], 3),
                    ]
                    for b in best
                ],
            )
        )
    return "\n".join(parts)


def _interval(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "—"
    return f"{number(entry.get('delta'))} [{number(entry.get('ci_low'))}, {number(entry.get('ci_high'))}]"


def _pruning_section(result: AblationResult) -> str:
    """The "N% at δ" answers, the pruning orders' figure and their table ('' when not swept)."""
    if not result.pruning:
        return ""
    found = result.removable()
    lines = [escape(line) for line in answer_lines(result)]
    items = [f"<li><b>{lines[0]}</b></li>", *(f"<li>{line}</li>" for line in lines[1:])]  # the headline first
    parts = [
        "<h3>Pruning: how many heads can go?</h3>",
        "<ul>" + "".join(items) + "</ul>",
        f'<p class="note">A step holds when the {found["confidence"]:.0%} paired-bootstrap interval of Δ against '
        f"the unpruned model stays within δ = {found['delta']:g} on the harmful side; the answer is the largest "
        "share of heads pruned at a step that holds with every earlier step (docs/ablation.md). A δ smaller than "
        "what the examples resolve (one example's share of the metric, or the half-width of the interval of the "
        "step where the answer stops) cannot be shown either way: the first line then gives the answer at the δ "
        "they resolve and how many examples would resolve yours. Heads go in order "
        "of importance computed once, in the iterative order (importance recomputed after each step), and in "
        "random orders, at the same steps.</p>",
        image(b64(curves_figure(result)), "pruning curves"),
    ]
    iterative = result.pruning_iterative
    curves = result.curves_table()
    rows = []
    for j, p in enumerate(result.pruning):
        random = "—"
        if result.pruning_random and np.isfinite(curves[j + 1, 7]):
            random = f"{number(curves[j + 1, 7])} ({number(curves[j + 1, 8])} … {number(curves[j + 1, 9])})"
        rows.append(
            [
                p["pruned"],
                number(p["fraction"], 3),
                number(p["value"]),
                _interval(p),
                number(p["p"], 3),
                _interval(iterative[j] if j < len(iterative) else None),
                random,
            ]
        )
    header = [
        "heads pruned",
        "fraction",
        result.metric_label,
        "Δ [95% interval]",
        "p",
        "iterative Δ",
        "random mean Δ (range)",
    ]
    parts.append(table(header, rows))
    return "\n".join(parts)


def report_title(results: Sequence[AblationResult], training: dict[str, Any] | None = None) -> str:
    """What the page holds: "bertwatch report: training run", "… training run and ablation", "… ablation".

    Example:
        >>> report_title([], {"grids": {"entropy": {}}})
        'bertwatch report: training run'
    """
    trained = bool(training and (training.get("grids") or training.get("series")))
    parts = [name for name, present in (("training run", trained), ("ablation", bool(results))) if present]
    return "bertwatch report: " + " and ".join(parts) if parts else "bertwatch report"


def build_html(
    results: Sequence[AblationResult],
    training: dict[str, Any] | None = None,
    alpha: float = 0.05,
    title: str | None = None,
    extra_sections: Sequence[str] = (),
    glance: Sequence[tuple[str, str]] = (),
) -> str:
    """One self-contained HTML page (base64 PNGs, no scripts, every user string escaped).

    First what happened to the heads (the run at a glance, the heads that changed most, the heads the loss depends
    on, the ablation's verdict); then per ablation mode the Δ heatmap with significance marks, layer bars, top
    heads, keep-best table, pruning curves and the configuration; the stability alerts; every training statistic by
    family; then ``extra_sections`` (trusted HTML fragments, e.g. the linguistic analyses).

    Args:
        results: ablation results, one per mode (may be empty).
        training: ``read_run``'s training part (grids, series, probe, alerts, source), or None.
        alpha: significance level of the marks.
        title: the page title; by default :func:`report_title`.
        extra_sections: HTML fragments appended as they are.
        glance: more rows of the first table, ``(name, HTML)`` (trusted), e.g. what an extra section found.

    Returns:
        The page as text.
    """
    title = title or report_title(results, training)
    body = [f"<h1>{escape(title)}</h1>"]
    if not results and not training and not extra_sections:
        body.append("<p>No ablation results and no training statistics were found.</p>")
    body.append(summary_section(results, training, glance))
    for result in results:
        body.append(_section(result, alpha))
    if training:
        body.append(alerts_section(training.get("alerts")))  # stability alerts: bertwatch.report.alerts
        body.append(details_section(training))
    body.extend(extra_sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )
