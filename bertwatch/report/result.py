"""The result of one ablation sweep: grids of cells (value, delta, interval, p) with JSON and CSV forms.

Torch-free: the report, the plugin and ``bertwatch report`` read it without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.jsonable import finite_or_none
from bertwatch.core.significance import ABLATION_FIELDS as FIELDS
from bertwatch.core.task_names import describe, metric_entries

__all__ = ["FIELDS", "FORMAT_VERSION", "AblationResult", "atomic_write"]

#: Version of ``ablation.json``. 2 added ``task_type`` and ``metrics`` (names and definitions); a version-1 file
#: reads its task type from ``config`` and gets its metric names from :mod:`bertwatch.core.task_names`.
FORMAT_VERSION = 2


def _cell(row: np.ndarray) -> dict[str, float | None]:
    return {name: finite_or_none(v) for name, v in zip(FIELDS, row)}


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
    #: The task type (``bertwatch.ablation.tasks.TASK_TYPES``); by default ``config["task_type"]``.
    task_type: str | None = None
    #: ``[{"name", "label", "description"}]``: the compared metric first, then the other baseline metrics.
    metrics: list[dict[str, str]] = field(default_factory=list)
    #: logits ``[n, C]`` per configuration id (``baseline``, ``head:l:h``, ``layer:l``, ``keep:l:h``, ``prune:k``);
    #: in memory only, not written to the JSON
    logits: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.task_type is None:
            self.task_type = self.config.get("task_type")
        if not self.metrics:
            from_user = self.config.get("metric_source") == "compute_metrics"
            self.metrics = metric_entries([self.metric, *self.baseline_metrics], from_compute_metrics=from_user)

    @property
    def description(self) -> str:
        """``"token classification · entity F1 (seqeval), token accuracy"``: the task type and the metrics."""
        return describe(self.task_type, self.metrics)

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
            "task_type": self.task_type,
            "mode": self.mode,
            "metric": self.metric,
            "metrics": [dict(m) for m in self.metrics],
            "num_examples": int(self.num_examples),
            "baseline": finite_or_none(self.baseline),
            "heads": [[_cell(c) for c in row] for row in self.heads],
            "layers": [_cell(c) for c in self.layers],
        }
        if self.keep_only is not None:
            doc["keep_only"] = [[_cell(c) for c in row] for row in self.keep_only]
            doc["keep_best"] = self.keep_best()
        if self.pruning:
            doc["pruning"] = [
                {k: (finite_or_none(v) if k in FIELDS or k == "fraction" else v) for k, v in p.items()}
                for p in self.pruning
            ]
        if self.importance is not None:
            doc["importance"] = [[finite_or_none(v) for v in row] for row in self.importance]
        doc["baseline_metrics"] = {k: finite_or_none(v) for k, v in self.baseline_metrics.items()}
        doc["config"] = self.config
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AblationResult:
        """Read back what :meth:`to_json` wrote, this version or an older one; a newer file is refused."""
        version = doc.get("version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"ablation.json version {version!r} is newer than this bertwatch reads ({FORMAT_VERSION}); "
                "upgrade bertwatch"
            )
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
            pruning=[
                {k: (np.nan if v is None and k in FIELDS else v) for k, v in p.items()} for p in doc.get("pruning", [])
            ],
            importance=None if importance is None else np.array(importance, dtype=np.float64),
            baseline_metrics={k: (np.nan if v is None else v) for k, v in doc.get("baseline_metrics", {}).items()},
            config=doc.get("config", {}),
            task_type=doc.get("task_type"),
            metrics=[dict(m) for m in doc.get("metrics", []) if isinstance(m, dict) and m.get("name")],
        )

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per unit: ``unit`` (baseline / head / layer / keep_only / pruning), layer, head, pruned, cells."""
        rows: list[dict[str, Any]] = [
            {"unit": "baseline", "layer": "", "head": "", "pruned": 0, **_cell([self.baseline, 0.0, 0.0, 0.0, 1.0])}
        ]
        num_layers, num_heads = self.shape
        for l in range(num_layers):
            for h in range(num_heads):
                rows.append({"unit": "head", "layer": l, "head": h, "pruned": 1, **_cell(self.heads[l, h])})
        for l in range(num_layers):
            rows.append({"unit": "layer", "layer": l, "head": "", "pruned": num_heads, **_cell(self.layers[l])})
        if self.keep_only is not None:
            for l in range(num_layers):
                for h in range(num_heads):
                    rows.append(
                        {
                            "unit": "keep_only",
                            "layer": l,
                            "head": h,
                            "pruned": num_heads - 1,
                            **_cell(self.keep_only[l, h]),
                        }
                    )
        for p in self.pruning:
            rows.append(
                {
                    "unit": "pruning",
                    "layer": "",
                    "head": "",
                    "pruned": p["pruned"],
                    **{k: finite_or_none(p.get(k)) for k in FIELDS},
                }
            )
        return rows


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
