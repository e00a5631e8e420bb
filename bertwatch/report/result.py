"""The result of one ablation sweep: grids of cells (value, delta, interval, p) with JSON and CSV forms.

Torch-free: the report, the plugin and ``bertwatch report`` read it without loading a model.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.baseline import ConstantComparison
from bertwatch.core.jsonable import finite_or_none
from bertwatch.core.removable import DEFAULT_DELTA, Removable, removable
from bertwatch.core.resolution import Resolution, typical_half_width
from bertwatch.core.significance import ABLATION_FIELDS as FIELDS
from bertwatch.core.task_names import describe, metric_entries, metric_label

__all__ = ["CURVE_COLUMNS", "FIELDS", "FORMAT_VERSION", "AblationResult", "atomic_write"]

#: Version of ``ablation.json``. 2 added ``task_type`` and ``metrics`` (names and definitions); a version-1 file
#: reads its task type from ``config`` and gets its metric names from :mod:`bertwatch.core.task_names`.
#: 3 added the baseline pruning orders (``pruning_random``, ``pruning_iterative``) and ``removable`` (the "N% at
#: δ" answers); older files load with no baseline curves, their answer recomputed from ``pruning`` at the default δ.
#: 4 added ``resolution`` (:mod:`bertwatch.core.resolution`: one example's share of the metric and the typical
#: interval width); older files get one example's share 1/n for accuracy, unknown for other metrics.
#: 5 added ``trivial_baseline`` (:mod:`bertwatch.core.baseline`: the model against the constant answer on the same
#: examples); older files have none.
FORMAT_VERSION = 5

#: Metrics that are a mean of per-example scores in [0, 1]: one example's share is 1/n.
_MEAN_METRICS = ("accuracy", "acc", "exact_match", "squad_f1")

#: The first columns of :meth:`AblationResult.curves_table`: the fraction pruned, then Δ and its interval for the
#: importance order and the iterative order, and the random orders' mean Δ with the smallest and largest Δ among
#: them (each random order's Δ and interval follow).
CURVE_COLUMNS = (
    "fraction",
    "importance",
    "importance_low",
    "importance_high",
    "iterative",
    "iterative_low",
    "iterative_high",
    "random_mean",
    "random_min",
    "random_max",
)


def _cell(row: np.ndarray) -> dict[str, float | None]:
    return {name: finite_or_none(v) for name, v in zip(FIELDS, row)}


def _number(value: Any) -> float:
    return np.nan if value is None else float(value)


def _entry_json(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: (finite_or_none(v) if k in FIELDS or k == "fraction" else v) for k, v in entry.items()}


def _entry_read(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: (np.nan if v is None and k in FIELDS else v) for k, v in entry.items()}


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
    #: The task type (``bertwatch.ablation.task_types.TASK_TYPES``); by default ``config["task_type"]``.
    task_type: str | None = None
    #: ``[{"name", "label", "description"}]``: the compared metric first, then the other baseline metrics.
    metrics: list[dict[str, str]] = field(default_factory=list)
    #: the same steps as ``pruning`` in ``prune_random`` random orders (one list of entries per order)
    pruning_random: list[list[dict[str, Any]]] = field(default_factory=list)
    #: the same steps in Michel's iterative order (importance re-estimated after each step)
    pruning_iterative: list[dict[str, Any]] = field(default_factory=list)
    #: the largest change of the metric one example makes and how it was measured (``"flip"``, ``"left out"``;
    #: :mod:`bertwatch.core.resolution`); None: not known
    one_example: float | None = None
    one_example_how: str = ""
    #: the unablated model against the constant answer on the same examples (:mod:`bertwatch.core.baseline`); None:
    #: not measured (a metric without a vectorised form, a task type other than classification or regression)
    trivial: ConstantComparison | None = None
    #: logits ``[n, C]`` per configuration id (``baseline``, ``head:l:h``, ``layer:l``, ``keep:l:h``, ``prune:k``);
    #: in memory only, not written to the JSON
    logits: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.task_type is None:
            self.task_type = self.config.get("task_type")
        if not self.metrics:
            from_user = self.config.get("metric_source") == "compute_metrics"
            self.metrics = metric_entries([self.metric, *self.baseline_metrics], from_compute_metrics=from_user)
        if self.one_example is None and self.metric in _MEAN_METRICS and self.num_examples > 0:
            self.one_example, self.one_example_how = 1.0 / self.num_examples, "flip"

    @property
    def metric_label(self) -> str:
        """The compared metric as every printed line names it: its ``label`` in :attr:`metrics` (``"F1"`` for
        ``"f1"``, from :mod:`bertwatch.core.task_names`)."""
        return self.metrics[0]["label"] if self.metrics else metric_label(self.metric)

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

    @property
    def delta(self) -> float:
        """δ of the "N% at δ" answer: the sweep's setting, or :data:`DEFAULT_DELTA` for files written before it."""
        value = self.config.get("delta")
        return DEFAULT_DELTA if value is None else float(value)

    def removable(self, delta: float | None = None) -> dict[str, Any]:
        """The answer "up to N% of heads removed with the metric within δ of the baseline" on every curve
        (:func:`bertwatch.core.removable.removable`): ``{"delta", "confidence", "importance", "iterative",
        "random"}``, each a :class:`Removable` (None without that curve), ``random`` a list, one per order."""
        delta = self.delta if delta is None else float(delta)
        greater = bool(self.config.get("greater_is_better", True))

        def answer(entries: list[dict[str, Any]]) -> Removable | None:
            if not entries:
                return None
            return removable(
                [e["fraction"] for e in entries],
                [e["pruned"] for e in entries],
                [_number(e.get("ci_low")) for e in entries],
                [_number(e.get("ci_high")) for e in entries],
                delta,
                greater,
            )

        return {
            "delta": delta,
            "confidence": float(self.config.get("confidence", 0.95)),
            "importance": answer(self.pruning),
            "iterative": answer(self.pruning_iterative),
            "random": [answer(order) for order in self.pruning_random],
        }

    def resolution(self) -> Resolution:
        """What these examples resolve (:mod:`bertwatch.core.resolution`): one example's share, and the width of the
        interval the answer turns on: with pruning curves, the importance order's step where the answer at δ stops
        (the widest step when every step holds); else the median of the single heads' intervals."""
        width, source, kind, beyond = None, "", "median", False
        if self.pruning:
            lows = [_number(e.get("ci_low")) for e in self.pruning]
            highs = [_number(e.get("ci_high")) for e in self.pruning]
            halves = [(h - l) / 2 for l, h in zip(lows, highs)]
            stop = self.removable()["importance"].step + 1
            if stop < len(halves) and np.isfinite(halves[stop]):
                width, kind = float(halves[stop]), "stop"
                greater = bool(self.config.get("greater_is_better", True))
                beyond = highs[stop] < -self.delta if greater else lows[stop] > self.delta
                source = f"the importance order's step at {self.pruning[stop]['pruned']} heads, the first that fails"
            elif any(np.isfinite(halves)):
                width, kind = float(np.nanmax(halves)), "widest"
                source = f"the widest of the importance order's {len(halves)} steps"
        if width is None:
            width = typical_half_width(self.heads[..., 2].ravel(), self.heads[..., 3].ravel())
            source = f"the median of the {self.heads[..., 0].size} single heads"
        return Resolution(
            examples=int(self.num_examples),
            metric=self.metric_label,
            one_example=self.one_example,
            how=self.one_example_how,
            half_width=width or None,
            width_from=source,
            confidence=float(self.config.get("confidence", 0.95)),
            width_of=kind,
            beyond=bool(beyond),
        )

    def removable_json(self, delta: float | None = None) -> dict[str, Any]:
        """:meth:`removable` as JSON, with the random orders' median fraction (``random_median``, null without),
        the :meth:`resolution` and, when δ is below it, the importance order's answer at the δ it resolves
        (``at_resolution``: ``{"delta", "importance"}``)."""
        found = self.removable(delta)
        randoms = [r.to_json() for r in found["random"]]
        resolution = self.resolution()
        doc = {
            "delta": found["delta"],
            "confidence": found["confidence"],
            "greater_is_better": bool(self.config.get("greater_is_better", True)),
            "importance": found["importance"].to_json() if found["importance"] else None,
            "iterative": found["iterative"].to_json() if found["iterative"] else None,
            "random": randoms,
            "random_median": float(np.median([r["fraction"] for r in randoms])) if randoms else None,
            "resolution": resolution.to_json(),
        }
        wider = resolution.wider_delta()
        if not resolution.resolves(found["delta"]) and wider is not None:
            at = self.removable(wider)["importance"]
            doc["at_resolution"] = {"delta": wider, "importance": at.to_json() if at else None}
        return doc

    def curve_columns(self) -> list[str]:
        """The columns of :meth:`curves_table`: :data:`CURVE_COLUMNS`, then ``random{r}``, ``random{r}_low``,
        ``random{r}_high`` for each random order."""
        extra = [f"random{r}{end}" for r in range(len(self.pruning_random)) for end in ("", "_low", "_high")]
        return [*CURVE_COLUMNS, *extra]

    def curves_table(self) -> np.ndarray:
        """``[steps + 1, len(curve_columns())]`` float64, row 0 the unpruned model (Δ 0): Δ with its interval per
        step of the importance and iterative orders, the random orders' mean and range of Δ, then each random
        order's Δ with its interval (NaN where absent)."""
        steps = len(self.pruning)
        table = np.full((steps + 1, len(self.curve_columns())), np.nan)
        table[0] = 0.0
        for j, entry in enumerate(self.pruning):
            table[j + 1, :4] = [entry["fraction"], *(_number(entry.get(k)) for k in ("delta", "ci_low", "ci_high"))]
        for j, entry in enumerate(self.pruning_iterative[:steps]):
            table[j + 1, 4:7] = [_number(entry.get(k)) for k in ("delta", "ci_low", "ci_high")]
        for r, order in enumerate(self.pruning_random):
            for j, entry in enumerate(order[:steps]):
                table[j + 1, 10 + 3 * r : 13 + 3 * r] = [_number(entry.get(k)) for k in ("delta", "ci_low", "ci_high")]
        if self.pruning_random:
            deltas = table[1:, 10::3]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a step undefined in every order stays NaN
                table[1:, 7] = np.nanmean(deltas, axis=1)
                table[1:, 8] = np.nanmin(deltas, axis=1)
                table[1:, 9] = np.nanmax(deltas, axis=1)
        if not self.pruning_iterative:
            table[0, 4:7] = np.nan
        if not self.pruning_random:
            table[0, 7:] = np.nan
        return table

    @classmethod
    def curves_from_table(cls, table: np.ndarray, columns: list[str], baseline: float, total: int) -> dict[str, Any]:
        """The inverse of :meth:`curves_table` for the TensorBoard reader: ``{"pruning", "pruning_iterative",
        "pruning_random"}`` entries (value = baseline + Δ, no p-values, no head lists) of ``total`` heads."""
        table = np.asarray(table, dtype=np.float64)
        col = {name: i for i, name in enumerate(columns)}
        fractions = table[1:, col["fraction"]]

        def entries(name: str) -> list[dict[str, Any]]:
            if name not in col or not np.isfinite(table[1:, col[name]]).any():
                return []
            out = []
            for j, f in enumerate(fractions):
                d, lo, hi = (float(table[j + 1, col[f"{name}{end}"]]) for end in ("", "_low", "_high"))
                out.append(
                    {
                        "pruned": int(round(f * total)),
                        "fraction": float(f),
                        "value": baseline + d,
                        "delta": d,
                        "ci_low": lo,
                        "ci_high": hi,
                        "p": np.nan,
                    }
                )
            return out

        orders = sorted({c[len("random") :].split("_")[0] for c in columns if c[6:7].isdigit()}, key=int)
        return {
            "pruning": entries("importance"),
            "pruning_iterative": entries("iterative"),
            "pruning_random": [entries(f"random{r}") for r in orders],
        }

    def curves_summary(self) -> dict[str, Any]:
        """What the ``pruning_curves`` TensorBoard summary holds: the table of :meth:`curves_table`, its columns,
        δ, the confidence, the answers of :meth:`removable_json`, the number of random orders and of heads."""
        found = self.removable_json()
        return {
            "table": self.curves_table().astype(np.float32),
            "columns": self.curve_columns(),
            "delta": found["delta"],
            "confidence": found["confidence"],
            "removable": found,
            "random_orders": len(self.pruning_random),
            "total_heads": int(self.heads.shape[0] * self.heads.shape[1]),
        }

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
            doc["pruning"] = [_entry_json(p) for p in self.pruning]
        if self.pruning_random:
            doc["pruning_random"] = [[_entry_json(e) for e in order] for order in self.pruning_random]
        if self.pruning_iterative:
            doc["pruning_iterative"] = [_entry_json(e) for e in self.pruning_iterative]
        if self.pruning:
            doc["removable"] = self.removable_json()
        if self.importance is not None:
            doc["importance"] = [[finite_or_none(v) for v in row] for row in self.importance]
        doc["resolution"] = self.resolution().to_json()
        if self.trivial is not None:
            doc["trivial_baseline"] = self.trivial.to_json()
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
        resolution = doc.get("resolution") or {}
        trivial = doc.get("trivial_baseline")
        return cls(
            task=doc.get("task"),
            mode=doc["mode"],
            metric=doc["metric"],
            num_examples=int(doc["num_examples"]),
            baseline=np.nan if doc.get("baseline") is None else float(doc["baseline"]),
            heads=heads,
            layers=layers,
            keep_only=None if keep is None else np.array([[_uncell(c) for c in row] for row in keep], dtype=np.float64),
            pruning=[_entry_read(p) for p in doc.get("pruning", [])],
            pruning_random=[[_entry_read(p) for p in order] for order in doc.get("pruning_random", [])],
            pruning_iterative=[_entry_read(p) for p in doc.get("pruning_iterative", [])],
            importance=None if importance is None else np.array(importance, dtype=np.float64),
            baseline_metrics={k: (np.nan if v is None else v) for k, v in doc.get("baseline_metrics", {}).items()},
            config=doc.get("config", {}),
            task_type=doc.get("task_type"),
            metrics=[dict(m) for m in doc.get("metrics", []) if isinstance(m, dict) and m.get("name")],
            one_example=finite_or_none(resolution.get("one_example")),
            one_example_how=str(resolution.get("how") or ""),
            trivial=ConstantComparison.from_json(trivial) if trivial else None,
        )

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per unit: ``unit`` (baseline / head / layer / keep_only / pruning / pruning_iterative /
        pruning_random_{r}), layer, head, pruned, cells."""
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
        curves = [("pruning", self.pruning), ("pruning_iterative", self.pruning_iterative)]
        curves += [(f"pruning_random_{r}", order) for r, order in enumerate(self.pruning_random)]
        for unit, entries in curves:
            for p in entries:
                rows.append(
                    {
                        "unit": unit,
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
