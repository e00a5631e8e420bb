"""The body of the plugin's ``/runs`` route: every run under the log folder that wrote a verdict, side by side
(``core.sweep_verdicts``, the table ``bertwatch sweep`` prints): each run's verdict now and over its judged steps, its
learning rate and seed where the Trainer logged them (``report_to="tensorboard"`` writes its arguments as the
``args`` text beside bertwatch's event file), ranked worst first, and the failing runs still training, to stop now.

A run here is a TensorBoard run: one folder. Imports only tensorboard, numpy and ``bertwatch.core``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from tensorboard import errors
from tensorboard.data import provider

from bertwatch.core.sweep_verdicts import (
    TRAINER_ARGS_TAG,
    TRAINER_END_TAG,
    SweepRun,
    judged_steps,
    ranked,
    sweep_json,
    sweep_run,
)
from bertwatch.core.verdict import VERDICT_SERIES
from bertwatch.tb.views.heads.run_verdict import verdict_texts
from bertwatch.tb.writer import metadata as md

__all__ = ["runs_table"]

#: TensorBoard's own plugins, whose data the Trainer's writer logs.
_TEXT_PLUGIN, _SCALARS_PLUGIN = "text", "scalars"


def _decoded(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _trainer_args(dp, ctx, eid, runs: list[str]) -> dict[str, dict[str, Any]]:
    """``{run: TrainingArguments as logged}`` of the ``runs`` whose Trainer logged its ``args`` text."""
    listing = dp.list_tensors(
        ctx, experiment_id=eid, plugin_name=_TEXT_PLUGIN, run_tag_filter=provider.RunTagFilter(runs)
    )
    wanted = {run: [t for t in tags if t.split("/")[0] == TRAINER_ARGS_TAG] for run, tags in listing.items()}
    found: dict[str, dict[str, Any]] = {}
    for run, tags in wanted.items():
        if not tags:
            continue
        read = dp.read_tensors(
            ctx,
            experiment_id=eid,
            plugin_name=_TEXT_PLUGIN,
            run_tag_filter=provider.RunTagFilter([run], tags[:1]),
            downsample=1,
        )
        for datum in read.get(run, {}).get(tags[0], [])[-1:]:
            try:
                found[run] = dict(json.loads(_decoded(np.asarray(datum.numpy, dtype=object).reshape(-1)[0])))
            except (ValueError, TypeError, IndexError):
                continue
    return found


def _ended(dp, ctx, eid, runs: list[str]) -> set[str]:
    """The ``runs`` whose Trainer logged the end of its training."""
    listing = dp.list_scalars(
        ctx,
        experiment_id=eid,
        plugin_name=_SCALARS_PLUGIN,
        run_tag_filter=provider.RunTagFilter(runs, [TRAINER_END_TAG]),
    )
    return {run for run, tags in listing.items() if TRAINER_END_TAG in tags}


def _sweep_run(queries, ctx, eid, run: str, args: dict[str, Any], ended: bool) -> SweepRun | None:
    """One run's :class:`SweepRun` from its ``verdict`` series and text; None where it holds no readable verdict."""
    try:
        series = queries.series(ctx, eid, run, md.series_tag(VERDICT_SERIES), kind=md.KIND_NAMED_VALUES)
    except errors.NotFoundError:
        return None
    names = [str(n) for n in series.content.get("names", [])]
    if series.values.ndim != 2 or "level" not in names or series.values.shape[1] != len(names):
        return None
    values = np.asarray(series.values, dtype=np.float64)
    steps = [int(s) for s in series.steps]
    texts, _ = verdict_texts(queries, ctx, eid, run)
    judged = judged_steps(steps, values[:, names.index("level")].tolist(), texts)
    if not judged:
        return None
    columns = {name: dict(zip(steps, values[:, k])) for k, name in enumerate(names)}
    return sweep_run(run, judged, columns, args, ended)


def runs_table(queries, ctx, eid) -> dict[str, Any]:
    """``/runs``: every run with a verdict, worst first, as ``core.sweep_verdicts.sweep_json`` gives them (``runs``,
    ``stop_now``, ``steps_saved``; ``root`` is empty: the log folder is TensorBoard's), and ``without``: the runs
    with bertwatch data but no verdict (no gradient statistics measured)."""
    dp = queries.require_provider()
    tag = md.series_tag(VERDICT_SERIES)
    listing = dp.list_tensors(ctx, experiment_id=eid, plugin_name=queries.plugin_name)
    judged = sorted(run for run, tags in listing.items() if tag in tags)
    args = _trainer_args(dp, ctx, eid, judged) if judged else {}
    ended = _ended(dp, ctx, eid, judged) if judged else set()
    runs = [_sweep_run(queries, ctx, eid, run, args.get(run, {}), run in ended) for run in judged]
    table = sweep_json(ranked([r for r in runs if r is not None]), "")
    table["without"] = sorted(run for run in listing if run not in judged)
    return table
