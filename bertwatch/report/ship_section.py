"""The report's section for ``bertwatch ship``: the shipping table of ``ship.json``, one row per variant, and one line
of reading per variant against fp32; the same columns and readings ``bertwatch ship`` prints (their one home)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SHIP_FILE", "outlier_lines", "ship_columns", "ship_files", "ship_readings", "ship_section"]

#: The result file ``bertwatch ship`` writes in its output folder.
SHIP_FILE = "ship.json"


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


def ship_columns(result: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """The table's columns: (header, cells, alignment) per column, one cell per variant."""
    rows = result["variants"]
    level = f"{result['confidence']:.0%}"
    batch = result["timing"]["batch_size"]
    return [
        ("variant", [r["name"] for r in rows], "<"),
        ("file", [r["file"] for r in rows], "<"),
        ("size MB", [f"{r['size_mb']:.1f}" if r["size_mb"] >= 1 else f"{r['size_mb']:.3f}" for r in rows], ">"),
        (result["metric"], [f"{r['value']:.4f}" for r in rows], ">"),
        (f"change vs fp32 [{level} CI]", [_change(r) for r in rows], "<"),
        ("same prediction", [f"{r['agreement']:.1%}" for r in rows], ">"),
        ("batch 1 ms", [f"{r['latency_ms']:.2f}" for r in rows], ">"),
        (f"batch {batch} ex/s", [f"{r['throughput']:.1f}" for r in rows], ">"),
    ]


def _times(ratio: float, word: str, opposite: str) -> str:
    return f"{ratio:.2f}x {word}" if ratio >= 1 else f"{1 / ratio:.2f}x {opposite}"


def _reading(row: Mapping[str, Any], reference: Mapping[str, Any], metric: str, level: str) -> str:
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
        f"{metric} {row['delta']:+.4f}{interval}; {row['agreement']:.1%} of predictions unchanged"
    )


def ship_readings(result: Mapping[str, Any]) -> list[str]:
    """One sentence per variant but fp32: size, speed and metric change against fp32, predictions unchanged."""
    reference = result["variants"][0]
    level = f"{result['confidence']:.0%}"
    return [_reading(row, reference, result["metric"], level) for row in result["variants"][1:]]


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


def ship_section(path: Path) -> str:
    """An HTML fragment (every value escaped): what was measured, the table, and the readings."""
    result = json.loads(path.read_text(encoding="utf-8"))
    columns = ship_columns(result)
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cells[i])}</td>" for _, cells, _ in columns) + "</tr>"
        for i in range(len(result["variants"]))
    )
    runtime = result["runtime"]
    source = result.get("task") or result.get("data") or "the evaluation set"
    removed = result.get("removed_heads")
    pruned = f"; {sum(len(h) for h in removed.values())} heads removed in the pruned variants" if removed else ""
    readings = "".join(f"<li>{html.escape(line)}</li>" for line in ship_readings(result))
    outliers = "".join(f"<div>{html.escape(line)}</div>" for line in outlier_lines(result))
    return (
        f"<h2>Will it ship? {html.escape(str(result.get('checkpoint', path.parent.name)))} in ONNX Runtime</h2>"
        f"<p>{int(result['num_examples'])} examples of {html.escape(str(source))}, {html.escape(result['metric'])} "
        f"with its paired-bootstrap {result['confidence']:.0%} interval against fp32; ONNX Runtime "
        f"{html.escape(str(runtime['onnxruntime']))} on the CPU{html.escape(pruned)} "
        f"(<code>{html.escape(str(path))}</code>).</p>"
        f"<table><tr>{head}</tr>{rows}</table><ul>{readings}</ul>" + (f"<p>{outliers}</p>" if outliers else "")
    )
