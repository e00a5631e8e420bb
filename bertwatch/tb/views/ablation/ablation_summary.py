"""The ablation tables as TensorBoard summaries: per-head and per-layer cells, the pruning curve and the pruning
orders' curves of one disabling mode (torch-free; :class:`bertwatch.tb.writer.summary.SummaryWriter` writes them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tensorboard.compat.proto import summary_pb2

from bertwatch.core.jsonable import jsonable
from bertwatch.core.task_names import metric_entries
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.tensors import check_name, tensor_value, to_numpy

__all__ = ["AblationTables", "ablation_summaries"]


def _metric_entries(
    metric: str, metrics: Sequence[Mapping[str, Any]] | None, baseline_metrics: Mapping[str, float] | None
) -> list[dict[str, Any]]:
    """The metrics' names, labels, definitions and baseline values (None where not finite), the compared first."""
    # baseline_metrics holds the compared metric's baseline too (ablation_summaries adds it)
    values = dict(baseline_metrics or {})
    given = {str(m["name"]): m for m in metrics or () if m.get("name")}
    names = [metric, *given, *values]
    out = []
    for entry in metric_entries(names):
        known = given.get(entry["name"], {})
        value = values.get(entry["name"])
        out.append(
            {
                "name": entry["name"],
                "label": str(known.get("label") or entry["label"]),
                "description": str(known.get("description") or entry["description"]),
                "baseline": float(value) if value is not None and math.isfinite(float(value)) else None,
            }
        )
    return out


def ablation_summaries(
    mode: str,
    metric: str,
    baseline: float,
    num_examples: int,
    heads: Any,
    layers: Any,
    pruning: Any | None = None,
    *,
    task_type: str | None = None,
    metrics: Sequence[Mapping[str, Any]] | None = None,
    baseline_metrics: Mapping[str, float] | None = None,
    curves: Mapping[str, Any] | None = None,
    greater_is_better: bool | None = None,
    resolution: Mapping[str, Any] | None = None,
    trivial: Mapping[str, Any] | None = None,
) -> summary_pb2.Summary:
    """``bertwatch/ablation/{mode}/heads`` ``[L, H, 5]``, ``.../layers`` ``[L, 5]`` and optional ``.../pruning``.

    The last axis of ``heads`` and ``layers`` is ``(value, delta, ci_low, ci_high, p)``: the metric with the
    unit disabled, its difference to ``baseline``, the bootstrap interval of the difference and a p-value.
    ``pruning`` is ``[k, 2]``: (fraction of heads pruned, metric). ``task_type``, ``metrics`` (``{"name", "label",
    "description"}``, the compared one first; labels default to :mod:`bertwatch.core.task_names`) and the
    ``baseline_metrics`` values go into the tables' content, so the plugin can say what was measured.
    ``curves`` (optional): ``{"table": [k, len(columns)], "columns", "delta", "confidence", "removable",
    "random_orders", "total_heads"}`` as :meth:`bertwatch.report.result.AblationResult.curves_table` and
    ``removable_json`` give them, written to ``.../pruning_curves``. ``greater_is_better`` (the metric's
    direction: which sign is "worse") and ``resolution`` (:meth:`bertwatch.core.resolution.Resolution.to_json`)
    go into the tables' content, and so does ``trivial`` (the full model against the constant answer,
    :meth:`bertwatch.core.baseline.ConstantComparison.to_json`) as ``trivial_baseline``.
    """
    check_name(mode, "mode")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a non-empty string, got {metric!r}")
    heads_a = to_numpy(heads)
    layers_a = to_numpy(layers)
    nf = len(md.ABLATION_FIELDS)
    if heads_a.ndim != 3 or heads_a.shape[2] != nf or 0 in heads_a.shape:
        raise ValueError(f"heads must be [layers, heads, {nf}], got shape {heads_a.shape}")
    if layers_a.shape != (heads_a.shape[0], nf):
        raise ValueError(f"layers must be [{heads_a.shape[0]}, {nf}], got shape {layers_a.shape}")
    common = dict(
        mode=mode,
        metric=metric,
        baseline=float(baseline),
        num_examples=int(num_examples),
        fields=list(md.ABLATION_FIELDS),
        layers=int(heads_a.shape[0]),
        heads=int(heads_a.shape[1]),
        metrics=_metric_entries(metric, metrics, {metric: baseline, **(baseline_metrics or {})}),
    )
    if task_type is not None:
        common["task_type"] = str(task_type)
    if greater_is_better is not None:
        common["greater_is_better"] = bool(greater_is_better)
    if resolution is not None:
        common["resolution"] = jsonable(dict(resolution))
    if trivial is not None:
        common["trivial_baseline"] = jsonable(dict(trivial))
    summary = summary_pb2.Summary()
    for unit, kind, what, table in (
        ("heads", md.KIND_ABLATION_HEADS, "single head", heads_a),
        ("layers", md.KIND_ABLATION_LAYERS, "whole layer", layers_a),
    ):
        metadata = md.create_summary_metadata(
            kind,
            data_class=summary_pb2.DATA_CLASS_TENSOR,
            description=f"Change of {metric} when each {what} is disabled ({mode}).",
            **common,
        )
        tensor_value(summary, md.ablation_tag(mode, unit), metadata, table)
    if pruning is not None:
        pruning_a = to_numpy(pruning)
        if pruning_a.ndim != 2 or pruning_a.shape[1] != 2 or pruning_a.shape[0] == 0:
            raise ValueError(f"pruning must be [k, 2] (fraction pruned, metric), got shape {pruning_a.shape}")
        tensor_value(
            summary,
            md.ablation_tag(mode, "pruning"),
            md.create_summary_metadata(
                md.KIND_PRUNING,
                data_class=summary_pb2.DATA_CLASS_TENSOR,
                description=f"{metric} as heads are pruned in order of importance ({mode}).",
                mode=mode,
                metric=metric,
                baseline=float(baseline),
            ),
            pruning_a,
        )
    if curves is not None:
        _curves_value(summary, mode, metric, curves)
    return summary


class AblationTables(Protocol):
    """What :meth:`SummaryWriter.add_ablation_result` reads: the fields of
    :class:`bertwatch.report.result.AblationResult` (a layer above this one, hence a protocol)."""

    mode: str
    metric: str
    baseline: float
    num_examples: int
    heads: Any  # [layers, heads, 5]
    layers: Any  # [layers, 5]
    pruning: Sequence[Mapping[str, Any]]  # the importance order's steps; empty: no pruning curve
    task_type: str | None
    metrics: Sequence[Mapping[str, Any]]
    baseline_metrics: Mapping[str, float]
    config: Mapping[str, Any]
    trivial: Any  # a bertwatch.core.baseline.ConstantComparison, or None

    def pruning_curve(self) -> Any: ...  # [k, 2]

    def resolution(self) -> Any: ...  # a bertwatch.core.resolution.Resolution

    def curves_summary(self) -> Mapping[str, Any]: ...


def _curves_value(summary: summary_pb2.Summary, mode: str, metric: str, curves: Mapping[str, Any]) -> None:
    """``bertwatch/ablation/{mode}/pruning_curves``: the table of Δ per step, the rest in the content."""
    table = to_numpy(curves["table"])
    columns = [str(c) for c in curves["columns"]]
    if table.ndim != 2 or table.shape[1] != len(columns) or table.shape[0] == 0:
        raise ValueError(f"the pruning curves table must be [k, {len(columns)}], got shape {table.shape}")
    content = {k: v for k, v in curves.items() if k != "table"}
    metadata = md.create_summary_metadata(
        md.KIND_PRUNING_CURVES,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=f"Change of {metric} as heads are pruned: importance, iterative and random orders ({mode}).",
        mode=mode,
        metric=metric,
        **jsonable(content),
    )
    tensor_value(summary, md.ablation_tag(mode, "pruning_curves"), metadata, table)
