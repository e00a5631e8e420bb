"""The body of the plugin's ``/verdict`` route over a :class:`bertwatch.tb.queries.Queries`: the run's verdict at
every judged step (its level from the ``verdict`` series, its reasons from the ``verdict`` text), the level now and
since when, and the run-health signals the verdict's rules read, as the rules read them, with the thresholds.

Imports only tensorboard, numpy and ``bertwatch.core`` (TensorBoard imports the plugin at start-up).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
from tensorboard import errors
from tensorboard.data import provider

from bertwatch.core.health_names import HEALTH_SERIES, PREDICTION_SHARE
from bertwatch.core.readings import lower_gradient_ratio, probe_loss, z_value
from bertwatch.core.sweep_verdicts import judged_steps
from bertwatch.core.verdict import CANNOT_TELL, LEVELS, VERDICT_SERIES, VerdictSettings
from bertwatch.tb.queries import DOWNSAMPLE
from bertwatch.tb.series import f32_list
from bertwatch.tb.writer import metadata as md

__all__ = ["health_lines", "run_verdict", "since_step", "verdict_texts"]


def since_step(steps: list[int], levels: list[int]) -> int | None:
    """The first step of the trailing run of steps at the last step's level (None for no steps)."""
    if not steps:
        return None
    since = steps[-1]
    for step, level in zip(reversed(steps), reversed(levels)):
        if level != levels[-1]:
            break
        since = step
    return since


def health_lines(names: list[str], values: np.ndarray, settings: VerdictSettings) -> dict[str, Any]:
    """The run-health signals as the verdict's rules read them, per step (``values`` ``[steps, names]``, the
    first step the reference): ``lowerGradient``, the largest lower layer's gradient norm over its reference
    value (``core.verdict.lower_gradient_ratio``) and ``lowerLayers``, those layers; ``predictionShare``;
    ``lossRatio``, the probe loss over the loss of the best constant prediction, and ``lossLow``/``lossHigh``, its
    interval over the same (``core.readings.probe_loss``, the verdict's reading; NaN where the head gives no
    constant prediction's loss), and ``lossSays``: 1 learning, 0 not learning, null cannot tell."""
    rows = [dict(zip(names, (float(v) for v in row))) for row in np.asarray(values, dtype=np.float64)]
    empty = ("lowerGradient", "lowerLayers", "predictionShare", "lossRatio", "lossLow", "lossHigh", "lossSays")
    if not rows:
        return {name: [] for name in empty}
    reference = rows[0]
    ratios = [lower_gradient_ratio(row, reference, settings.lower_share) for row in rows]
    layers = next((list(layers) for _, layers in ratios if layers), [])
    z = z_value(settings.confidence)
    readings = [probe_loss(row, 0, z, settings.loss_line) for row in rows]

    def share_of(value: str) -> list[float]:
        return f32_list([getattr(r, value) / r.baseline if r is not None else math.nan for r in readings])

    return {
        "lowerGradient": f32_list([r for r, _ in ratios]),
        "lowerLayers": layers,
        "predictionShare": f32_list([row.get(PREDICTION_SHARE, math.nan) for row in rows]),
        "lossRatio": share_of("value"),
        "lossLow": share_of("low"),
        "lossHigh": share_of("high"),
        "lossSays": [None if r is None or r.learning is None else int(r.learning) for r in readings],
    }


def verdict_texts(queries, ctx, eid, run: str) -> tuple[dict[int, list[str]], dict]:
    """``{step: reasons}`` of the run's ``verdict`` text, and its metadata content (empty when absent)."""
    tag = md.text_tag(VERDICT_SERIES)
    listing = queries.run_tensors(ctx, eid, run, [tag])
    if tag not in listing:
        return {}, {}
    _, content = queries.tensor_meta(ctx, eid, run, tag, listing)
    found = queries.require_provider().read_tensors(
        ctx,
        experiment_id=eid,
        plugin_name=queries.plugin_name,
        run_tag_filter=provider.RunTagFilter([run], [tag]),
        downsample=DOWNSAMPLE,
    )
    texts: dict[int, list[str]] = {}
    for datum in sorted(found.get(run, {}).get(tag, []), key=lambda d: d.step):
        items = np.asarray(datum.numpy, dtype=object).reshape(-1)
        texts[int(datum.step)] = [i.decode("utf-8", "replace") if isinstance(i, bytes) else str(i) for i in items]
    return texts, content


def _settings(content: dict) -> VerdictSettings:
    """The thresholds the run was judged with (its text's metadata), else the defaults."""
    known = asdict(VerdictSettings())
    given = {k: v for k, v in (content.get("settings") or {}).items() if k in known}
    try:
        return VerdictSettings(**given)
    except (TypeError, ValueError):
        return VerdictSettings()


def run_verdict(queries, ctx, eid, run: str) -> dict[str, Any]:
    """``/verdict``: every judged step's ``level``, ``labels`` ("cannot tell" for a level 0 that no evidence of
    learning backs) and ``reasons`` (null where the run kept no reasons), the level
    ``now`` (its step, label, since when, reasons), the thresholds (``settings``) and ``health``: the signals
    the rules read at each step of the ``run_health`` series (:func:`health_lines`). NotFoundError when the run
    wrote no verdict."""
    series = queries.series(ctx, eid, run, md.series_tag(VERDICT_SERIES), kind=md.KIND_NAMED_VALUES)
    names = [str(n) for n in series.content.get("names", [])]
    if series.values.ndim != 2 or "level" not in names:
        raise errors.NotFoundError("malformed verdict of run %r" % run)
    all_steps = [int(s) for s in series.steps]
    judged = judged_steps(all_steps, series.values[:, names.index("level")].tolist())
    if not judged:
        raise errors.NotFoundError("no verdict in run %r" % run)
    steps, levels = [s for s, _, _ in judged], [lv for _, lv, _ in judged]
    known = dict(zip(all_steps, series.values[:, names.index("known")])) if "known" in names else {}
    labels = [CANNOT_TELL if lv == 0 and known.get(s, 1) == 0 else LEVELS[lv] for s, lv in zip(steps, levels)]
    texts, content = verdict_texts(queries, ctx, eid, run)
    settings = _settings(content)
    reasons = [texts.get(step) for step in steps]
    health: dict[str, Any] = {"steps": []}
    if md.series_tag(HEALTH_SERIES) in queries.run_tensors(ctx, eid, run, [md.series_tag(HEALTH_SERIES)]):
        signals = queries.series(ctx, eid, run, md.series_tag(HEALTH_SERIES), kind=md.KIND_NAMED_VALUES)
        signal_names = [str(n) for n in signals.content.get("names", [])]
        if signals.values.ndim == 2 and signals.values.shape[1] == len(signal_names):
            health = {"steps": signals.steps.tolist(), **health_lines(signal_names, signals.values, settings)}
    return {
        "run": run,
        "levels": list(LEVELS),
        "steps": steps,
        "level": levels,
        "labels": labels,
        "reasons": reasons,
        "now": {
            "step": steps[-1],
            "level": levels[-1],
            "label": labels[-1],
            "since": since_step(steps, levels),
            "reasons": reasons[-1],
        },
        "settings": asdict(settings),
        "health": health,
    }
