"""The JSON files of ``probe-syntax``: strict JSON with grids on one line, and the word-class summary."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.jsonable import jsonable
from bertwatch.linguistics.scan import Scan

#: Decimals of every number in the probe-syntax files: six, enough for a fraction.
DIGITS = 6


def dumps(obj: Any, indent: int = 0) -> str:
    """JSON with dicts indented and lists of numbers (or of such lists, e.g. grids) on one line each."""
    pad = "  " * (indent + 1)
    if (
        isinstance(obj, dict)
        and obj
        and len(obj) <= 6
        and all(isinstance(v, (int, float, str, type(None))) for v in obj.values())
    ):
        return json.dumps(jsonable(obj, DIGITS), separators=(", ", ": "))
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(str(k))}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list) and obj and any(isinstance(x, dict) for x in obj):
        return "[\n" + ",\n".join(pad + dumps(x, indent + 1) for x in obj) + "\n" + "  " * indent + "]"
    return json.dumps(jsonable(obj, DIGITS), separators=(",", ":"))


def write_json(path: Path, obj: Mapping[str, Any]) -> Path:
    path.write_text(dumps(jsonable(obj, DIGITS)) + "\n", encoding="utf-8")
    return path


def top_heads(grid: np.ndarray, k: int = 3) -> list[dict[str, Any]]:
    flat = np.where(np.isfinite(grid), grid, -np.inf).ravel()
    order = np.argsort(-flat, kind="stable")[:k]
    return [{"layer": int(i // grid.shape[1]), "head": int(i % grid.shape[1]), "value": float(flat[i])} for i in order]


def safe_tag(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-." else "_" for c in name)


def best_grid(entry: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(entry["accuracy"][entry["direction"]], dtype=np.float32)


def wordclass_json(model: str, main: Scan, ref: Scan | None, reference: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "reference": reference,
        "num_sentences": main.sentences,
        "definition": "max over target tokens j of (1/n) sum_i A[i,j]; examples without the "
        "class are skipped (Kovaleva et al. 2019, Sec 4.4)",
        "classes": {},
        "cls_targets": {},
    }
    for name, grid in main.classes.items():
        entry: dict[str, Any] = {"mean": float(np.nanmean(grid)), "top_heads": top_heads(grid), "grid": grid}
        if ref is not None:
            entry.update(
                reference_mean=float(np.nanmean(ref.classes[name])),
                reference_grid=ref.classes[name],
                difference=grid - ref.classes[name],
            )
        out["classes"][name] = entry
    last = None
    for name, grid in main.cls_targets.items():
        last = grid.shape[0] - 1
        entry = {"last_layer": grid[-1], "last_layer_mean": float(np.nanmean(grid[-1])), "grid": grid}
        if ref is not None:
            entry.update(
                reference_last_layer=ref.cls_targets[name][-1],
                reference_last_layer_mean=float(np.nanmean(ref.cls_targets[name][-1])),
            )
        out["cls_targets"][name] = entry
    out["cls_targets_layer"] = last
    out["cls_targets_definition"] = (
        "max over target tokens j of A[[CLS], j] in the [CLS] row, mean over examples "
        "having the target (Kovaleva et al. 2019, Sec 4.5)"
    )
    return out


def relation_marks(relations: Mapping[str, Mapping[str, Any]], min_count: int) -> dict[tuple[int, int], str]:
    """Heads that beat the fixed-offset baseline by ≥ 0.1 on a relation with ≥ ``min_count`` words."""
    marks: dict[tuple[int, int], list[str]] = {}
    for name, r in relations.items():
        if name == "all" or r["count"] < min_count or r["best_accuracy"] < r["baseline_accuracy"] + 0.1:
            continue
        marks.setdefault((r["best_layer"], r["best_head"]), []).append(name)
    return {k: "/".join(v) for k, v in marks.items()}
