"""The shipping table as people read it (aligned columns, one line of reading per variant) and as ``ship.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertwatch.core.jsonable import jsonable
from bertwatch.report.ship_section import (
    SHIP_FILE,
    batching_lines,
    cause_lines,
    constant_lines,
    layer_columns,
    mixed_offer,
    outlier_lines,
    ship_columns,
    ship_metric,
    ship_readings,
    ship_resolution,
)

__all__ = ["SHIP_FILE", "aligned", "format_table", "write_ship_json"]


def write_ship_json(out: str | Path, result: Mapping[str, Any]) -> Path:
    """Write ``result`` as ``OUT/ship.json`` (strict JSON: NaN as null) and return the file."""
    path = Path(out) / SHIP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(dict(result)), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def _threads(threads: Any) -> str:
    if threads == "auto":
        return "its default threads"
    return "1 thread" if threads == 1 else f"{threads} threads"


def format_table(result: Mapping[str, Any]) -> str:
    """The table ``bertwatch ship`` prints: first, when the model is no better than always giving one answer, that
    verdict (:mod:`bertwatch.core.baseline`); what was measured, one row per variant, one line of reading per variant
    against fp32, at which batch the metric was measured and the predictions another batching changes.

    Args:
        result: what ``ship_model`` returns (or ``ship.json`` loaded).

    Returns:
        Lines of text (no trailing newline).

    Example:
        >>> print(format_table(json.load(open("ship_out/ship.json"))))
    """
    runtime, timing = result["runtime"], result["timing"]
    trivial = constant_lines(result)
    first = [f"bertwatch ship: {line}" for line in trivial] if result.get("no_better_than_constant") else []
    lines = first + [
        f"{result['num_examples']} examples, {ship_metric(result)} with its paired-bootstrap "
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
    if trivial and not first:
        lines += [f"trivial baseline: {line}" for line in trivial]
    lines += [""] + aligned(ship_columns(result)) + [""] + ship_resolution(result) + ship_readings(result)
    lines += [""] + batching_lines(result)
    cause = cause_lines(result)
    if cause:
        offer = mixed_offer(result)
        lines += ["", *cause, "", *aligned(layer_columns(result))] + (
            ["", f"INT8 with one layer in fp32: {offer}"] if offer else []
        )
    else:
        outliers = outlier_lines(result)
        lines += [""] + outliers if outliers else []
    return "\n".join(lines)


def aligned(columns: list[tuple[str, list[str], str]]) -> list[str]:
    """Columns ``(header, cells, alignment)`` as aligned lines of text, the header first.

    Example:
        >>> aligned([("a", ["1", "22"], ">"), ("b", ["x", "y"], "<")])
        [' a  b', ' 1  x', '22  y']
    """
    widths = [max(len(header), *(len(c) for c in cells)) for header, cells, _ in columns]
    line = lambda cells: "  ".join(  # noqa: E731
        f"{cell:{align}{width}}" for cell, (_, _, align), width in zip(cells, columns, widths)
    ).rstrip()
    return [line([header for header, _, _ in columns])] + [
        line([cells[i] for _, cells, _ in columns]) for i in range(len(columns[0][1]))
    ]
