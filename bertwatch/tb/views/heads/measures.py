"""Beyond the weights: which attention measures a probe example has, and the gap between weight-based and
contribution-based [CLS]/[SEP] mass per layer (the reading behind Clark et al.'s "no-op" hypothesis).

:func:`mass_by_measure` is pure (numpy only) and shared by the plugin's ``/mass_gap`` route and the HTML report;
:func:`attention_measures` and :func:`mass_gap` are the bodies of the plugin's ``/attention_measures`` and
``/mass_gap`` routes over a :class:`bertwatch.tb.queries.Queries`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tensorboard import errors
from tensorboard.data import provider

from bertwatch.core.stat_names import MASS_BY_MEASURE
from bertwatch.tb.series import f32_list
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.summary import layer_means

__all__ = ["attention_measures", "layer_gap_rows", "mass_by_measure", "mass_gap", "measure_info"]


def measure_info(measure: str) -> dict[str, str]:
    """``{"measure", "label", "description"}`` of an attention measure; an unknown one (written by a newer
    bertwatch) keeps its name as label."""
    known = md.ATTENTION_MEASURES.get(measure, {"label": measure, "description": ""})
    return {"measure": measure, "label": known["label"], "description": known["description"]}


def mass_by_measure(grids: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per target ([CLS], [SEP]) of :data:`bertwatch.core.stat_names.MASS_BY_MEASURE`, each measure's mass per layer
    and the gap of the weight-based mass to each other one.

    Args:
        grids: ``{stat: [layers, heads]}`` (a per-layer statistic is ``[layers, 1]``); statistics that are absent
            are left out (a run without ALTI compares weights and norms only).

    Returns:
        ``[{"target", "measures": [{"label", "stat", "description", "layerMeans" [layers]}], "gaps": {stat:
        [layers]}}]``, float64: a layer's value is the mean over its heads (NaN heads left out,
        :func:`bertwatch.tb.writer.summary.layer_means`); ``gaps[stat]`` is weights − stat per layer, empty without
        the weight-based grid. A grid whose layer count differs from the first one present is left out; so are targets
        with no grid.

    Example:
        >>> mass_by_measure({"sep_mass": [[0.6, 0.4]], "sep_mass_norm": [[0.1, 0.2]]})[0]["gaps"]["sep_mass_norm"]
        array([0.35])
    """
    out = []
    for target, pairs in MASS_BY_MEASURE:
        found = []
        for label, stat in pairs:
            if stat not in grids:
                continue
            means = layer_means(grids[stat], stat)
            if found and len(means) != len(found[0]["layerMeans"]):
                continue
            description = md.STAT_DESCRIPTIONS.get(stat, "")
            found.append({"label": label, "stat": stat, "description": description, "layerMeans": means})
        if not found:
            continue
        weight_stat = pairs[0][1]
        gaps = {}
        if found[0]["stat"] == weight_stat:
            gaps = {m["stat"]: found[0]["layerMeans"] - m["layerMeans"] for m in found[1:]}
        out.append({"target": target, "measures": found, "gaps": gaps})
    return out


def mass_gap(queries, ctx, eid, run: str, step: int | None) -> dict[str, Any]:
    """``/mass_gap``: :func:`mass_by_measure` of each grid's step at or before ``step`` (latest by default).

    Returns ``{"run", "step", "targets": [{"target", "measures": [{"label", "stat", "description", "step",
    "layerMeans"}], "gaps": {stat: [layers]}}], "steps": {stat: step used}}``; a grid with no step at or
    before ``step`` is left out. ``targets`` is empty when the run has none of the masses."""
    # one listing of the candidate tags: which of them the run has (most runs have no ALTI), and each one's entry
    # for the series cache, instead of a provider call per statistic
    candidates = [md.heads_tag(stat) for _, pairs in MASS_BY_MEASURE for _, stat in pairs]
    logged = queries.run_tensors(ctx, eid, run, candidates)
    stats = [stat for _, pairs in MASS_BY_MEASURE for _, stat in pairs if md.heads_tag(stat) in logged]
    found = queries.grids_at(ctx, eid, run, stats, step, listing=logged)
    grids = {stat: grid for stat, (_, grid) in found.items()}
    used = {stat: at for stat, (at, _) in found.items()}
    targets = mass_by_measure(grids)
    for target in targets:
        for m in target["measures"]:
            m["step"] = used[m["stat"]]
            m["layerMeans"] = f32_list(m["layerMeans"])
        target["gaps"] = {k: f32_list(v) for k, v in target["gaps"].items()}
    return {"run": run, "step": step, "targets": targets, "steps": used}


def attention_measures(queries, ctx, eid, run: str, index: int) -> dict[str, Any]:
    """``/attention_measures``: the measures logged for probe example ``index`` and the steps of each.

    Returns ``{"run", "index", "measures": [{"measure", "label", "description", "tag", "unit", "steps"}]}``, the
    weights first, then in :data:`bertwatch.tb.writer.metadata.ATTENTION_MEASURES` order (unknown measures last). Tags
    of a newer format are left out, as ``/tags`` skips them."""
    dp = queries.require_provider()
    listing = dp.list_blob_sequences(
        ctx, experiment_id=eid, plugin_name=queries.plugin_name, run_tag_filter=provider.RunTagFilter(runs=[run])
    )
    found = []
    for tag, ts in listing.get(run, {}).items():
        content = md.parse_plugin_content(ts.plugin_content)
        if content is None or content["version"] > md.READ_VERSION or content["kind"] != md.KIND_ATTENTION:
            continue
        if content.get("index") != index:
            continue
        measure = md.attention_measure(content)
        points, _ = queries.blob_points(ctx, eid, run, tag)
        unit = content.get("unit") if content.get("unit") in ("head", "layer") else "head"
        found.append({**measure_info(measure), "tag": tag, "unit": unit, "steps": [int(p.step) for p in points]})
    if not found:
        raise errors.NotFoundError("no attention maps of example %d in run %r" % (index, run))
    order = list(md.ATTENTION_MEASURES)
    found.sort(key=lambda m: (order.index(m["measure"]) if m["measure"] in order else len(order), m["measure"]))
    return {"run": run, "index": index, "measures": found}


def layer_gap_rows(targets: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The report's table of :func:`mass_by_measure`: header and one row per layer (each target's measures, then
    its gaps)."""
    header = ["layer"]
    columns: list[np.ndarray] = []
    for target in targets:
        labels = {m["stat"]: m["label"] for m in target["measures"]}
        for m in target["measures"]:
            header.append(f"{target['target']} {m['label']}")
            columns.append(np.asarray(m["layerMeans"], dtype=np.float64))
        for stat, gap in target["gaps"].items():
            header.append(f"{target['target']} weights − {labels[stat]}")
            columns.append(np.asarray(gap, dtype=np.float64))
    layers = len(columns[0]) if columns else 0
    return header, [[layer, *(float(c[layer]) for c in columns)] for layer in range(layers)]
