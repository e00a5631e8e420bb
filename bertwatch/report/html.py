"""The self-contained HTML report of ablation results and training-time grids.

It embeds its figures as base64 PNG and carries no scripts or external assets, so it opens offline; every user
string is escaped.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.significance import benjamini_hochberg
from bertwatch.report.figures import grid_heatmap, png_bytes
from bertwatch.report.figures import pyplot as _pyplot
from bertwatch.report.pruning import answer_lines, curves_figure
from bertwatch.report.result import FIELDS, AblationResult, atomic_write


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


def _b64(png: bytes) -> str:
    return base64.b64encode(png).decode("ascii")


def _png(figure) -> str:
    return _b64(png_bytes(figure))


def _marks(p: np.ndarray, q: np.ndarray, alpha: float) -> np.ndarray:
    """'**' where the BH-adjusted q < alpha, '*' where only the raw p < alpha, '' otherwise."""
    marks = np.full(p.shape, "", dtype=object)
    marks[np.nan_to_num(p, nan=1.0) < alpha] = "*"
    marks[np.nan_to_num(q, nan=1.0) < alpha] = "**"
    return marks


def _delta_heatmap(result: AblationResult, alpha: float) -> str:
    """Δ per head on a diverging scale (blue = better), with the significance marks of :func:`_marks`."""
    p = result.heads[..., 4]
    q = benjamini_hochberg(p.ravel()).reshape(p.shape)
    png = grid_heatmap(
        result.heads[..., 1],
        f"Δ {result.metric} when one head is disabled ({result.mode})",
        labels=_marks(p, q, alpha).tolist(),
        center=0.0,
        colorbar_label=f"Δ {result.metric} (blue = better)",
        cmap="RdBu",
    )
    return _b64(png)


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


def _grid_figure(grid: np.ndarray, title: str, diverging: bool = False) -> str:
    return _b64(grid_heatmap(grid, title, center=0.0 if diverging else None))


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
            [
                f"{l + 1}-{h + 1}",
                f"{l}:{h}",
                _fmt(result.heads[l, h, 0]),
                _fmt(delta[l, h]),
                f"[{_fmt(result.heads[l, h, 2])}, {_fmt(result.heads[l, h, 3])}]",
                _fmt(p[l, h], 3),
                _fmt(q[l, h], 3),
            ]
            for l, h in units_sorted
        ]

    header = ["layer-head (from 1)", "index (from 0)", result.metric, "Δ", "95% interval", "p", "q (BH)"]
    hurt = sorted(units, key=lambda u: (delta[u], u))[:count]
    helped = sorted(units, key=lambda u: (-delta[u], u))[:count]
    return (
        f"<h3>The {len(hurt)} heads whose removal hurts most</h3>"
        + _table(header, rows(hurt), left=2)
        + f"<h3>The {len(helped)} heads whose removal helps most</h3>"
        + _table(header, rows(helped), left=2)
    )


def _section(result: AblationResult, alpha: float) -> str:
    parts = [
        f"<h2>Mode <code>{_e(result.mode)}</code>: {_e(_label(result))} on {result.num_examples} examples"
        f"{' of ' + _e(result.task) if result.task else ''}</h2>"
    ]
    parts.append(_task_paragraph(result))
    n_resamples = result.config.get("n_resamples", "?")
    parts.append(
        f'<p class="note">Δ = metric with the unit disabled − baseline. Intervals: paired bootstrap over evaluation '
        f"examples ({_e(n_resamples)} resamples, percentile 95%). <b>*</b> p &lt; {alpha}; <b>**</b> also "
        f"significant after Benjamini–Hochberg correction over all {result.heads[..., 0].size} heads (FDR {alpha}). "
        "Layers and heads are numbered from 1 in figures, from 0 in files.</p>"
    )
    parts.append(_img(_delta_heatmap(result, alpha), "delta heatmap"))
    parts.append(_img(_layer_bars(result), "layer bars"))
    parts.append(
        _table(
            ["layer", result.metric, "Δ", "95% interval", "p"],
            [
                [l + 1, _fmt(r[0]), _fmt(r[1]), f"[{_fmt(r[2])}, {_fmt(r[3])}]", _fmt(r[4], 3)]
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
            _table(
                ["setting", "value"],
                [[k, json.dumps(v) if not isinstance(v, str) else v] for k, v in sorted(result.config.items())],
                left=2,
            )
        )
    return "\n".join(p for p in parts if p)


def _label(result: AblationResult) -> str:
    return result.metrics[0]["label"] if result.metrics else result.metric


def _task_paragraph(result: AblationResult) -> str:
    """The task type and every metric measured (the compared one first): label, key, baseline value, definition."""
    task = f"Task: <b>{_e(result.description)}</b>. " if result.description else ""
    head = (
        f'<p class="task">{task}Baseline {_e(_label(result))} = '
        f"<b>{_fmt(result.baseline)}</b>; Δ below is in this metric.</p>"
    )
    rows = []
    for m in result.metrics:
        value = result.baseline if m["name"] == result.metric else result.baseline_metrics.get(m["name"])
        rows.append([m["label"], m["name"], m.get("description", ""), _fmt(value)])
    return head + _table(["metric", "key", "definition", "baseline"], rows, left=3) if rows else head


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
            _table(
                ["layer", "best head", result.metric, "Δ", "95% interval", "p"],
                [
                    [
                        b["layer"] + 1,
                        b["head"] + 1,
                        _fmt(b["value"]),
                        _fmt(b["delta"]),
                        f"[{_fmt(b['ci_low'])}, {_fmt(b['ci_high'])}]",
                        _fmt(b["p"], 3),
                    ]
                    for b in best
                ],
            )
        )
    return "\n".join(parts)


def _interval(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "—"
    return f"{_fmt(entry.get('delta'))} [{_fmt(entry.get('ci_low'))}, {_fmt(entry.get('ci_high'))}]"


def _pruning_section(result: AblationResult) -> str:
    """The "N% at δ" answers, the pruning orders' figure and their table ('' when not swept)."""
    if not result.pruning:
        return ""
    found = result.removable()
    parts = [
        "<h3>Pruning: how many heads can go?</h3>",
        "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in answer_lines(result)) + "</ul>",
        f'<p class="note">A step holds when the {found["confidence"]:.0%} paired-bootstrap interval of Δ against '
        f"the unpruned model stays within δ = {found['delta']:g} on the harmful side; the answer is the largest "
        "share of heads pruned at a step that holds with every earlier step (docs/ablation.md). Heads go in order "
        "of importance computed once, in the iterative order (importance recomputed after each step), and in "
        "random orders, at the same steps.</p>",
        _img(_b64(curves_figure(result)), "pruning curves"),
    ]
    iterative = result.pruning_iterative
    table = result.curves_table()
    rows = []
    for j, p in enumerate(result.pruning):
        random = "—"
        if result.pruning_random and np.isfinite(table[j + 1, 7]):
            random = f"{_fmt(table[j + 1, 7])} ({_fmt(table[j + 1, 8])} … {_fmt(table[j + 1, 9])})"
        rows.append(
            [
                p["pruned"],
                _fmt(p["fraction"], 3),
                _fmt(p["value"]),
                _interval(p),
                _fmt(p["p"], 3),
                _interval(iterative[j] if j < len(iterative) else None),
                random,
            ]
        )
    header = [
        "heads pruned",
        "fraction",
        result.metric,
        "Δ [95% interval]",
        "p",
        "iterative Δ",
        "random mean Δ (range)",
    ]
    parts.append(_table(header, rows))
    return "\n".join(parts)


def probe_note(probe: dict[str, Any] | None) -> str:
    """The sentence saying what the training-time statistics measured: how long each probe example was allowed
    to be and how many were cut (``bertwatch.tb.metadata.probe_info``)."""
    if not probe:
        return "This run does not record the probe length (written before bertwatch recorded it)."
    examples, longest, length, cut = probe["examples"], probe["longest"], probe["max_length"], probe["truncated"]
    if length is None:
        return f"Probe set: {examples} examples measured whole, as tokenized (longest {longest} tokens)."
    if not cut:
        return f"Probe set: {examples} examples measured whole (longest {longest} tokens; limit {length} tokens)."
    return (
        f"Probe set: {examples} examples, measured up to {length} tokens; {cut} of them were longer and were cut "
        f"to their first {length} tokens."
    )


def _training_section(training: dict[str, Any]) -> str:
    parts = [
        "<h2>During training: first and last step of each head statistic</h2>",
        f'<p class="note">Read from {_e(training.get("source", "the run"))}.</p>',
        f'<p class="note" id="probe-length">{_e(probe_note(training.get("probe")))}</p>',
    ]
    for stat, entry in sorted(training.get("grids", {}).items()):
        first, last = entry["first"], entry["last"]
        figures = [
            (_grid_figure(first[1], f"{stat}, step {first[0]}"), f"{stat} at step {first[0]}"),
            (_grid_figure(last[1], f"{stat}, step {last[0]}"), f"{stat} at step {last[0]}"),
        ]
        if first[0] != last[0]:
            figures.append(
                (
                    _grid_figure(np.asarray(last[1]) - np.asarray(first[1]), f"{stat}: last − first", diverging=True),
                    f"{stat} change",
                )
            )
        cells = "".join(f"<figure>{_img(b64, alt)}<figcaption>{_e(alt)}</figcaption></figure>" for b64, alt in figures)
        parts.append(f'<h3>{_e(stat)}</h3><div class="grids">{cells}</div>')
    parts.append(_norm_comparison(training.get("grids", {})))
    parts.append(_series_section(training.get("series", {})))
    return "\n".join(parts)


def _series_figure(name: str, entry: dict[str, Any]) -> str:
    """One line per named value over the probe steps; ``{key}_uniform`` dashed in its key's colour."""
    plt = _pyplot()
    names, steps, values = entry["names"], entry["steps"], np.asarray(entry["values"])
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    colors: dict[str, Any] = {}
    for k, key in enumerate(names):
        if key.endswith("_uniform"):
            continue
        (line,) = ax.plot(steps, values[:, k], marker="o", ms=3, label=key)
        colors[key] = line.get_color()
    for k, key in enumerate(names):
        base = key[: -len("_uniform")]
        if key.endswith("_uniform"):
            ax.plot(steps, values[:, k], ls="--", lw=1, color=colors.get(base, "grey"))
    ax.set_xlabel("training step")
    ax.set_title(name + (" (dashed: a uniform head)" if len(colors) < len(names) else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def _series_section(series: dict[str, dict[str, Any]]) -> str:
    """Each named-values series over the probe steps (pattern-class shares, word-class attention), with its
    first and last values."""
    parts = []
    for name, entry in sorted(series.items()):
        if not entry["steps"] or not entry["names"]:
            continue
        first, last = entry["values"][0], entry["values"][-1]
        rows = [[key, _fmt(a, 3), _fmt(b, 3)] for key, a, b in zip(entry["names"], first, last)]
        steps = entry["steps"]
        parts.append(
            f"<h3>{_e(name)} over training</h3>"
            + (f'<p class="note">{_e(entry["description"])}</p>' if entry.get("description") else "")
            + f"<figure>{_img(_series_figure(name, entry), name)}</figure>"
            + _table(["value", f"step {steps[0]}", f"step {steps[-1]}"], rows)
        )
    return "\n".join(parts)


#: (column label, suffix of the statistic's name) of the contribution-based twins of a weight-based mass.
_TWINS = (("norm", "_norm"), ("ALTI head", "_alti"), ("ALTI layer", "_alti_layer"), ("rollout", "_rollout"))


def _norm_comparison(grids: dict[str, Any]) -> str:
    """Weight-based [CLS]/[SEP]/punctuation masses next to their contribution-based twins (Kobayashi et al. 2020's
    norms, ALTI per head and per layer, rollout), layer means at the last step (a ``[layers, 1]`` grid is its layer's
    value)."""
    columns = []  # (header, statistic)
    for weight in ("cls_mass", "sep_mass", "punct_mass"):
        twins = [(label, weight + suffix) for label, suffix in _TWINS if weight + suffix in grids]
        if weight in grids and twins:
            columns += [(f"{weight} (weight)", weight)] + [(f"{weight} ({label})", n) for label, n in twins]
    if not columns:
        return ""
    mixing = any(name.endswith(("_alti", "_alti_layer", "_rollout")) for _, name in columns)
    step, last = grids[columns[1][1]]["last"]
    layers = np.asarray(last).shape[0]
    rows = []
    for layer in range(layers):
        rows.append([layer] + [np.nanmean(np.asarray(grids[name]["last"][1])[layer]) for _, name in columns])
    header = ["layer"] + [label for label, _ in columns]
    title = "Weight-based vs contribution-based masses" if mixing else "Weight-based vs norm-based masses"
    note = (
        "Norm-based: the share of Σ A·‖f(x)‖ on those keys, f(x) the value vector through the head's slice of the "
        "output projection (Kobayashi et al. 2020). A large weight on a small vector moves little."
    )
    if mixing:
        note += (
            " ALTI: each token's contribution to the attention block's output with the residual and LayerNorm "
            "counted, by L1 distance (Ferrando et al. 2022), inside each head or for the whole layer; rollout: "
            "attention composed over layers with the residual as ½(Ā + I) (Abnar & Zuidema 2020). A weight share "
            "far above the contribution share is Clark's 'no-op' parking, not mixing."
        )
    return f'<h3>{title}, layer means at step {_e(step)}</h3><p class="note">{_e(note)}</p>' + _table(
        header, [[r[0]] + [_fmt(v, 3) for v in r[1:]] for r in rows]
    )


def build_html(
    results: Sequence[AblationResult],
    training: dict[str, Any] | None = None,
    alpha: float = 0.05,
    title: str = "bertwatch ablation report",
    extra_sections: Sequence[str] = (),
) -> str:
    """One self-contained HTML page: per mode the Δ heatmap with significance marks, layer bars, top heads,
    keep-best table, pruning curve and the configuration; then training-time grids when ``training`` is given,
    then ``extra_sections`` (trusted HTML fragments, e.g. the linguistic analyses)."""
    body = [f"<h1>{_e(title)}</h1>"]
    if not results and not training:
        body.append("<p>No ablation results and no training statistics were found.</p>")
    for result in results:
        body.append(_section(result, alpha))
    if training and (training.get("grids") or training.get("series")):
        body.append(_training_section(training))
    body.extend(extra_sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
