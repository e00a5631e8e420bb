"""The report's details of a training run: every head statistic grouped by family as in the plugin, each with its
one-line definition, the heads that changed most and one small figure (first step, last step, change); the
statistics without values named in a note; weight against contribution on [CLS]/[SEP]; the named-value series."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bertwatch.core.alerts import RULE_QUANTITY, AlertSettings
from bertwatch.core.stat_names import DEFINITIONS, PER_LAYER_NAMES, STAT_GROUPS
from bertwatch.report.changes import HeadChange, biggest_changes, empty_stats
from bertwatch.report.figures import change_panels, mass_gap_figure, outlier_figure, png_bytes
from bertwatch.report.figures import pyplot as _pyplot
from bertwatch.report.markup import b64, escape, head_name, image, number, table
from bertwatch.tb.colours import mark_hex, series_hex
from bertwatch.tb.views.heads.measures import layer_gap_rows, mass_by_measure

__all__ = ["changes_text", "details_section", "probe_note"]


def probe_note(probe: dict[str, Any] | None) -> str:
    """What the training-time statistics measured, for the "probe set" line: how many examples, how long each was
    allowed to be and how many were cut (``bertwatch.tb.writer.metadata.probe_info``)."""
    if not probe:
        return "This run does not record the probe length (written before bertwatch recorded it)."
    examples, longest, length, cut = probe["examples"], probe["longest"], probe["max_length"], probe["truncated"]
    if length is None:
        return f"{examples} examples measured whole, as tokenized (longest {longest} tokens)."
    if not cut:
        return f"{examples} examples measured whole (longest {longest} tokens; limit {length} tokens)."
    return (
        f"{examples} examples, measured up to {length} tokens; {cut} of them were longer and were cut "
        f"to their first {length} tokens."
    )


def _unit_name(stat: str, layer: int, head: int) -> str:
    """``L2 H7`` for a head; ``L2`` for a per-layer statistic (one column, no heads)."""
    return f"L{int(layer)}" if stat in PER_LAYER_NAMES else head_name(layer, head)


def changes_text(stat: str, changes: list[HeadChange], digits: int = 3) -> str:
    """``L3 H5 0.610 → 0.120 (−0.490), …`` in HTML, the heads in bold; or that nothing changed."""
    if not changes:
        return "no head changed beyond float32 rounding"
    return ", ".join(
        f"<b>{_unit_name(stat, c.layer, c.head)}</b> {_value(c.first, digits)} → {_value(c.last, digits)} "
        f"({_signed(c.delta, digits)})"
        for c in changes
    )


def _value(x: float, digits: int) -> str:
    return f"{x:.{digits}g}" if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e4) else number(x, digits)


def _signed(x: float, digits: int) -> str:
    text = _value(abs(x), digits)
    return ("+" if x > 0 else "−") + text


def _by_family(names: Any) -> list[tuple[str, list[str]]]:
    """``names`` grouped as the plugin's menu groups them, in menu order, the rest under "Other" (sorted)."""
    names = set(names)
    out = [(title, [n for n in group if n in names]) for title, group in STAT_GROUPS]
    grouped = {n for _, group in STAT_GROUPS for n in group}
    out.append(("Other", sorted(names - grouped)))
    return [(title, group) for title, group in out if group]


def _stat_block(stat: str, entry: Mapping[str, Any]) -> str:
    first, last = entry["first"], entry["last"]
    definition = DEFINITIONS.get(stat, "")
    changed = (
        f'<p class="changed" data-stat="{escape(stat)}">Changed most: {changes_text(stat, biggest_changes(stat, entry))}'
        "</p>"
        if first[0] != last[0]
        else ""
    )
    return (
        f'<div class="stat" id="stat-{escape(stat)}"><h4><code>{escape(stat)}</code></h4>'
        + (f'<p class="def">{escape(definition)}</p>' if definition else "")
        + changed
        + image(b64(change_panels(stat, first, last)), f"{stat}: first step, last step and change", "panels")
        + "</div>"
    )


def details_section(training: Mapping[str, Any]) -> str:
    """The details of a training run's statistics (see the module docstring); empty without grids or series."""
    grids = training.get("grids") or {}
    series = training.get("series") or {}
    if not grids and not series:
        return ""
    empty = empty_stats(grids)
    shown = {s: e for s, e in grids.items() if s not in empty}
    parts = [
        '<h2 id="details">Details: every statistic, by family</h2>',
        f'<p class="note">Read from {escape(training.get("source", "the run"))}. Each figure shows the statistic per '
        "head (layer down, head across, both numbered from 0) at the first and the last logged step on one scale, "
        "and the change between them centred at 0 (red: up, blue: down; for drift, red: more drift, as in the plugin). "
        "Changes smaller than float32 rounding of "
        "the values read as no change; drift statistics are drawn around their unchanged value.</p>",
    ]
    if empty:
        parts.append(
            '<p class="note" id="left-out">Left out, no values in this run: '
            + ", ".join(f"<code>{escape(s)}</code>" for s in empty)
            + " (statistics of sentence pairs are empty on single sentences).</p>"
        )
    parts.append(_mass_gap_section(shown))
    parts.append(_outlier_section(shown))
    for title, names in _by_family(shown):
        parts.append(f"<h3>{escape(title)}</h3>")
        parts.extend(_stat_block(stat, shown[stat]) for stat in names)
    parts.append(_series_section(series))
    return "\n".join(p for p in parts if p)


def _series_figure(name: str, entry: dict[str, Any]) -> str:
    """One line per named value over the probe steps, in the series colours in order as in the plugin's charts of
    the same series; ``{key}_uniform`` dashed in its key's colour (a reference value's without its key)."""
    plt = _pyplot()
    names, steps, values = entry["names"], entry["steps"], np.asarray(entry["values"])
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    colors: dict[str, str] = {}
    for k, key in enumerate(names):
        if key.endswith("_uniform"):
            continue
        colors[key] = series_hex(len(colors))
        ax.plot(steps, values[:, k], marker="o", ms=3, label=key, color=colors[key])
    for k, key in enumerate(names):
        base = key[: -len("_uniform")]
        if key.endswith("_uniform"):
            ax.plot(steps, values[:, k], ls="--", lw=1, color=colors.get(base, mark_hex("reference")))
    ax.set_xlabel("training step")
    ax.set_title(name + (" (dashed: a uniform head)" if len(colors) < len(names) else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return b64(png_bytes(fig))


def _series_section(series: Mapping[str, dict[str, Any]]) -> str:
    """Each named-values series over the probe steps (pattern-class shares, word-class attention), with its
    first and last values."""
    parts = []
    for name, entry in sorted(series.items()):
        if not entry["steps"] or not entry["names"]:
            continue
        first, last = entry["values"][0], entry["values"][-1]
        rows = [[key, number(a, 3), number(b, 3)] for key, a, b in zip(entry["names"], first, last)]
        steps = entry["steps"]
        parts.append(
            f"<h3>{escape(name)} over training</h3>"
            + (f'<p class="note">{escape(entry["description"])}</p>' if entry.get("description") else "")
            + f"<figure>{image(_series_figure(name, entry), name)}</figure>"
            + table(["value", f"step {steps[0]}", f"step {steps[-1]}"], rows)
        )
    return "\n".join(parts)


#: The outlier statistics whose trajectories the report draws, the alert rule's quantity first.
_OUTLIER_TRAJECTORIES: tuple[str, ...] = ("ffn_inf_norm", "residual_inf_norm")


def _outlier_section(grids: Mapping[str, Any]) -> str:
    """Each layer's largest activation over training relative to its first logged step (the feed-forward output and
    the residual stream; ``heads.outliers.activations``), with the outlier alert's default multiple; with the
    delimiters' share and the top dimension at the last step. Empty when the run wrote no outlier statistics."""
    entries = {s: grids[s] for s in _OUTLIER_TRAJECTORIES if s in grids and len(grids[s]["steps"]) > 0}
    if not entries:
        return ""
    quantity = RULE_QUANTITY["outlier_growth"]
    multiples = {quantity: AlertSettings().outlier_multiple}
    figure = image(b64(outlier_figure(entries, multiples)), "activation outliers per layer over training")
    rows = []
    first = next(iter(entries.values()))
    for layer in range(np.asarray(first["values"]).shape[1]):
        row = [f"L{layer}"]
        for stat in (*entries, "delimiter_share", "outlier_dim"):
            value = np.asarray(grids[stat]["last"][1], np.float64)[layer, 0] if stat in grids else float("nan")
            whole = stat == "outlier_dim" and np.isfinite(value)
            row.append(str(int(value)) if whole else number(value, 4 if stat in entries else 3))
        rows.append(row)
    header = ["layer", *(f"{s} (last)" for s in entries), "delimiter_share (last)", "outlier_dim (last)"]
    return (
        '<h3 id="outliers">Activation outliers per layer over training</h3>'
        "<p class=\"note\">Each layer's largest |activation| over the probe set's real tokens, divided by its value at "
        "the first logged step (the pretrained model when the run was watched from step 0): the feed-forward output "
        f"and the residual stream (Bondarenko et al. 2023). The outlier alert fires when {escape(quantity)} passes "
        f"×{multiples[quantity]:g} (the default multiple).</p>"
        f"<figure>{figure}</figure>" + table(header, rows)
    )


def _mass_gap_section(grids: Mapping[str, Any]) -> str:
    """The [CLS]/[SEP] mass per layer by attention weight, by norm and by ALTI contribution at each grid's last step,
    with the gaps weights − contribution: a figure and a table
    (``bertwatch.tb.views.heads.measures.mass_by_measure``)."""
    last = {stat: entry["last"] for stat, entry in grids.items()}
    targets = [t for t in mass_by_measure({s: v[1] for s, v in last.items()}) if len(t["measures"]) > 1]
    if not targets:
        return ""
    steps = sorted({last[m["stat"]][0] for t in targets for m in t["measures"]})
    header, rows = layer_gap_rows(targets)
    step_text = f"step {steps[0]}" if len(steps) == 1 else "steps " + ", ".join(map(str, steps)) + " (each its last)"
    return (
        f'<h3 id="mass-gap">Weight vs contribution: mass on [CLS] and [SEP] per layer, {escape(step_text)}</h3>'
        '<p class="note">Each layer\'s mean over heads. Weights: attention probabilities. Norms: the share of '
        "Σ A·‖f(x)‖ on those keys, f(x) the value vector through the head's slice of the output projection "
        "(Kobayashi et al. 2020). ALTI: the share of each token's contribution to the layer output, residual and "
        "LayerNorm included (Ferrando et al. 2022). A large weight with a small contribution moves little: Clark "
        'et al.\'s "no-op" reading of [SEP] attention.</p>'
        f"<figure>{image(b64(mass_gap_figure(targets)), 'mass on [CLS] and [SEP] per layer by measure')}</figure>"
        + table(header, [[r[0]] + [number(v, 3) for v in r[1:]] for r in rows])
    )
