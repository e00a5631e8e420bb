"""numpy arrays -> TensorBoard summaries of plugin ``bertwatch``, and the event writer that writes them.

The builders are pure: they validate shapes and return a ``summary_pb2.Summary``. :class:`SummaryWriter` writes
them with TensorBoard's own TF-free ``EventFileWriter``, also beside an existing torch ``SummaryWriter``
(:meth:`SummaryWriter.from_torch_writer`: same run directory, own event file). This module never imports torch:
array-likes with ``.detach()`` (torch tensors) are converted by duck typing.

Every summary carries ``plugin_data.plugin_name = "bertwatch"``, an explicit ``data_class`` (TensorBoard
silently drops third-party series without one) and a versioned JSON ``plugin_data.content``; see
``docs/architecture.md`` for the tag layout. Values are float32 (text: UTF-8 strings); NaN and infinities are kept as they are.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.util import tensor_util

from bertwatch.core.alerts import ALERT_RULES, RULE_QUANTITY, TABLE_COLUMNS, Alert, alert_counts, alert_table
from bertwatch.tb.views.ablation.ablation_summary import AblationTables, ablation_summaries
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.event_file import open_event_file
from bertwatch.tb.writer.tensors import check_name, tensor_value, to_numpy

__all__ = [
    "alerts_summary",
    "head_grid_summary",
    "attention_summary",
    "ablation_summaries",
    "AblationTables",
    "embedding_summary",
    "layer_means",
    "layer_scalar_summaries",
    "named_values_summary",
    "step_text_summary",
    "SummaryWriter",
]


# --------------------------------------------------------------------------------------------------------
# Pure builders


def head_grid_summary(stat: str, grid: Any, *, probe: Mapping[str, Any] | None = None) -> summary_pb2.Summary:
    """``bertwatch/heads/{stat}``: a float32 ``[layers, heads]`` TENSOR.

    ``probe`` records what the grid was measured on (``{"max_length", "truncated", "examples", "longest"}``,
    ``ProbeSet.length_info``, and optionally the ``"model"`` watched): an optional ``probe`` key of the metadata
    content (``metadata.probe_info``)."""
    check_name(stat, "stat")
    array = to_numpy(grid)
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
    tensor_value(summary, md.heads_tag(stat), meta, array)
    return summary


def layer_means(grid: Any, stat: str = "grid") -> np.ndarray:
    """``[layers, heads]`` -> ``[layers]`` float64: each layer's mean over its heads, NaN heads left out (a layer
    with no value is NaN). The one rule for a layer's value, in TensorBoard and in every other tracker."""
    array = to_numpy(grid, np.float64)
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
    check_name(stat, "stat")
    summary = summary_pb2.Summary()
    for layer, value in enumerate(layer_means(grid, stat)):
        summary.value.add(tag=md.layer_scalar_tag(stat, layer), simple_value=float(value))
    return summary


def attention_summary(
    index: int,
    tokens: Sequence[str],
    maps: Any,
    segments: Sequence[int] | None = None,
    *,
    measure: str = md.DEFAULT_MEASURE,
) -> summary_pb2.Summary:
    """``bertwatch/attention/{index:02d}[/{measure}]``: a BLOB_SEQUENCE of [JSON header, float16 ``[L, H, T, T]``].

    ``tokens`` are the T token strings of the probe example (already cropped to its real tokens), ``maps`` its map
    of ``measure`` (:data:`bertwatch.tb.writer.metadata.ATTENTION_MEASURES`; rows = queries): ``[layers, heads, T, T]``
    per head, or ``[layers, T, T]`` for a measure of the whole layer (ALTI, rollout, value zeroing), stored as
    ``[layers, 1, T, T]`` with ``unit: "layer"``. The weights are always per head. ``segments``: optional segment
    ids (T ints). Maps of a measure other than the weights are written as format
    :data:`~bertwatch.tb.writer.metadata.MEASURE_FORMAT_VERSION`, so older plugins skip them instead of calling them
    attention.

    Example:
        >>> s = attention_summary(0, ["[CLS]", "hi", "[SEP]"], np.eye(3)[None].repeat(6, 0), measure="rollout")
        >>> s.value[0].tag
        'bertwatch/attention/00/rollout'
    """
    index = int(index)
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    if measure not in md.ATTENTION_MEASURES:
        raise ValueError(f"unknown attention measure {measure!r}; one of {', '.join(md.ATTENTION_MEASURES)}")
    tokens = [str(t) for t in tokens]
    array = to_numpy(maps)
    per_layer = array.ndim == 3 and measure != md.DEFAULT_MEASURE
    if per_layer:
        array = array[:, None]
    if array.ndim != 4 or array.shape[2] != array.shape[3]:
        shapes = "[layers, heads, T, T]" + ("" if measure == md.DEFAULT_MEASURE else " or [layers, T, T]")
        raise ValueError(f"{measure} maps must be {shapes}, got shape {to_numpy(maps).shape}")
    layers, heads, length, _ = array.shape
    if len(tokens) != length:
        raise ValueError(f"{len(tokens)} tokens for maps of length {length}")
    if segments is not None:
        segments = [int(s) for s in to_numpy(segments, np.int64).reshape(-1)]
        if len(segments) != length:
            raise ValueError(f"{len(segments)} segment ids for maps of length {length}")
    unit = "layer" if per_layer else "head"
    header = {
        "tokens": tokens,
        "layers": int(layers),
        "heads": int(heads),
        "length": int(length),
        "dtype": "float16",
        "segments": segments,
        "measure": measure,
        "unit": unit,
    }
    blob_header = json.dumps(header, ensure_ascii=False).encode("utf-8")
    blob_maps = np.ascontiguousarray(array.astype("<f2")).tobytes()
    label = md.ATTENTION_MEASURES[measure]["label"]
    meta = md.create_summary_metadata(
        md.KIND_ATTENTION,
        data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE,
        description="%s maps of probe example %d: [layers, %s, query, key]."
        % (label, index, "heads" if unit == "head" else "1"),
        version=md.FORMAT_VERSION if measure == md.DEFAULT_MEASURE else md.MEASURE_FORMAT_VERSION,
        index=index,
        measure=measure,
        unit=unit,
    )
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=md.attention_tag(index, measure),
        metadata=meta,
        tensor=tensor_util.make_tensor_proto([blob_header, blob_maps], dtype=np.object_),
    )
    return summary


def embedding_summary(name: str, coords: Any, layers: int, heads: int) -> summary_pb2.Summary:
    """``bertwatch/clustering/{name}``: float32 ``[layers*heads, 2]`` coordinates (e.g. MDS), row = l*heads + h."""
    check_name(name, "name")
    array = to_numpy(coords)
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
    tensor_value(summary, md.clustering_tag(name), meta, array)
    return summary


def named_values_summary(name: str, values: Mapping[str, float], description: str = "") -> summary_pb2.Summary:
    """``bertwatch/series/{name}``: float32 ``[k]`` with the k names in the metadata, plus one ordinary scalar
    ``bertwatch_series/{name}/{key}`` per value (e.g. the share of heads in each pattern class)."""
    check_name(name, "name")
    keys = [str(k) for k in values]
    array = to_numpy([float(values[k]) for k in values])
    meta = md.create_summary_metadata(
        md.KIND_NAMED_VALUES,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=description or f"bertwatch series {name}",
        name=name,
        names=keys,
    )
    summary = summary_pb2.Summary()
    tensor_value(summary, md.series_tag(name), meta, array)
    for key, value in zip(keys, array.tolist()):
        summary.value.add(tag=md.series_scalar_tag(name, key), simple_value=float(value))
    return summary


def step_text_summary(name: str, lines: Sequence[str], description: str = "", **content: Any) -> summary_pb2.Summary:
    """``bertwatch/text/{name}``: a string tensor ``[k]`` of ``lines`` (UTF-8, k may be 0), with ``content`` (JSON
    values) in the metadata. A tag's metadata is kept from its first write only; the lines are kept at every step
    (e.g. the verdict's reasons)."""
    check_name(name, "name")
    if isinstance(lines, str) or not all(isinstance(line, str) for line in lines):
        raise TypeError(f"lines must be a sequence of strings, got {lines!r}")
    meta = md.create_summary_metadata(
        md.KIND_STEP_TEXT,
        data_class=summary_pb2.DATA_CLASS_TENSOR,
        description=description or f"bertwatch text {name}",
        name=name,
        **content,
    )
    array = np.array([line.encode("utf-8") for line in lines], dtype=object)
    summary = summary_pb2.Summary()
    tensor_value(summary, md.text_tag(name), meta, array)
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
    tensor_value(summary, md.ALERTS_TAG, meta, alert_table(alerts, layers, heads))
    for rule, count in alert_counts(alerts).items():
        summary.value.add(tag=md.alerts_scalar_tag(rule), simple_value=float(count))
    return summary


# --------------------------------------------------------------------------------------------------------
# Writer


class SummaryWriter:
    """Writes bertwatch summaries into a run directory (one event file, suffix ``.bertwatch``; see
    ``bertwatch.tb.writer.event_file`` for how records are framed).

    Call it on world process zero only. Every ``add_*`` call writes one event and flushes, so TensorBoard
    sees each logging step at once. Use :meth:`from_torch_writer` to write into the run directory of an
    existing ``torch.utils.tensorboard.SummaryWriter`` (e.g. the HF ``TensorBoardCallback``'s).

    Args:
        logdir: the run directory (created if missing).
        filename_suffix: the event file's suffix.
        flush_secs: the longest time an event waits in memory (every ``add_*`` call flushes anyway).

    Raises:
        ValueError: from an ``add_*`` call, an array of the wrong shape or a name that cannot be part of a tag.
        RuntimeError: writing after :meth:`close`.

    Example:
        >>> import shutil, tempfile
        >>> import numpy as np
        >>> from pathlib import Path
        >>> from bertwatch.tb.writer.summary import SummaryWriter
        >>> run = tempfile.mkdtemp()
        >>> with SummaryWriter(run) as writer:  # [layers, heads] grids, one event a step
        ...     for step in (0, 10):
        ...         writer.add_head_grids({"cls_mass": np.full((2, 3), step / 100)}, step)
        >>> [path.suffix for path in Path(run).iterdir()]
        ['.bertwatch']
        >>> shutil.rmtree(run)
    """

    def __init__(self, logdir: str, filename_suffix: str = ".bertwatch", *, flush_secs: float = 120):
        self._logdir = str(logdir)
        self._file_writer = open_event_file(self._logdir, filename_suffix, flush_secs=flush_secs)
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
        # torch's SummaryWriter has get_logdir(); a writer of another library may hold only log_dir, or neither
        get_logdir = getattr(writer, "get_logdir", None)
        logdir = get_logdir() if callable(get_logdir) else getattr(writer, "log_dir", None)  # or only log_dir
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
        probe: Mapping[str, Any] | None = None,
    ) -> None:
        """Every ``[layers, heads]`` grid as ``bertwatch/heads/{stat}`` plus its layer means as scalars; ``probe``
        (what was measured, see :func:`head_grid_summary`) goes into each grid's metadata."""
        summaries = []
        for stat, grid in grids.items():
            summaries.append(head_grid_summary(stat, grid, probe=probe))
            summaries.append(layer_scalar_summaries(stat, grid))
        self._write(summaries, step, walltime)

    def add_attention_maps(
        self,
        examples: Sequence[tuple],
        step: int,
        walltime: float | None = None,
        *,
        measure: str = md.DEFAULT_MEASURE,
    ) -> None:
        """``examples``: ``(tokens, maps)`` or ``(tokens, maps, segments)`` per probe example, maps
        ``[L, H, T, T]`` (or ``[L, T, T]`` for a per-layer measure); example ``i`` goes to
        ``bertwatch/attention/{i:02d}`` (weights) or ``.../{i:02d}/{measure}``. Write each measure with the same
        tokens and example order as the weights: the plugin shows them side by side. See :func:`attention_summary`.

        Example::

            writer.add_attention_maps([(tokens, weights, segments)], step)
            writer.add_attention_maps([(tokens, alti_maps, segments)], step, measure="alti")  # [L, T, T]
        """
        summaries = []
        for i, example in enumerate(examples):
            if len(example) not in (2, 3):
                raise ValueError("each example must be (tokens, maps) or (tokens, maps, segments)")
            summaries.append(attention_summary(i, *example, measure=measure))
        self._write(summaries, step, walltime)

    def add_ablation(self, *tables: Any, step: int = 0, walltime: float | None = None, **about: Any) -> None:
        """The ablation tables of one mode (``uniform`` or ``zero``): ``tables`` (``mode, metric, baseline,
        num_examples, heads, layers[, pruning]``) and ``about`` (``task_type``, ``metrics``, ``baseline_metrics``,
        ``curves``, ``greater_is_better``, ``resolution``, ``trivial``) as
        :func:`~bertwatch.tb.views.ablation.ablation_summary.ablation_summaries` takes them."""
        self._write([ablation_summaries(*tables, **about)], step, walltime)

    def add_ablation_result(self, result: AblationTables, step: int = 0, walltime: float | None = None) -> None:
        """The ablation tables of one sweep's result (an ``AblationResult``), with its pruning curves if it has
        any: :meth:`add_ablation` with every field taken from ``result``."""
        pruned = bool(result.pruning)
        self.add_ablation(
            result.mode,
            result.metric,
            result.baseline,
            result.num_examples,
            result.heads,
            result.layers,
            result.pruning_curve() if pruned else None,
            step=step,
            walltime=walltime,
            task_type=result.task_type,
            metrics=result.metrics,
            baseline_metrics=result.baseline_metrics,
            curves=result.curves_summary() if pruned else None,
            greater_is_better=bool(result.config.get("greater_is_better", True)),
            resolution=result.resolution().to_json(),
            trivial=result.trivial.to_json() if result.trivial is not None else None,
        )

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

    def add_step_text(self, name: str, lines: Sequence[str], step: int, description: str = "", **content: Any) -> None:
        """Lines of text of one step; see :func:`step_text_summary`."""
        self._write([step_text_summary(name, lines, description, **content)], step, None)

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
