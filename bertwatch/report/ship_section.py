"""The report's section for ``bertwatch ship``: the shipping table of ``ship.json``, one row per variant, one line
of reading per variant against fp32, and at which batch the metric was measured with the predictions another batching
changes; the same columns and readings ``bertwatch ship`` prints (their one home)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertwatch.core.baseline import ConstantComparison, improvement_note
from bertwatch.core.resolution import Resolution, typical_half_width
from bertwatch.core.task_names import metric_label

__all__ = [
    "SHIP_FILE",
    "batch_phrase",
    "batch_words",
    "batching_lines",
    "cause_lines",
    "constant_lines",
    "layer_columns",
    "mixed_offer",
    "outlier_lines",
    "ship_columns",
    "ship_files",
    "ship_metric",
    "ship_glance",
    "ship_readings",
    "ship_resolution",
    "ship_section",
]

#: The result file ``bertwatch ship`` writes in its output folder.
SHIP_FILE = "ship.json"
#: How ``bertwatch ship`` batched the metric when ``ship.json`` did not record it yet (its first version).
_UNRECORDED = {"batch_size": 32, "padded": True, "sorted": True}


def ship_files(root: Path) -> list[Path]:
    """``ship.json`` files in ``root`` and the folders below it, sorted."""
    if root.is_file():
        return [root] if root.name == SHIP_FILE else []
    return sorted(root.rglob(SHIP_FILE)) if root.is_dir() else []


def _defined(value: Any) -> bool:
    return value is not None and value == value  # None in JSON, NaN in memory: an undefined interval


def _change(row: Mapping[str, Any]) -> str:
    if row["name"] == "fp32":
        return "(reference)"
    if not (_defined(row["ci_low"]) and _defined(row["ci_high"])):
        return f"{row['delta']:+.4f}"
    return f"{row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"


def ship_metric(result: Mapping[str, Any]) -> str:
    """The metric of ``ship.json`` as every line and table names it (``"F1"`` for ``"f1"``:
    :func:`bertwatch.core.task_names.metric_label`, as the ablation and the plugin name it)."""
    return metric_label(str(result["metric"]))


def _batching(result: Mapping[str, Any], figure: str = "metric") -> Mapping[str, Any]:
    """How a figure's examples were batched (``ship.json``'s ``batching``), the first version's when unrecorded."""
    return (result.get("batching") or {}).get(figure) or _UNRECORDED


def batch_words(batching: Mapping[str, Any]) -> str:
    """How a figure's examples were batched, in words (``ship.json``'s ``batching`` entries).

    Example:
        >>> batch_words({"batch_size": 1, "padded": False, "sorted": False})
        'one request at a time (batch 1, each example at its own length, no padding)'
        >>> batch_words({"batch_size": 32, "padded": True, "sorted": True})
        'in length-sorted batches of 32, each padded to its longest example'
    """
    size = int(batching["batch_size"])
    if size == 1:
        return "one request at a time (batch 1, each example at its own length, no padding)"
    if batching["sorted"]:
        return f"in length-sorted batches of {size}, each padded to its longest example"
    return f"in batches of {size} in the evaluation set's order, each padded to its longest example"


def batch_phrase(batching: Mapping[str, Any]) -> str:
    """``batch_words`` in a few words, for a reading or a line.

    Example:
        >>> batch_phrase({"batch_size": 8, "sorted": False})
        'at batch 8'
    """
    size = int(batching["batch_size"])
    if size == 1:
        return "one request at a time"
    return f"in sorted batches of {size}" if batching["sorted"] else f"at batch {size}"


def _column(batching: Mapping[str, Any]) -> str:
    """The batch in a column header: ``batch 1``, ``batch 8``, ``sorted batch 32``."""
    return f"{'sorted ' if batching['sorted'] else ''}batch {int(batching['batch_size'])}"


def batching_lines(result: Mapping[str, Any]) -> list[str]:
    """At which batch the metric was measured, and for every variant how many predictions differ when the same
    examples run in length-sorted batches of 32 (dynamic INT8 computes its activation scales per batch)."""
    served, metric = _batching(result), ship_metric(result)
    rows = [row for row in result["variants"] if row.get("sorted_batches")]
    if not rows:
        return [f"{metric} measured {batch_words(served)}; this ship.json records no other batching"]
    other = _batching(result, "sorted_batches")
    n, short = int(result["num_examples"]), batch_phrase(served)
    lines = [f"{metric} measured {batch_words(served)}; run again {batch_words(other)}:"]
    same = [row["name"] for row in rows if row["sorted_batches"]["changed"] == 0]
    for row in rows:
        if row["sorted_batches"]["changed"]:
            lines.append(
                f"  {row['name']}: {row['sorted_batches']['changed']} of {n} predictions differ; {metric} "
                f"{row['sorted_batches']['value']:.4f} in these batches ({row['value']:.4f} {short})"
            )
    if same:
        lines.append(f"  {', '.join(same)}: the same predictions")
    if len(same) < len(rows):
        lines.append(
            "dynamic INT8 computes each activation's scale from the whole batch at run time, so an INT8 prediction "
            f"depends on the examples batched with it; the table's {metric} is measured at the serving batch "
            "(--serve-batch)"
        )
    return lines


def _constant(result: Mapping[str, Any]) -> ConstantComparison | None:
    """The variants against the constant answer, from ``ship.json`` (None in a file written before it)."""
    found = result.get("trivial_baseline")
    return ConstantComparison.from_json(found) if found else None


def constant_lines(result: Mapping[str, Any]) -> list[str]:
    """The verdict against the constant answer (:mod:`bertwatch.core.baseline`) and the share of each predicted
    class of fp32, said first when the model is no better than it; [] for a ``ship.json`` without it."""
    found = _constant(result)
    return found.lines() if found is not None else []


def _vs_constant(row: Mapping[str, Any]) -> str:
    found = row.get("vs_constant") or {}
    if not (_defined(found.get("delta")) and _defined(found.get("ci_low")) and _defined(found.get("ci_high"))):
        return "—"
    return f"{found['delta']:+.4f} [{found['ci_low']:+.4f}, {found['ci_high']:+.4f}]" + (
        " no better" if found.get("no_better") else ""
    )


def ship_columns(result: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """The table's columns: (header, cells, alignment) per column, one cell per variant; with the trivial
    baseline, each variant's metric minus the constant answer's beside its change against fp32."""
    rows = result["variants"]
    level = f"{result['confidence']:.0%}"
    batch = result["timing"]["batch_size"]
    found = _constant(result)
    beside = []
    if found is not None and found.value is not None:
        name = f"vs always '{found.constant_name}' {found.value:.4f} [{level} CI]"
        beside = [(name, [_vs_constant(r) for r in rows], "<")]
    return [
        ("variant", [r["name"] for r in rows], "<"),
        ("file", [r["file"] for r in rows], "<"),
        ("size MB", [f"{r['size_mb']:.1f}" if r["size_mb"] >= 1 else f"{r['size_mb']:.3f}" for r in rows], ">"),
        (f"{ship_metric(result)}, {_column(_batching(result))}", [f"{r['value']:.4f}" for r in rows], ">"),
        (f"change vs fp32 [{level} CI]", [_change(r) for r in rows], "<"),
        *beside,
        ("same prediction", [f"{r['agreement']:.1%}" for r in rows], ">"),
        ("batch 1 ms", [f"{r['latency_ms']:.2f}" for r in rows], ">"),
        (f"batch {batch} ex/s", [f"{r['throughput']:.1f}" for r in rows], ">"),
    ]


def _times(ratio: float, word: str, opposite: str) -> str:
    return f"{ratio:.2f}x {word}" if ratio >= 1 else f"{1 / ratio:.2f}x {opposite}"


def _reading(row: Mapping[str, Any], reference: Mapping[str, Any], metric: str, level: str, batched: str) -> str:
    """One sentence on a variant against the reference: size, speed, metric change, unchanged predictions."""
    interval = (
        f" ({level} CI {row['ci_low']:+.4f} to {row['ci_high']:+.4f})"
        if _defined(row["ci_low"]) and _defined(row["ci_high"])
        else ""
    )
    return (
        f"{row['name']}: {_times(reference['size_mb'] / row['size_mb'], 'smaller', 'larger')}; "
        f"{_times(reference['latency_ms'] / row['latency_ms'], 'faster', 'slower')} at batch 1, "
        f"{_times(row['throughput'] / reference['throughput'], 'faster', 'slower')} at batch 32; "
        f"{metric} {batched} {row['delta']:+.4f}{interval}"
        f"{improvement_note(row['delta'], row['ci_low'], row['ci_high'])}; "
        f"{row['agreement']:.1%} of predictions unchanged"
    )


def ship_readings(result: Mapping[str, Any]) -> list[str]:
    """One sentence per variant but fp32: size, speed and metric change against fp32, predictions unchanged."""
    reference = result["variants"][0]
    level = f"{result['confidence']:.0%}"
    batched = batch_phrase(_batching(result))
    return [_reading(row, reference, ship_metric(result), level, batched) for row in result["variants"][1:]]


def ship_resolution(result: Mapping[str, Any]) -> list[str]:
    """What the readings' intervals can resolve (:mod:`bertwatch.core.resolution`), said before them:
    ``["resolution: 500 examples: one example is 0.002; the 95% intervals are about ±0.0061"]``, over the variants'
    intervals against fp32 ([] when none has one)."""
    rows = [r for r in result["variants"][1:] if _defined(r["ci_low"]) and _defined(r["ci_high"])]
    if not rows:
        return []
    n, metric = int(result["num_examples"]), str(result["metric"])
    one, how = result.get("one_example"), str(result.get("one_example_how") or "")
    if "one_example" not in result and metric == "accuracy":  # a ship.json written before it recorded the share
        one, how = 1.0 / n, "flip"
    width = typical_half_width([r["ci_low"] for r in rows], [r["ci_high"] for r in rows])
    found = Resolution(n, metric, one, how, width, "the variants against fp32", result["confidence"])
    return [f"resolution: {found.clause()}"]


def outlier_lines(result: Mapping[str, Any], count: int = 3) -> list[str]:
    """The ``count`` layers with the largest feed-forward outputs (else residual stream) of the float32 model, with
    their kurtosis, outlier dimensions and the share of the outlier mass on delimiter tokens (empty without)."""
    outliers = result.get("outliers") or {}
    where = "ffn" if outliers.get("ffn") else "residual"
    layers = outliers.get(where) or []
    if not layers:
        return []
    what = "feed-forward outputs" if where == "ffn" else "residual stream"
    ranked = sorted(range(len(layers)), key=lambda layer: -(layers[layer]["inf_norm"] or 0))[:count]
    lines = [f"activation outliers of the fp32 model ({outliers['examples']} examples), the largest {what}:"]
    for layer in ranked:
        r = layers[layer]
        share = r["delimiter_share"]
        on = (
            "no component reaches 6"
            if share is None or share != share
            else f"{share:.0%} of the outlier mass on [CLS]/[SEP]/punctuation"
        )
        lines.append(
            f"  layer {layer}: max |x| {r['inf_norm']:.1f}, kurtosis {r['kurtosis']:.0f}, "
            f"{r['outlier_share']:.2%} of components >= 6, top dimensions {r['top_dims']}; {on}"
        )
    return lines


def _ffn(result: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]]]:
    """(what, per-layer outlier statistics): the feed-forward outputs, else the residual stream."""
    outliers = result.get("outliers") or {}
    where = "ffn" if outliers.get("ffn") else "residual"
    return ("feed-forward output" if where == "ffn" else "residual stream"), outliers.get(where) or []


def _share(value: Any) -> str:
    return "n/a" if not _defined(value) else f"{value + 0.0:.0%}".replace("-0%", "0%")


def layer_columns(result: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """The per-layer table of where the INT8 error comes from (empty without an ``attribution``): each layer's
    error quantized alone, the share of the full INT8 error that keeping it in fp32 removes, and its outliers."""
    attribution = result.get("attribution")
    if not attribution:
        return []
    rows = attribution["layers"]
    what, outliers = _ffn(result)
    stat = lambda layer, key: outliers[layer][key] if layer < len(outliers) else None  # noqa: E731
    return [
        ("layer", [str(r["layer"]) for r in rows], ">"),
        ("only this layer INT8: error", [f"{r['only']['mean_max_abs']:.3f}" for r in rows], ">"),
        ("predictions changed", [f"{r['only']['changed']:.1%}" for r in rows], ">"),
        ("this layer fp32: INT8 error removed", [_share(r["recovery"]) for r in rows], ">"),
        (f"{what} max |x|", [f"{stat(r['layer'], 'inf_norm') or 0:.1f}" for r in rows], ">"),
        ("kurtosis", [f"{stat(r['layer'], 'kurtosis') or 0:.0f}" for r in rows], ">"),
        ("outliers on delimiters", [_share(stat(r["layer"], "delimiter_share")) for r in rows], ">"),
    ]


def _heads(heads: list[Mapping[str, Any]]) -> str:
    names = ", ".join(f"{h['layer']}-{h['head']}" for h in heads)
    weights = " / ".join(_share(h["by_weight"]) for h in heads)
    norms = " / ".join(_share(h["by_norm"]) for h in heads)
    by_norm = f" (by norm: {norms})" if any(_defined(h["by_norm"]) for h in heads) else ""
    return f"{names} put {weights} of their attention on [CLS], [SEP] and punctuation{by_norm}"


def cause_lines(result: Mapping[str, Any]) -> list[str]:
    """Where the INT8 loss comes from, in words: the layer whose fp32 removes the most error, its outliers, and the
    heads that park their attention on delimiters in it and after it (empty without an ``attribution``)."""
    attribution = result.get("attribution")
    if not attribution:
        return []
    full = attribution["int8"]
    lines = [
        f"where the INT8 error comes from ({attribution['examples']} examples {batch_phrase(_batching(result, 'attribution'))}; "
        "error = mean over examples of the "
        f"largest |logit change| against fp32; every layer INT8: {full['mean_max_abs']:.3f}, "
        f"{full['changed']:.1%} of predictions changed):"
    ]
    layer = attribution.get("kept_fp32")
    if layer is None:
        return lines + ["no single layer kept in fp32 removes INT8 error: it is spread over the layers"]
    row = next(r for r in attribution["layers"] if r["layer"] == layer)
    what, outliers = _ffn(result)
    lines.append(
        f"INT8 error comes mostly from layer {layer}: quantized alone it gives {row['only']['mean_max_abs']:.3f} of the "
        f"{full['mean_max_abs']:.3f}, and keeping it in fp32 removes {_share(row['recovery'])} of it"
    )
    if layer < len(outliers):
        stats = outliers[layer]
        lines.append(
            f"Its {what} reaches {stats['inf_norm']:.0f} (kurtosis {stats['kurtosis']:.0f}), "
            f"{_share(stats['delimiter_share'])} of the outlier mass on [CLS], [SEP] and punctuation"
        )
    if attribution.get("heads"):
        lines.append(f"Its heads (layer-head) {_heads(attribution['heads'])}")
    later = attribution.get("heads_from_layer") or []
    if later and [(h["layer"], h["head"]) for h in later] != [(h["layer"], h["head"]) for h in attribution["heads"]]:
        lines.append(f"From layer {layer} on, the heads {_heads(later)}")
    return lines


def _interval(row: Mapping[str, Any]) -> str:
    return f"{row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"


def mixed_offer(result: Mapping[str, Any]) -> str | None:
    """Whether to ship the mixed variant (INT8, one layer in fp32): offered when INT8's interval against fp32 lies
    below 0 and the mixed variant's does not (it recovers the metric); None without a mixed variant."""
    rows = {row["name"]: row for row in result["variants"]}
    layer = (result.get("attribution") or {}).get("kept_fp32")
    mixed = next((r for name, r in rows.items() if layer is not None and name.startswith("int8, layer")), None)
    if mixed is None or "int8" not in rows:
        return None
    int8, fp32, metric = rows["int8"], rows["fp32"], ship_metric(result)
    batched = batch_phrase(_batching(result))
    cost = (
        f"{fp32['latency_ms'] / mixed['latency_ms']:.2f}x faster than fp32 at batch 1 "
        f"(int8 {fp32['latency_ms'] / int8['latency_ms']:.2f}x)"
    )
    if not (_defined(int8["ci_high"]) and _defined(mixed["ci_high"])):
        return None
    if int8["ci_high"] >= 0:
        return (
            f"not needed: INT8's {metric} change {batched} {_interval(int8)} is within what these examples can "
            "measure; "
            f"{mixed['name']} ({_interval(mixed)}, {mixed['agreement']:.1%} unchanged) is measured for the record"
        )
    if mixed["ci_high"] >= 0:
        return (
            f"offered: {mixed['name']} recovers the {metric} {batched} ({_interval(mixed)} against INT8's "
            f"{_interval(int8)}), {cost}"
        )
    return (
        f"{mixed['name']} does not recover the {metric} {batched} ({_interval(mixed)} against INT8's {_interval(int8)})"
    )


def _html_table(columns: list[tuple[str, list[str], str]], bold_row: int | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in columns)
    cell = lambda text, i: f"<td><b>{text}</b></td>" if i == bold_row else f"<td>{text}</td>"  # noqa: E731
    rows = "".join(
        "<tr>" + "".join(cell(html.escape(cells[i]), i) for _, cells, _ in columns) + "</tr>"
        for i in range(len(columns[0][1]))
    )
    return f"<table><tr>{head}</tr>{rows}</table>"


def _cause_html(result: Mapping[str, Any]) -> str:
    """The section's part on where the INT8 error comes from: the sentences, the per-layer table, the offer; the
    outlier lines alone for a ``ship.json`` without an attribution."""
    lines = cause_lines(result)
    if not lines:
        outliers = "".join(f"<div>{html.escape(line)}</div>" for line in outlier_lines(result))
        return f"<p>{outliers}</p>" if outliers else ""
    attribution = result["attribution"]
    sentences = "".join(f"<li>{html.escape(line)}</li>" for line in lines[1:])
    offer = mixed_offer(result)
    layers = [row["layer"] for row in attribution["layers"]]
    worst = layers.index(attribution["kept_fp32"]) if attribution.get("kept_fp32") in layers else None
    full = attribution["int8"]
    return (
        "<h3>Where the INT8 error comes from</h3>"
        f"<p>Each layer measured on the first {int(attribution['examples'])} examples "
        f"{html.escape(batch_words(_batching(result, 'attribution')))}, in two INT8 copies: only "
        "this layer INT8 (every other node fp32), and this layer fp32 (every other node INT8). Error: the mean over "
        f"examples of the largest |logit change| against fp32; with every layer INT8 it is {full['mean_max_abs']:.3f} "
        f"({full['changed']:.1%} of predictions changed).</p>"
        f"<ul>{sentences}</ul>{_html_table(layer_columns(result), worst)}"
        + (f"<p><b>INT8 with one layer in fp32</b>: {html.escape(offer)}.</p>" if offer else "")
    )


def _batching_html(result: Mapping[str, Any]) -> str:
    """``batching_lines`` as a paragraph: the first line, its variants as a list, the cause."""
    lines = [line[0].upper() + line[1:] for line in batching_lines(result)]
    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines if line.startswith("  "))
    rest = [html.escape(line) for line in lines[1:] if not line.startswith("  ")]
    return (
        f"<h3>At which batch it was measured</h3><p>{html.escape(lines[0])}</p>"
        + (f"<ul>{items}</ul>" if items else "")
        + "".join(f"<p>{line}.</p>" for line in rest)
    )


def ship_glance(path: Path) -> tuple[str, str]:
    """The first table's row of a ship.json: INT8 against fp32 in one sentence, linked to its section (HTML)."""
    result = json.loads(path.read_text(encoding="utf-8"))
    found = _constant(result)
    if found is not None and found.no_better():
        return "will it ship", f'<a href="#{_anchor(path)}"><b>{html.escape(found.sentence())}</b></a>'
    readings = ship_readings(result)
    int8 = next((r for r in readings if r.startswith("int8:")), readings[0] if readings else "fp32 only")
    return "will it ship", f'<a href="#{_anchor(path)}">{html.escape(int8)}</a>'


def _anchor(path: Path) -> str:
    """The HTML id of a ship.json's section."""
    return "ship-" + "".join(c if c.isalnum() else "-" for c in path.parent.name)


def ship_section(path: Path) -> str:
    """An HTML fragment (every value escaped): what was measured, the table, the readings, and where the INT8
    error comes from."""
    result = json.loads(path.read_text(encoding="utf-8"))
    runtime = result["runtime"]
    source = result.get("task") or result.get("data") or "the evaluation set"
    removed = result.get("removed_heads")
    pruned = f"; {sum(len(h) for h in removed.values())} heads removed in the pruned variants" if removed else ""
    readings = "".join(f"<li>{html.escape(line)}</li>" for line in ship_resolution(result) + ship_readings(result))
    first = constant_lines(result)
    verdict = (
        f'<p class="constant"><b>{html.escape(first[0])}</b>'
        + "".join(f"<br>{html.escape(line)}" for line in first[1:])
        + "</p>"
        if first
        else ""
    )
    return (
        f'<h2 id="{_anchor(path)}">Will it ship? {html.escape(str(result.get("checkpoint", path.parent.name)))} in '
        f"ONNX Runtime</h2>{verdict}"
        f"<p>{int(result['num_examples'])} examples of {html.escape(str(source))}, {html.escape(ship_metric(result))} "
        f"{html.escape(batch_phrase(_batching(result)))} with its paired-bootstrap {result['confidence']:.0%} interval "
        "against fp32; ONNX Runtime "
        f"{html.escape(str(runtime['onnxruntime']))} on the CPU{html.escape(pruned)} "
        f"(<code>{html.escape(str(path))}</code>).</p>"
        f"{_html_table(ship_columns(result))}<ul>{readings}</ul>{_batching_html(result)}" + _cause_html(result)
    )
