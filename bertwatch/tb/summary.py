"""numpy arrays -> TensorBoard summaries of plugin ``bertwatch``, and the event writer that writes them.

The builders are pure: they validate shapes and return a ``summary_pb2.Summary``. :class:`SummaryWriter` writes
them with TensorBoard's own TF-free ``EventFileWriter``, also beside an existing torch ``SummaryWriter``
(:meth:`SummaryWriter.from_torch_writer`: same run directory, own event file). This module never imports torch:
array-likes with ``.detach()`` (torch tensors) are converted by duck typing.

Every summary carries ``plugin_data.plugin_name = "bertwatch"``, an explicit ``data_class`` (TensorBoard
silently drops third-party series without one) and a versioned JSON ``plugin_data.content``; see
``docs/architecture.md`` for the tag layout. Values are float32; NaN and infinities are kept as they are.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.util import tensor_util

from bertwatch.core.alerts import ALERT_RULES, RULE_QUANTITY, TABLE_COLUMNS, Alert, alert_counts, alert_table
from bertwatch.core.jsonable import jsonable
from bertwatch.core.task_names import metric_entries
from bertwatch.tb import metadata as md

__all__ = [
    "alerts_summary",
    "head_grid_summary",
    "attention_summary",
    "ablation_summaries",
    "embedding_summary",
    "layer_means",
    "layer_scalar_summaries",
    "named_values_summary",
    "SummaryWriter",
]


def _to_numpy(x: Any, dtype=np.float32) -> np.ndarray:
    """An array of ``dtype`` from a numpy array, a nested sequence or a torch tensor (duck-typed)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if hasattr(x, "float"):
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not name or name != name.strip() or "/" in name:
        raise ValueError(f"{what} must be a non-empty string without '/' or surrounding spaces, got {name!r}")
    return name


def _tensor_value(summary: summary_pb2.Summary, tag: str, metadata, array: np.ndarray) -> None:
    summary.value.add(tag=tag, metadata=metadata, tensor=tensor_util.make_tensor_proto(array))


# --------------------------------------------------------------------------------------------------------
# Pure builders


def head_grid_summary(stat: str, grid: Any, *, probe: Mapping[str, int | None] | None = None) -> summary_pb2.Summary:
    """``bertwatch/heads/{stat}``: a float32 ``[layers, heads]`` TENSOR.

    ``probe`` records what the grid was measured on (``{"max_length", "truncated", "examples", "longest"}``,
    ``ProbeSet.length_info``): an optional ``probe`` key of the metadata content (``metadata.probe_info``)."""
    _check_name(stat, "stat")
    array = _to_numpy(grid)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"grid for {stat!r} must be [layers, heads], got shape {array.shape}")
    layers, heads = array.shape
    meta = md.create_summary_metadata(
        md.KIND_HEAD_GRID,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=md.STAT_DESCRIPTIONS.get(stat, f"bertwatch head statistic {stat}"),
        stat=stat,
        layers=int(layers),
        heads=int(heads),
        **({} if probe is None else {"probe": md.probe_info(probe)}),
    )
    summary = summary_pb2.Summary()
    _tensor_value(summary, md.heads_tag(stat), meta, array)
    return summary


def layer_means(grid: Any, stat: str = "grid") -> np.ndarray:
    """``[layers, heads]`` -> ``[layers]`` float64: each layer's mean over its heads, NaN heads left out (a layer
    with no value is NaN). The one rule for a layer's value, in TensorBoard and in every other tracker."""
    array = _to_numpy(grid, np.float64)
    if array.ndim != 2 or 0 in array.shape:
        raise ValueError(f"grid for {stat!r} must be [layers, heads], got shape {array.shape}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN layer -> NaN, silently
        return np.nanmean(array, axis=1)


def layer_scalar_summaries(stat: str, grid: Any) -> summary_pb2.Summary:
    """Ordinary scalars ``bertwatch_layers/{stat}/layer_{l}``: each layer's mean over its heads.

    Heads whose value is NaN are left out of the mean; a layer with no finite-or-infinite value is NaN.
    Written as ``simple_value`` so the Scalars dashboard and tools such as tbparse read them.
    """
    _check_name(stat, "stat")
    summary = summary_pb2.Summary()
    for layer, value in enumerate(layer_means(grid, stat)):
        summary.value.add(tag=md.layer_scalar_tag(stat, layer), simple_value=float(value))
    return summary


def attention_summary(index: int, tokens: Sequence[str], maps: Any, segments: Sequence[int] | None = None):
    """``bertwatch/attention/{index:02d}``: a BLOB_SEQUENCE of [JSON header, float16 ``[L, H, T, T]`` bytes].

    ``tokens`` are the T token strings of the probe example (already cropped to its real tokens), ``maps``
    its attention ``[layers, heads, T, T]`` (rows = queries), ``segments`` optional segment ids (T ints).
    """
    index = int(index)
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    tokens = [str(t) for t in tokens]
    array = _to_numpy(maps)
    if array.ndim != 4 or array.shape[2] != array.shape[3]:
        raise ValueError(f"maps must be [layers, heads, T, T], got shape {array.shape}")
    layers, heads, length, _ = array.shape
    if len(tokens) != length:
        raise ValueError(f"{len(tokens)} tokens for maps of length {length}")
    if segments is not None:
        segments = [int(s) for s in _to_numpy(segments, np.int64).reshape(-1)]
        if len(segments) != length:
            raise ValueError(f"{len(segments)} segment ids for maps of length {length}")
    header = {
        "tokens": tokens,
        "layers": int(layers),
        "heads": int(heads),
        "length": int(length),
        "dtype": "float16",
        "segments": segments,
    }
    blob_header = json.dumps(header, ensure_ascii=False).encode("utf-8")
    blob_maps = np.ascontiguousarray(array.astype("<f2")).tobytes()
    meta = md.create_summary_metadata(
        md.KIND_ATTENTION,
        data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE,
        description="Attention maps of probe example %d: [layers, heads, query, key]." % index,
        index=index,
    )
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=md.attention_tag(index),
        metadata=meta,
        tensor=tensor_util.make_tensor_proto([blob_header, blob_maps], dtype=np.object_),
    )
    return summary


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
) -> summary_pb2.Summary:
    """``bertwatch/ablation/{mode}/heads`` ``[L, H, 5]``, ``.../layers`` ``[L, 5]`` and optional ``.../pruning``.

    The last axis of ``heads`` and ``layers`` is ``(value, delta, ci_low, ci_high, p)``: the metric with the
    unit disabled, its difference to ``baseline``, the bootstrap interval of the difference and a p-value.
    ``pruning`` is ``[k, 2]``: (fraction of heads pruned, metric). ``task_type``, ``metrics`` (``{"name", "label",
    "description"}``, the compared one first; labels default to :mod:`bertwatch.core.task_names`) and the
    ``baseline_metrics`` values go into the tables' content, so the plugin can say what was measured.
    ``curves`` (optional): ``{"table": [k, len(columns)], "columns", "delta", "confidence", "removable",
    "random_orders", "total_heads"}`` as :meth:`bertwatch.report.result.AblationResult.curves_table` and
    ``removable_json`` give them, written to ``.../pruning_curves``.
    """
    _check_name(mode, "mode")
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a non-empty string, got {metric!r}")
    heads_a = _to_numpy(heads)
    layers_a = _to_numpy(layers)
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
        _tensor_value(summary, md.ablation_tag(mode, unit), metadata, table)
    if pruning is not None:
        pruning_a = _to_numpy(pruning)
        if pruning_a.ndim != 2 or pruning_a.shape[1] != 2 or pruning_a.shape[0] == 0:
            raise ValueError(f"pruning must be [k, 2] (fraction pruned, metric), got shape {pruning_a.shape}")
        _tensor_value(
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


def _curves_value(summary: summary_pb2.Summary, mode: str, metric: str, curves: Mapping[str, Any]) -> None:
    """``bertwatch/ablation/{mode}/pruning_curves``: the table of Δ per step, the rest in the content."""
    table = _to_numpy(curves["table"])
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
    _tensor_value(summary, md.ablation_tag(mode, "pruning_curves"), metadata, table)


def embedding_summary(name: str, coords: Any, layers: int, heads: int) -> summary_pb2.Summary:
    """``bertwatch/clustering/{name}``: float32 ``[layers*heads, 2]`` coordinates (e.g. MDS), row = l*heads + h."""
    _check_name(name, "name")
    array = _to_numpy(coords)
    layers, heads = int(layers), int(heads)
    if array.shape != (layers * heads, 2):
        raise ValueError(f"coords must be [{layers}*{heads}, 2], got shape {array.shape}")
    meta = md.create_summary_metadata(
        md.KIND_EMBEDDING,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=f"2-D embedding of the heads ({name}); row = layer * heads + head.",
        name=name,
        layers=layers,
        heads=heads,
    )
    summary = summary_pb2.Summary()
    _tensor_value(summary, md.clustering_tag(name), meta, array)
    return summary


def named_values_summary(name: str, values: Mapping[str, float], description: str = "") -> summary_pb2.Summary:
    """``bertwatch/series/{name}``: float32 ``[k]`` with the k names in the metadata, plus one ordinary scalar
    ``bertwatch_series/{name}/{key}`` per value (e.g. the share of heads in each pattern class)."""
    _check_name(name, "name")
    keys = [str(k) for k in values]
    array = _to_numpy([float(values[k]) for k in values])
    meta = md.create_summary_metadata(
        md.KIND_NAMED_VALUES,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=description or f"bertwatch series {name}",
        name=name,
        names=keys,
    )
    summary = summary_pb2.Summary()
    _tensor_value(summary, md.series_tag(name), meta, array)
    for key, value in zip(keys, array.tolist()):
        summary.value.add(tag=md.series_scalar_tag(name, key), simple_value=float(value))
    return summary


def alerts_summary(alerts: Sequence[Alert], layers: int, heads: int, reference_step: int) -> summary_pb2.Summary:
    """``bertwatch/alerts/heads``: the heads in alert at one step as ``alert_table``'s float32
    ``[layers, heads, rules, 4]`` (NaN: not in alert), plus one scalar ``bertwatch_alerts/{rule}`` per rule and
    ``bertwatch_alerts/total`` (heads in alert). ``reference_step``: the step whose grids are the reference."""
    meta = md.create_summary_metadata(
        md.KIND_ALERTS,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description="bertwatch stability alerts: heads in alert per rule (docs/statistics.md)",
        rules=list(ALERT_RULES),
        quantities=dict(RULE_QUANTITY),
        columns=list(TABLE_COLUMNS),
        reference_step=int(reference_step),
    )
    summary = summary_pb2.Summary()
    _tensor_value(summary, md.ALERTS_TAG, meta, alert_table(alerts, layers, heads))
    for rule, count in alert_counts(alerts).items():
        summary.value.add(tag=md.alerts_scalar_tag(rule), simple_value=float(count))
    return summary


# --------------------------------------------------------------------------------------------------------
# Writer


class SummaryWriter:
    """Writes bertwatch summaries into a run directory (one event file, suffix ``.bertwatch``).

    Call it on world process zero only. Every ``add_*`` call writes one event and flushes, so TensorBoard
    sees each logging step at once. Use :meth:`from_torch_writer` to write into the run directory of an
    existing ``torch.utils.tensorboard.SummaryWriter`` (e.g. the HF ``TensorBoardCallback``'s).
    """

    def __init__(self, logdir: str, filename_suffix: str = ".bertwatch", *, flush_secs: float = 120):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._logdir = str(logdir)
        self._file_writer = EventFileWriter(self._logdir, flush_secs=flush_secs, filename_suffix=filename_suffix)
        self._closed = False

    @classmethod
    def from_torch_writer(
        cls, writer: Any, filename_suffix: str = ".bertwatch", *, flush_secs: float = 120
    ) -> SummaryWriter:
        """A writer whose event file lies in the run directory of a torch ``SummaryWriter`` (e.g. the HF
        ``TensorBoardCallback``'s), so TensorBoard shows bertwatch's series in the same run.

        Only the writer's public ``get_logdir()`` (or ``log_dir``) is read; the torch writer is never written to,
        flushed or closed. :meth:`close` closes bertwatch's own file.
        """
        get_logdir = getattr(writer, "get_logdir", None)
        logdir = get_logdir() if callable(get_logdir) else getattr(writer, "log_dir", None)
        if not isinstance(logdir, (str, os.PathLike)):
            raise TypeError(
                f"expected a torch.utils.tensorboard.SummaryWriter (with get_logdir()), got {type(writer).__name__}"
            )
        return cls(os.fspath(logdir), filename_suffix, flush_secs=flush_secs)

    @property
    def logdir(self) -> str | None:
        return self._logdir

    # -- low level

    def add_summary(self, summary: summary_pb2.Summary, step: int, walltime: float | None = None) -> None:
        """Write one summary as one event at ``step`` (no flush)."""
        if self._closed:
            raise RuntimeError("SummaryWriter is closed")
        step = int(step)
        walltime = time.time() if walltime is None else float(walltime)
        self._file_writer.add_event(event_pb2.Event(wall_time=walltime, step=step, summary=summary))

    def _write(self, summaries: Iterable[summary_pb2.Summary], step: int, walltime: float | None) -> None:
        merged = summary_pb2.Summary()
        for s in summaries:
            merged.value.extend(s.value)
        if merged.value:
            self.add_summary(merged, step, walltime)
        self.flush()

    # -- high level

    def add_head_grids(
        self,
        grids: Mapping[str, Any],
        step: int,
        walltime: float | None = None,
        *,
        probe: Mapping[str, int | None] | None = None,
    ) -> None:
        """Every ``[layers, heads]`` grid as ``bertwatch/heads/{stat}`` plus its layer means as scalars; ``probe``
        (what was measured, see :func:`head_grid_summary`) goes into each grid's metadata."""
        summaries = []
        for stat, grid in grids.items():
            summaries.append(head_grid_summary(stat, grid, probe=probe))
            summaries.append(layer_scalar_summaries(stat, grid))
        self._write(summaries, step, walltime)

    def add_attention_maps(self, examples: Sequence[tuple], step: int, walltime: float | None = None) -> None:
        """``examples``: ``(tokens, maps[L, H, T, T])`` or ``(tokens, maps, segments)`` per probe example;
        example ``i`` goes to ``bertwatch/attention/{i:02d}``."""
        summaries = []
        for i, example in enumerate(examples):
            if len(example) not in (2, 3):
                raise ValueError("each example must be (tokens, maps) or (tokens, maps, segments)")
            summaries.append(attention_summary(i, *example))
        self._write(summaries, step, walltime)

    def add_ablation(
        self,
        mode: str,
        metric: str,
        baseline: float,
        num_examples: int,
        heads: Any,
        layers: Any,
        pruning: Any | None = None,
        step: int = 0,
        walltime: float | None = None,
        **about: Any,
    ) -> None:
        """The ablation tables of one mode (``uniform`` or ``zero``); ``about``: ``task_type``, ``metrics``,
        ``baseline_metrics``. See :func:`ablation_summaries`."""
        summary = ablation_summaries(mode, metric, baseline, num_examples, heads, layers, pruning, **about)
        self._write([summary], step, walltime)

    def add_embedding(
        self, name: str, coords: Any, layers: int, heads: int, step: int = 0, walltime: float | None = None
    ) -> None:
        """A 2-D head embedding ``bertwatch/clustering/{name}``; see :func:`embedding_summary`."""
        self._write([embedding_summary(name, coords, layers, heads)], step, walltime)

    def add_named_values(
        self, name: str, values: Mapping[str, float], step: int, description: str = "", walltime: float | None = None
    ) -> None:
        """Named values of one step; see :func:`named_values_summary`."""
        self._write([named_values_summary(name, values, description)], step, walltime)

    def add_alerts(
        self,
        alerts: Sequence[Alert],
        layers: int,
        heads: int,
        step: int,
        reference_step: int = 0,
        walltime: float | None = None,
    ) -> None:
        """The stability alerts in force at ``step``; see :func:`alerts_summary`."""
        self._write([alerts_summary(alerts, layers, heads, reference_step)], step, walltime)

    def flush(self) -> None:
        if self._closed:
            return
        self._file_writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        if self._closed:
            return
        self._file_writer.close()
        self._closed = True

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
