"""bertwatch's per-layer means through the Trainer's trackers (``report_to``: W&B, MLflow, Comet, ...).

At each probe step the layer means of every measured statistic, and where the most drifted head is, are handed
to the ``on_log`` of the Trainer's reporting callbacks, as ``bertwatch/{stat}/layer_{l}`` and
``bertwatch/{stat}/most_drifted*`` at the step they were measured (the activation outliers, one value per layer, as
``bertwatch/outliers/{stat}/layer_{l}``); at each probe step the verdict is judged, its level,
whether it is known, its evidence, its margin and its failure rank (``bertwatch/verdict/level``, ``.../known``,
``.../evidence``, ``.../margin``, ``.../rank``) and the run-health signals ``bertwatch/run_health/{signal}``.
``Trainer.log`` itself is not called: it appends to ``state.log_history``, prints through the progress callback and runs subclass
overrides that keep their own accumulators (TRL's trainers clear theirs on every call), all of which would
change the run's own bookkeeping. Full grids and maps stay in the TensorBoard plugin.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from bertwatch.core.stat_names import OUTLIER_NAMES
from bertwatch.core.verdict import Verdict
from bertwatch.tb.writer.summary import layer_means

__all__ = [
    "TRACKER_PREFIX",
    "NotATracker",
    "is_tracker",
    "headline_logs",
    "layer_mean_logs",
    "metric_name",
    "reported_trackers",
    "send_to_trackers",
    "tracker_key",
    "verdict_logs",
]

TRACKER_PREFIX = "bertwatch"


# For each drift statistic, whether a lower value means more drift (cosine similarity) or a higher one (JS).
DRIFT_DIRECTION = {"drift_cosine": "min", "drift_js": "max"}


def metric_name(stat: str, part: str) -> str:
    """Every bertwatch metric name in a tracker: ``bertwatch/{stat}/{part}``."""
    return f"{TRACKER_PREFIX}/{stat}/{part}"


def tracker_key(stat: str, layer: int) -> str:
    """The metric name of one layer's mean in every tracker: ``bertwatch/{stat}/layer_{l}``
    (``bertwatch/outliers/{stat}/layer_{l}`` for an activation-outlier statistic)."""
    return metric_name(f"outliers/{stat}" if stat in OUTLIER_NAMES else stat, f"layer_{int(layer)}")


def headline_logs(grids: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The most drifted head of each drift statistic: ``bertwatch/{stat}/most_drifted`` (its value) and
    ``.../most_drifted_layer``, ``.../most_drifted_head`` (where it is, counted from 0). NaN heads are ignored."""
    logs: dict[str, float] = {}
    for stat, direction in DRIFT_DIRECTION.items():
        grid = np.asarray(grids[stat], dtype=np.float64) if stat in grids else None
        if grid is None or not np.isfinite(grid).any():
            continue
        flat = np.where(np.isfinite(grid), grid, np.inf if direction == "min" else -np.inf)
        layer, head = np.unravel_index(int(flat.argmin() if direction == "min" else flat.argmax()), grid.shape)
        logs[metric_name(stat, "most_drifted")] = float(grid[layer, head])
        logs[metric_name(stat, "most_drifted_layer")] = float(layer)
        logs[metric_name(stat, "most_drifted_head")] = float(head)
    return logs


def layer_mean_logs(grids: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``{tracker_key(stat, l): mean over the heads of layer l}`` for every ``[layers, heads]`` grid.

    The same numbers as the TensorBoard layer scalars; a layer without a finite value is left out (trackers such
    as MLflow reject NaN), never sent as a number.
    """
    logs: dict[str, float] = {}
    for stat, grid in grids.items():
        for layer, value in enumerate(layer_means(grid, stat)):
            if math.isfinite(float(value)):
                logs[tracker_key(stat, layer)] = float(value)
    return logs


def verdict_logs(verdict: Verdict, health: Mapping[str, float]) -> dict[str, float]:
    """The verdict as scalars a sweep can sort and stop by: ``bertwatch/verdict/level`` (0 healthy, 1 at risk,
    2 failing), ``.../known`` (0 where nothing shows learning yet: "cannot tell"), ``.../evidence`` (the
    training loss's distance on the learning side of its line, in standard errors), ``.../margin`` (the same
    reading's distance past the constant prediction's, as a share of what the constant leaves to learn) and
    ``.../rank`` (the failure score ``Verdict.rank``: failing first, then the smallest margin; the higher, the
    likelier the run fails), with ``bertwatch/run_health/{signal}`` for each run-health signal (``core.health_names``); a value that
    is not finite (an unknown evidence) is left out, never sent."""
    logs = {
        metric_name("verdict", "level"): float(verdict.level),
        metric_name("verdict", "known"): float(verdict.known),
        metric_name("verdict", "rank"): float(verdict.rank),
    }
    for name in ("evidence", "margin"):
        if math.isfinite(value := getattr(verdict, name)):
            logs[metric_name("verdict", name)] = float(value)
    for name, value in health.items():
        if isinstance(value, (int, float)) and math.isfinite(float(value)):
            logs[metric_name("run_health", str(name))] = float(value)
    return logs


def reported_trackers(args: Any) -> list[str]:
    """The trackers of ``args.report_to`` other than TensorBoard (which bertwatch writes itself)."""
    report_to = args.report_to or []
    if isinstance(report_to, str):
        report_to = [report_to]
    return [name for name in report_to if name not in ("none", "tensorboard")]


class NotATracker:
    """Base of bertwatch's own callbacks: they receive ``on_log`` but are no metrics tracker (:func:`is_tracker`)."""

    __slots__ = ()


def _not_trackers() -> tuple[type, ...]:
    """Callbacks that receive ``on_log`` but are not trackers: progress display, flow control, TensorBoard
    (bertwatch writes the same layer means there itself, as ``bertwatch_layers/...``); bertwatch's own callbacks
    are ``NotATracker``."""
    from transformers.integrations import TensorBoardCallback
    from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback, ProgressCallback

    skipped: list[type] = [
        DefaultFlowCallback,
        PrinterCallback,
        ProgressCallback,
        TensorBoardCallback,
    ]
    try:
        from transformers.utils.notebook import NotebookProgressCallback

        skipped.append(NotebookProgressCallback)
    except ImportError:  # pragma: no cover - notebook extras absent
        pass
    return tuple(skipped)


def is_tracker(callback: Any) -> bool:
    """Whether ``callback`` is one the Trainer reports metrics to (anything with ``on_log`` but the above)."""
    return not isinstance(callback, (NotATracker, *_not_trackers()))


def send_to_trackers(
    trackers: Iterable[Any], args: Any, state: Any, logs: Mapping[str, float], event: Mapping[str, Any]
) -> list[tuple[Any, Exception]]:
    """Call ``on_log`` of every tracker with ``logs`` at ``state.global_step``; returns the ones that failed.

    Each gets its own copy of ``logs`` and a throwaway ``TrainerControl``, so nothing a tracker does reaches the
    training loop's control flow; one tracker's error does not stop the others.
    """
    from transformers.trainer_callback import TrainerControl

    failed: list[tuple[Any, Exception]] = []
    if not logs:
        return failed
    extra = {k: v for k, v in event.items() if k not in ("logs", "args", "state", "control")}
    for callback in trackers:
        try:
            callback.on_log(args, state, TrainerControl(), logs=dict(logs), **extra)
        except Exception as err:
            failed.append((callback, err))
    return failed
