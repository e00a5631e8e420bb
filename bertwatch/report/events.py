"""Read a run's ablation results and training-time grids back from ``ablation.json`` files and event files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertwatch.core.alerts import episodes
from bertwatch.core.baseline import ConstantComparison
from bertwatch.core.sweep_verdicts import TRAINER_ARGS_TAG, TRAINER_END_TAG, judged_steps
from bertwatch.core.verdict import VERDICT_SERIES
from bertwatch.report.result import AblationResult
from bertwatch.tb.writer import metadata as md


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if "tfevents" in path.name else []
    return sorted(p for p in path.rglob("*") if p.is_file() and "tfevents" in p.name)


def read_run(path: str | Path) -> tuple[list[AblationResult], dict[str, Any]]:
    """Ablation results and training-time grids of a run: ``ablation.json`` files under ``path`` first, then the
    bertwatch summaries in its TensorBoard event files (ablation tables, the first/last step of each grid with
    every logged step of it, every step of each named-values series, e.g. the pattern-class shares), every step's
    lines of each text (``texts``: ``{name: {"steps", "lines", "content"}}``, e.g. the verdict's reasons, which
    ``verdict_steps`` pairs with its levels), what the probe set measured (``probe``:
    ``bertwatch.tb.writer.metadata.probe_info``, None in logs that do not record it) and the stability alerts
    (``alerts``: ``{"rules", "steps", "reference_step", "episodes"}`` of ``bertwatch.core.alerts.episodes``, None
    when the run wrote none) and the folders of its event files below ``path`` (``runs``)."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(
            f"{root} does not exist; pass a run's output folder, TensorBoard run or ablation folder"
        )
    results: dict[str, AblationResult] = {}
    json_files = (
        [root]
        if root.is_file() and root.suffix == ".json"
        else sorted(root.rglob("ablation.json"))
        if root.is_dir()
        else []
    )
    for file in json_files:
        result = AblationResult.from_json(json.loads(file.read_text(encoding="utf-8")))
        results.setdefault(result.mode, result)
    files = _event_files(root)
    tb_results, grids, named, probe, alerts, texts = _read_events(files)
    for mode, result in tb_results.items():
        results.setdefault(mode, result)
    runs = sorted({str(f.parent.relative_to(root)) if root.is_dir() else f.parent.name for f in files})
    training = {"grids": grids, "series": named, "source": str(root), "probe": probe, "alerts": alerts, "runs": runs}
    training["texts"] = texts
    return [results[m] for m in sorted(results)], training


def _about(meta: dict[str, Any]) -> dict[str, Any]:
    """The task type, metric names and baseline values that ablation tables carry (none in older logs)."""
    entries = [m for m in meta.get("metrics") or [] if isinstance(m, dict) and m.get("name")]
    resolution = meta.get("resolution") or {}
    trivial = meta.get("trivial_baseline")
    return {
        "task_type": meta.get("task_type"),
        "trivial": ConstantComparison.from_json(trivial) if isinstance(trivial, dict) else None,
        "one_example": resolution.get("one_example"),
        "one_example_how": str(resolution.get("how") or ""),
        "metrics": [{k: str(m.get(k) or "") for k in ("name", "label", "description")} for m in entries],
        "baseline_metrics": {
            str(m["name"]): np.nan if m.get("baseline") is None else float(m["baseline"])
            for m in entries
            if "baseline" in m
        },
    }


_READ_KINDS = (
    md.KIND_HEAD_GRID,
    md.KIND_ABLATION_HEADS,
    md.KIND_ABLATION_LAYERS,
    md.KIND_PRUNING,
    md.KIND_PRUNING_CURVES,
    md.KIND_NAMED_VALUES,
    md.KIND_ALERTS,
    md.KIND_STEP_TEXT,
)


def read_series_and_texts(files: Sequence[Path]) -> dict[str, Any]:
    """Only the named-values series and the texts of bertwatch event ``files`` (no grids, maps or ablation
    tables): ``{"series": {name: ...}, "texts": {name: ...}}`` as :func:`read_run` gives them, which
    :func:`verdict_steps` reads; for reading many runs cheaply (``bertwatch sweep``)."""
    _, _, named, _, _, texts = _read_events(files, (md.KIND_NAMED_VALUES, md.KIND_STEP_TEXT))
    return {"series": named, "texts": texts}


def trainer_run(files: Sequence[Path]) -> dict[str, Any]:
    """What the Trainer's own TensorBoard event ``files`` (``report_to="tensorboard"``) say of a run: ``args``,
    its ``TrainingArguments`` as logged (the ``args`` text; empty when absent or unreadable), ``last_step``, the
    last step it logged anything, and ``ended``: whether it logged the end of training (``train/train_runtime``)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found: dict[str, Any] = {"args": {}, "last_step": None, "ended": False}
    for file in files:
        for event in EventFileLoader(str(file)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                found["last_step"] = max(int(event.step), found["last_step"] or 0)
                found["ended"] = found["ended"] or value.tag == TRAINER_END_TAG
                if value.tag.split("/")[0] == TRAINER_ARGS_TAG and value.HasField("tensor"):
                    text = _decoded(np.asarray(tensor_util.make_ndarray(value.tensor), dtype=object).reshape(-1)[0])
                    try:
                        found["args"] = dict(json.loads(text))
                    except (ValueError, TypeError):
                        continue
    return found


def _read_events(
    files: Sequence[Path],
    kinds: Sequence[str] = _READ_KINDS,
) -> tuple[
    dict[str, AblationResult],
    dict[str, Any],
    dict[str, dict[str, Any]],
    dict[str, int | None] | None,
    dict | None,
    dict[str, dict[str, Any]],
]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    content: dict[str, dict[str, Any]] = {}
    series: dict[str, list[tuple[int, float, np.ndarray]]] = {}
    for file in files:
        for event in EventFileLoader(str(file)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                if value.HasField("metadata") and value.metadata.plugin_data.plugin_name == md.PLUGIN_NAME:
                    try:
                        content[value.tag] = json.loads(value.metadata.plugin_data.content.decode("utf-8") or "{}")
                        content[value.tag].setdefault("description", value.metadata.summary_description)
                    except ValueError:
                        continue
                if value.tag not in content or not value.HasField("tensor"):
                    continue
                kind = content[value.tag].get("kind")
                if kind not in kinds:
                    continue
                array = tensor_util.make_ndarray(value.tensor)
                series.setdefault(value.tag, []).append((int(event.step), float(event.wall_time), array))
    grids: dict[str, Any] = {}
    named: dict[str, dict[str, Any]] = {}
    texts: dict[str, dict[str, Any]] = {}
    tables: dict[str, dict[str, Any]] = {}
    probe = alerts = None
    for tag, points in series.items():
        points.sort(key=lambda t: (t[0], t[1]))
        meta = content[tag]
        kind = meta.get("kind")
        if kind == md.KIND_HEAD_GRID:
            stat = meta.get("stat") or tag[len(md.HEADS_PREFIX) :]
            grids[stat] = _grid_entry(points)
            probe = probe or md.probe_info(meta.get("probe"))
        elif kind == md.KIND_ALERTS:
            alerts = _alerts(meta, points)
        elif kind == md.KIND_NAMED_VALUES:
            named[str(meta.get("name") or tag[len(md.SERIES_PREFIX) :])] = _named_entry(meta, points)
        elif kind == md.KIND_STEP_TEXT:
            texts[str(meta.get("name") or tag[len(md.TEXT_PREFIX) :])] = _text_entry(meta, points)
        else:
            mode = meta.get("mode") or tag[len(md.ABLATION_PREFIX) :].split("/")[0]
            entry = tables.setdefault(mode, {})
            entry[kind] = points[-1][2]
            if kind == md.KIND_ABLATION_HEADS:
                entry["meta"] = meta
            if kind == md.KIND_PRUNING_CURVES:
                entry["curves_meta"] = meta
    results = {
        mode: _ablation_result(mode, entry)
        for mode, entry in tables.items()
        if md.KIND_ABLATION_HEADS in entry and md.KIND_ABLATION_LAYERS in entry
    }
    return results, grids, named, probe, alerts, texts


def _named_entry(meta: dict[str, Any], points: list[tuple[int, float, np.ndarray]]) -> dict[str, Any]:
    by_step = {step: array for step, _, array in points}  # a rewritten step keeps its newest value
    return {
        "names": [str(n) for n in meta.get("names") or []],
        "steps": sorted(by_step),
        "values": np.stack([np.asarray(by_step[s], dtype=np.float64) for s in sorted(by_step)]),
        "description": str(meta.get("description") or ""),
    }


def _text_entry(meta: dict[str, Any], points: list[tuple[int, float, np.ndarray]]) -> dict[str, Any]:
    """A text's lines at every step (a rewritten step keeps its newest lines), its content from the metadata."""
    by_step = {step: array for step, _, array in points}
    lines = [[_decoded(item) for item in np.asarray(by_step[s], dtype=object).reshape(-1)] for s in sorted(by_step)]
    return {"steps": sorted(by_step), "lines": lines, "content": meta}


def _decoded(item: Any) -> str:
    return item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)


def verdict_steps(training: dict[str, Any]) -> list[tuple[int, int, list[str]]]:
    """``(step, level, reasons)`` of every step a run's verdict was judged (``core.verdict``), oldest first: its
    level from the ``verdict`` series, its reasons from the ``verdict`` text (empty where the run wrote none);
    empty when the run wrote no verdict."""
    series = (training.get("series") or {}).get(VERDICT_SERIES)
    if not series or not len(series.get("steps") or []):
        return []
    text = (training.get("texts") or {}).get(VERDICT_SERIES) or {}
    reasons = dict(zip(text.get("steps") or [], text.get("lines") or []))
    return judged_steps(series["steps"], np.asarray(series["values"], dtype=np.float64)[:, 0].tolist(), reasons)


def _grid_entry(points: list[tuple[int, float, np.ndarray]]) -> dict[str, Any]:
    """A head grid's first and last ``(step, grid)`` and, as ``steps`` and ``values`` (``[steps, layers, heads]``),
    every logged step of the last step's shape (a rewritten step keeps its newest grid)."""
    by_step = {step: array for step, _, array in points}
    shape = by_step[points[-1][0]].shape
    steps = [s for s in sorted(by_step) if by_step[s].shape == shape]
    return {
        "first": (points[0][0], points[0][2]),
        "last": (points[-1][0], points[-1][2]),
        "steps": steps,
        "values": np.stack([by_step[s] for s in steps]),
    }


def _alerts(meta: dict[str, Any], points: list[tuple[int, float, np.ndarray]]) -> dict[str, Any]:
    """The alert episodes of a run from its ``alerts`` tables (a rewritten step keeps its newest table)."""
    by_step = {step: array for step, _, array in points}
    steps = sorted(by_step)
    shape = by_step[steps[-1]].shape
    steps = [s for s in steps if by_step[s].shape == shape]
    rules = [str(r) for r in meta.get("rules") or []]
    return {
        "rules": rules,
        "steps": steps,
        "reference_step": meta.get("reference_step"),
        "episodes": episodes(steps, np.stack([by_step[s] for s in steps]), rules),
    }


def _ablation_result(mode: str, entry: dict[str, Any]) -> AblationResult:
    """One mode's ablation tables read back from the event files as an AblationResult: the pruning orders with their
    intervals from ``pruning_curves`` when it was written (no p-values), else the importance curve without."""
    meta = entry["meta"]
    heads = np.asarray(entry[md.KIND_ABLATION_HEADS], dtype=np.float64)
    baseline = float(meta.get("baseline", np.nan))
    pruning = []
    curve = entry.get(md.KIND_PRUNING)
    if curve is not None:
        total = heads.shape[0] * heads.shape[1]
        for fraction, value in np.asarray(curve, dtype=np.float64)[1:]:
            pruning.append(
                {
                    "pruned": int(round(fraction * total)),
                    "fraction": float(fraction),
                    "value": float(value),
                    "delta": float(value - baseline),
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "p": np.nan,
                }
            )
    curves: dict[str, Any] = {"pruning": pruning}
    config: dict[str, Any] = {"source": "TensorBoard summaries"}
    if meta.get("greater_is_better") is not None:
        config["greater_is_better"] = bool(meta["greater_is_better"])
    if md.KIND_PRUNING_CURVES in entry:
        curves_meta = entry["curves_meta"]
        total = heads.shape[0] * heads.shape[1]
        columns = [str(c) for c in curves_meta.get("columns", [])]
        curves = AblationResult.curves_from_table(entry[md.KIND_PRUNING_CURVES], columns, baseline, total)
        answers = curves_meta.get("removable") or {}
        for key in ("delta", "confidence", "greater_is_better"):
            if answers.get(key) is not None:
                config[key] = answers[key]
    return AblationResult(
        task=None,
        mode=mode,
        metric=str(meta.get("metric", "metric")),
        num_examples=int(meta.get("num_examples", 0)),
        baseline=baseline,
        heads=heads,
        layers=np.asarray(entry[md.KIND_ABLATION_LAYERS], dtype=np.float64),
        config=config,
        **curves,
        **_about(meta),
    )
