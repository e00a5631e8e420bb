"""The lines bertwatch says at a new stability alert or a failing verdict (printed by ``announce.say``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertwatch.core.alerts import Alert, unit_name

__all__ = ["STOPPING", "alert_lines", "verdict_line"]


#: Each alert quantity in words, for the alert lines.
_QUANTITY_WORDS = {
    "max_logit": "largest attention logit",
    "entropy": "attention entropy",
    "sink_mass": "attention on [CLS] and [SEP]",
    "ffn_inf_norm": "largest feed-forward activation",
}
#: The most heads an alert line names.
_NAMED = 8


def _severity(alert: Alert) -> float:
    """How far past its threshold an alert is, in units of the threshold's distance from the reference (a
    non-finite value is the furthest)."""
    if not np.isfinite(alert.value) or not np.isfinite(alert.threshold):
        return float("inf")
    return abs(alert.value - alert.reference) / max(abs(alert.threshold - alert.reference), 1e-12)


def alert_lines(alerts: Sequence[Alert], reference_step: int) -> list[str]:
    """One line per rule (and first step) of ``alerts``, the new alerts of one step: how many heads (layers, for a
    layer rule), since when, which (the furthest past the threshold first, up to 8 and how many more), and the
    furthest one's value against its value at ``reference_step``.

    Example:
        >>> a = [Alert(5, 9, "logit_growth", "max_logit", 10, 10, 41.0, 5.0, 15.0),
        ...      Alert(4, 11, "logit_growth", "max_logit", 10, 10, 20.0, 5.0, 15.0)]
        >>> print(*alert_lines(a, 0))
        2 heads in alert since step 10: logit growth on L5 H9, L4 H11 (L5 H9: largest attention logit 41, from 5 at
        step 0)
    """
    groups: dict[tuple[str, int], list[Alert]] = {}
    for alert in alerts:
        groups.setdefault((alert.rule, alert.since), []).append(alert)
    lines = []
    for (rule, since), group in groups.items():
        group = sorted(group, key=_severity, reverse=True)
        names = [unit_name(a.layer, a.head) for a in group]
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        shown = ", ".join(names[:_NAMED]) + more
        worst = group[0]
        quantity = _QUANTITY_WORDS.get(worst.stat, worst.stat)
        if np.isfinite(worst.value):
            detail = f"{names[0]}: {quantity} {worst.value:.3g}, from {worst.reference:.3g} at step {reference_step}"
        else:
            detail = f"{names[0]}: {quantity} is {worst.value}"
        unit = "layer" if worst.head is None else "head"
        lines.append(
            f"{len(group)} {unit}{'' if len(group) == 1 else 's'} in alert since step {since}: {rule.replace('_', ' ')} on {shown} ({detail})"
        )
    return lines


#: What the alert and verdict lines add when ``on_alert="stop"`` asks the Trainer to stop.
STOPPING = "saving a checkpoint and stopping training (on_alert='stop')"


def verdict_line(step: int, described: str) -> str:
    """The line of the first "failing" verdict: its step and its words (``Verdict.describe``)."""
    return f"verdict at step {step}: {described}"
