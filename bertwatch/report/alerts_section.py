"""The HTML report's section on stability alerts: which heads, which rule, since which step, against what
reference (``bertwatch.core.alerts``; the episodes come from ``bertwatch.report.events.read_run``)."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from bertwatch.core.alerts import RULE_TEXTS, unit_name

__all__ = ["alerts_section"]


def _number(value: Any) -> str:
    if value is None:
        return "—"
    number = float(value)
    return f"{number:.4g}" if math.isfinite(number) else html.escape(str(number))


def alerts_section(alerts: Mapping[str, Any] | None) -> str:
    """An ``<h2>`` section listing every alert episode (active ones first), or that none fired; empty when the run
    wrote no alerts (a run without the alert statistics, or older logs).

    Example:
        >>> "no stability alert" in alerts_section({"steps": [0, 10], "episodes": [], "reference_step": 0})
        True
    """
    if not alerts or not alerts.get("steps"):
        return ""
    steps = alerts["steps"]
    reference = alerts.get("reference_step")
    head = (
        '<h2 id="alerts">Stability alerts</h2>'
        f'<p class="note">Each head (each layer, for the outlier rule) judged against its own value at step {html.escape(str(reference))} at '
        f"{len(steps)} measured steps (up to step {steps[-1]}); rules and thresholds: docs/statistics.md, "
        "“Stability alerts”.</p>"
    )
    episodes = sorted(
        alerts.get("episodes") or [], key=lambda e: (not e["active"], e["since"], e["layer"], e["head"] or 0)
    )
    if not episodes:
        return head + "<p>This run raised no stability alert.</p>"
    rows = []
    for e in episodes:
        cells = [
            unit_name(e["layer"], e["head"]),
            f"<code>{html.escape(e['rule'])}</code> ({html.escape(RULE_TEXTS.get(e['rule'], ''))})",
            str(e["since"]),
            "still in alert" if e["active"] else f"until step {e['last']}",
            _number(e["value"]),
            _number(e["reference"]),
            _number(e["threshold"]),
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    active = sum(1 for e in episodes if e["active"])
    header = ["head or layer", "rule", "since step", "", "value (last in alert)", "reference", "threshold"]
    return (
        head
        + f"<p><strong>{len(episodes)} alert{'s' if len(episodes) != 1 else ''}</strong> (a head or layer in alert "
        f"from a step until it recovered), {active} still in force at the last measured step.</p>"
        + "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
