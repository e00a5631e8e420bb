"""The body of the plugin's ``/outliers`` route: each layer's activation outliers over the run, relative to their first
measured (pretrained) value, beside the same layer's [SEP] and punctuation attention mass.

Bondarenko et al. 2023: heads that learn a "no-op" park their attention on [SEP], "." and ",", and the feed-forward
output of their layer grows outliers there. The Heads view's outlier panel shows both per layer, so a layer whose
heads look at [SEP] and whose largest activation grew are read together. The outlier rule's quantity and multiple
come from ``core.alerts`` (their one home).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorboard import errors

from bertwatch.core.alerts import RULE_QUANTITY, AlertSettings
from bertwatch.core.stat_names import DEFINITIONS
from bertwatch.tb.series import f32_list
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.summary import layer_means

__all__ = ["OUTLIER_PANEL_STATS", "outlier_panel"]

#: The per-layer statistics the panel's table shows at the selected step, after the rule's quantity.
OUTLIER_PANEL_STATS: tuple[str, ...] = ("residual_inf_norm", "delimiter_share", "outlier_dim", "outlier_dim_overlap")
#: The head statistics whose layer means stand beside them.
_MASSES: tuple[str, ...] = ("sep_mass", "punct_mass")
#: The panel's column headers (the statistic's name and definition are the header's title).
_LABELS: dict[str, str] = {
    "ffn_inf_norm": "max |x| FFN",
    "residual_inf_norm": "max |x| residual",
    "delimiter_share": "outliers on delimiters",
    "outlier_dim": "top dim",
    "outlier_dim_overlap": "top-3 kept",
    "sep_mass": "[SEP] mass",
    "punct_mass": '"." "," mass',
}


def _ratios(values: np.ndarray) -> np.ndarray:
    """``[n, layers]`` over the first row, NaN where that is not positive."""
    first = values[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(first > 0, values / np.where(first > 0, first, 1.0), np.nan)


def _multiple(queries, ctx, eid, run: str) -> float:
    """The run's outlier multiple: threshold / reference of its latest outlier alert, else the default."""
    try:
        found = [e for e in queries.alerts(ctx, eid, run)["episodes"] if e["rule"] == "outlier_growth"]
    except errors.NotFoundError:
        found = []
    for e in reversed(found):
        if e["reference"] and e["reference"] > 0 and np.isfinite(e["threshold"]):
            return float(e["threshold"]) / float(e["reference"])
    return AlertSettings().outlier_multiple


def outlier_panel(queries, ctx, eid, run: str, step: int | None) -> dict[str, Any]:
    """``/outliers``: the outlier rule's quantity (``core.alerts.RULE_QUANTITY["outlier_growth"]``) of every layer
    over the run's steps as a ratio to its first step, the rule's multiple (the run's, read from its outlier alerts,
    else the default), and at the step at or
    before ``step`` (latest by default) the layer's values of ``OUTLIER_PANEL_STATS`` and the layer means of the
    [SEP] and punctuation masses. ``NotFoundError`` when the run has no such quantity."""
    quantity = RULE_QUANTITY["outlier_growth"]
    series = queries.grid_series(ctx, eid, run, md.heads_tag(quantity))
    values = series.values[:, :, 0].astype(np.float64)  # [n, layers]
    i = len(series.steps) - 1 if step is None else series.index_at_or_before(step)
    if i is None:
        raise errors.NotFoundError("no %s at or before step %r" % (quantity, step))
    at = int(series.steps[i])
    found = queries.grids_at(ctx, eid, run, OUTLIER_PANEL_STATS + _MASSES, at)
    columns = [
        {"stat": quantity, "label": _LABELS.get(quantity, quantity), "description": DEFINITIONS[quantity],
         "values": f32_list(values[i])}
    ]  # fmt: skip
    for stat in OUTLIER_PANEL_STATS + _MASSES:
        if stat in found and found[stat][1].shape[0] == values.shape[1]:
            columns.append(
                {
                    "stat": stat,
                    "label": _LABELS[stat],
                    "description": DEFINITIONS.get(stat, "")
                    + (" Mean over the layer's heads." if stat in _MASSES else ""),
                    "values": f32_list(layer_means(found[stat][1], stat)),
                    "step": found[stat][0],
                    "layerMean": stat in _MASSES,
                }
            )
    return {
        "run": run,
        "stat": quantity,
        "step": at,
        "referenceStep": int(series.steps[0]),
        "multiple": _multiple(queries, ctx, eid, run),
        "steps": series.steps.tolist(),
        "ratios": f32_list(_ratios(values).T),  # [layers][steps]
        "reference": f32_list(values[0]),
        "columns": columns,
    }
