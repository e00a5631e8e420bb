"""The shipping table as people read it (aligned columns, one line of reading per variant) and as ``ship.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertwatch.core.jsonable import jsonable

__all__ = ["SHIP_FILE", "format_table", "write_ship_json"]

#: The result file in the output folder.
SHIP_FILE = "ship.json"


def write_ship_json(out: str | Path, result: Mapping[str, Any]) -> Path:
    """Write ``result`` as ``OUT/ship.json`` (strict JSON: NaN as null) and return the file."""
    path = Path(out) / SHIP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(dict(result)), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def _defined(value: Any) -> bool:
    return value is not None and value == value  # None in JSON, NaN in memory: an undefined interval


def _change(row: Mapping[str, Any]) -> str:
    if row["name"] == "fp32":
        return "(reference)"
    if not (_defined(row["ci_low"]) and _defined(row["ci_high"])):
        return f"{row['delta']:+.4f}"
    return f"{row['delta']:+.4f} [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]"


def _columns(result: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """(header, cells, alignment) per column."""
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


def _threads(threads: Any) -> str:
    if threads == "auto":
        return "its default threads"
    return "1 thread" if threads == 1 else f"{threads} threads"


def format_table(result: Mapping[str, Any]) -> str:
    """The table ``bertwatch ship`` prints: what was measured, one row per variant, then one line of reading
    per variant against fp32.

    Args:
        result: what ``ship_model`` returns (or ``ship.json`` loaded).

    Returns:
        Lines of text (no trailing newline).

    Example:
        >>> print(format_table(json.load(open("ship_out/ship.json"))))
    """
    columns = _columns(result)
    widths = [max(len(header), *(len(c) for c in cells)) for header, cells, _ in columns]
    line = lambda cells: "  ".join(  # noqa: E731
        f"{cell:{align}{width}}" for cell, (_, _, align), width in zip(cells, columns, widths)
    ).rstrip()
    runtime, timing = result["runtime"], result["timing"]
    lines = [
        f"{result['num_examples']} examples, {result['metric']} with its paired-bootstrap "
        f"{result['confidence']:.0%} interval against fp32 ({result['n_resamples']} resamples); ONNX Runtime "
        f"{runtime['onnxruntime']}, CPU, {_threads(runtime['threads'])}",
        f"batch 1: median ms over {timing['repeats']} single examples; batch {timing['batch_size']}: examples per "
        f"second, median of {timing['repeats']} runs on {timing['batch_size']} examples x {timing['batch_tokens']} "
        "tokens",
    ]
    for name, check in result.get("export_check", {}).items():
        lines.append(
            f"export check, {name}: ONNX logits within {check['max_abs_diff']:.1e} of torch's on {check['rows']} "
            f"examples (logits up to {check['max_abs_logit']:.2f})"
        )
    lines += ["", line([header for header, _, _ in columns])]
    lines += [line([cells[i] for _, cells, _ in columns]) for i in range(len(result["variants"]))]
    reference = result["variants"][0]
    level = f"{result['confidence']:.0%}"
    lines += [""] + [_reading(row, reference, result["metric"], level) for row in result["variants"][1:]]
    return "\n".join(lines)
