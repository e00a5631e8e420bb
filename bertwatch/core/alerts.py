"""Stability alerts, in one place: the rules, their thresholds (``AlertSettings``) and the pure functions that
judge a run's history of head grids against each head's reference. Torch-free: grids are numpy ``[layers, heads]``.

Rules (``docs/statistics.md`` gives their sources):

- ``logit_growth``: ``max_logit`` above ``logit_multiple`` × its reference (when the reference is positive), or
  above the absolute bound ``logit_bound`` (τ = 100, the published QK-clip threshold).
- ``entropy_collapse``: ``entropy`` below ``entropy_fraction`` × its reference, and at least ``entropy_min_drop``
  nats below it.
- ``sink_collapse``: the share left after [CLS] and [SEP], 1 − (``cls_mass`` + ``sep_mass``), fell to
  ``sink_fraction`` × its reference or less, and the sink mass rose by at least ``sink_min_change``.
- ``sink_desertion``: ``cls_mass`` + ``sep_mass`` fell to ``sink_fraction`` × its reference or less, by at least
  ``sink_min_change``.
- ``outlier_growth`` (per layer): the feed-forward output's max |x| (``ffn_inf_norm``, a ``[layers, 1]`` grid) above
  ``outlier_multiple`` × its reference, or NaN or infinite (Bondarenko et al. 2023: the outliers that break
  per-tensor INT8 quantization grow there).
- ``non_finite``: a head rule's statistic is NaN or infinite where its reference is finite.

A rule whose statistic is absent from the grids is silent. A head (a layer, for a rule of ``LAYER_RULES``) is in
alert for a rule once the rule has held at ``patience`` consecutive measured steps; its ``since`` is the first of
them. A layer rule's alert has ``head`` None; in :func:`alert_table` it sits in head column 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertwatch.core.schema import Check, Checked, Flag, number, option, whole

__all__ = [
    "ALERT_RULES",
    "ALERT_STATS",
    "LAYER_RULES",
    "Alert",
    "AlertSettings",
    "QUANTITY_STATS",
    "RULE_QUANTITY",
    "RULE_STATS",
    "RULE_TEXTS",
    "TABLE_COLUMNS",
    "active_alerts",
    "alert_counts",
    "alert_table",
    "episodes",
    "rule_values",
    "unit_name",
]

#: The rules, in display order.
ALERT_RULES: tuple[str, ...] = (
    "logit_growth",
    "entropy_collapse",
    "sink_collapse",
    "sink_desertion",
    "outlier_growth",
    "non_finite",
)
#: The rules judged per layer (their quantity is a ``[layers, 1]`` grid): an alert of one has ``head`` None.
LAYER_RULES: frozenset[str] = frozenset({"outlier_growth"})
#: What each rule means, in a few words (the report and the plugin show these).
RULE_TEXTS: dict[str, str] = {
    "logit_growth": "max logit past a multiple of its reference or past τ",
    "entropy_collapse": "entropy below a fraction of its reference",
    "sink_collapse": "[CLS]+[SEP] mass far beyond its reference",
    "sink_desertion": "[CLS]+[SEP] mass far below its reference",
    "outlier_growth": "a layer's largest activation past a multiple of its pretrained value",
    "non_finite": "a statistic became NaN or infinite",
}
#: The head statistics each quantity is the sum of.
QUANTITY_STATS: dict[str, tuple[str, ...]] = {
    "max_logit": ("max_logit",),
    "entropy": ("entropy",),
    "sink_mass": ("cls_mass", "sep_mass"),
    "ffn_inf_norm": ("ffn_inf_norm",),
}
#: The quantity each rule compares: a statistic, or ``sink_mass`` = ``cls_mass`` + ``sep_mass``.
RULE_QUANTITY: dict[str, str] = {
    "logit_growth": "max_logit",
    "entropy_collapse": "entropy",
    "sink_collapse": "sink_mass",
    "sink_desertion": "sink_mass",
    "outlier_growth": "ffn_inf_norm",
}
#: The statistics each rule reads (``non_finite`` reads those of every other rule).
RULE_STATS: dict[str, tuple[str, ...]] = {rule: QUANTITY_STATS[quantity] for rule, quantity in RULE_QUANTITY.items()}
#: Every statistic an alert rule reads.
ALERT_STATS: frozenset[str] = frozenset(s for stats in RULE_STATS.values() for s in stats)


def _threshold(flag: str, default: float, help_text: str, check: Check) -> Any:
    """A threshold of the alerts, set with ``flag`` in ``bertwatch run``."""
    return option(default, help_text, check, Flag((flag,), "float", metavar="X"))


@dataclass(frozen=True, eq=False, init=False)
class AlertSettings(Checked):
    """The thresholds of the stability alerts (the rules: module docstring), for ``WatchSettings(alerts=...)``.
    Each head is compared with its own value at the start (step 0, or the reference model).

    Args:
        logit_multiple: logit growth: a head's largest attention score (before the softmax) above this multiple of
            its value at the start.
        logit_bound: logit growth: a head's largest attention score above this value, whatever it was at the start
            (100, the published QK-clip threshold).
        entropy_fraction: entropy collapse: a head's attention entropy below this fraction of its value at the
            start ...
        entropy_min_drop: ... and fallen by at least this many nats.
        sink_fraction: [CLS]/[SEP] collapse or desertion: the attention off [CLS] and [SEP] (collapse), or on them
            (desertion), down to this fraction of its value at the start or less ...
        sink_min_change: ... and the share of attention on [CLS] and [SEP] moved by at least this much.
        outlier_multiple: outlier growth: a layer's largest feed-forward activation above this multiple of its
            value at the start.
        patience: measured steps in a row a rule must hold before it raises an alert.

    Raises:
        ValueError: a threshold out of its range (fractions in (0, 1), multiples > 1, patience >= 1).
        TypeError: a value that is not a number.

    Example:
        >>> AlertSettings(entropy_fraction=0.3).entropy_fraction
        0.3
        >>> AlertSettings(logit_multiple=0.5)
        Traceback (most recent call last):
        ValueError: AlertSettings.logit_multiple must be a finite number > 1, got 0.5
    """

    logit_multiple: float = _threshold(
        "--alert-logit-multiple", 3.0, "logit growth: a head's largest attention score (before the softmax) above "
        "this multiple of its value at the start", number(1.0),
    )  # fmt: skip
    logit_bound: float = _threshold(
        "--alert-logit-bound", 100.0,
        "logit growth: a head's largest attention score above this value, whatever it was at the start", number(0.0),
    )  # fmt: skip
    entropy_fraction: float = _threshold(
        "--alert-entropy-fraction", 0.5, "entropy collapse: a head's attention entropy below this fraction of its "
        "value at the start", number(0.0, below=1.0),
    )  # fmt: skip
    #: A near-zero reference entropy is not a collapse signal: the fall must also be this large.
    entropy_min_drop: float = _threshold(
        "--alert-entropy-min-drop", 0.25, "entropy collapse: and fallen by at least this many nats", number(0.0)
    )
    sink_fraction: float = _threshold(
        "--alert-sink-fraction", 0.1, "[CLS]/[SEP] collapse or desertion: the attention off [CLS] and [SEP] "
        "(collapse), or on them (desertion), down to this fraction of its value at the start or less",
        number(0.0, below=1.0),
    )  # fmt: skip
    sink_min_change: float = _threshold(
        "--alert-sink-min-change", 0.2, "[CLS]/[SEP] collapse or desertion: and the share of attention on [CLS] and "
        "[SEP] moved by at least this much", number(0.0, below=1.0),
    )  # fmt: skip
    outlier_multiple: float = _threshold(
        "--alert-outlier-multiple", 2.0, "outlier growth: a layer's largest feed-forward activation above this "
        "multiple of its value at the start (the outliers that break INT8)", number(1.0),
    )  # fmt: skip
    patience: int = option(
        1, "measured steps in a row a rule must hold before it raises an alert", whole(1),
        Flag(("--alert-patience",), "int"),
    )  # fmt: skip


@dataclass(frozen=True)
class Alert:
    """One head (``head`` None: a whole layer, for a rule of ``LAYER_RULES``) in alert: ``rule`` has held at every
    measured step from ``since`` to ``step``.

    ``value`` is the rule's quantity at ``step``, ``reference`` the head's reference value of it, ``threshold``
    the value the rule compared against (NaN for ``non_finite``); ``stat`` names the quantity."""

    layer: int
    head: int | None
    rule: str
    stat: str
    since: int
    step: int
    value: float
    reference: float
    threshold: float

    def describe(self) -> str:
        """One line for a warning: which head (or layer), which rule, since when, the value against its reference."""
        return (
            f"{unit_name(self.layer, self.head)}: {self.rule.replace('_', ' ')} since step {self.since} "
            f"({self.stat} {self.value:.4g} at step {self.step}, reference {self.reference:.4g}, "
            f"threshold {self.threshold:.4g})"
        )


def unit_name(layer: int, head: int | None) -> str:
    """``L3 H7`` for a head, ``L3`` for a whole layer (``head`` None)."""
    return f"L{layer}" if head is None else f"L{layer} H{head}"


def _quantities(grids: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    plain = ("max_logit", "entropy", "ffn_inf_norm")
    out = {n: np.asarray(grids[n], dtype=np.float64) for n in plain if n in grids}
    if "cls_mass" in grids and "sep_mass" in grids:
        out["sink_mass"] = np.asarray(grids["cls_mass"], np.float64) + np.asarray(grids["sep_mass"], np.float64)
    return out


def _compare(rule: str, value: np.ndarray, ref: np.ndarray, s: AlertSettings) -> tuple[np.ndarray, np.ndarray]:
    """``(fires, threshold)`` grids of one rule; NaN anywhere never fires here (``non_finite`` sees it)."""
    with np.errstate(invalid="ignore"):
        if rule == "logit_growth":
            relative = np.where(ref > 0, s.logit_multiple * ref, np.inf)
            threshold = np.minimum(relative, s.logit_bound)
            return value > threshold, threshold
        if rule == "entropy_collapse":
            threshold = np.minimum(s.entropy_fraction * ref, ref - s.entropy_min_drop)
            return value < threshold, threshold
        if rule == "outlier_growth":
            threshold = np.where(ref > 0, s.outlier_multiple * ref, np.inf)
            return (value > threshold) | ~np.isfinite(value), threshold
        if rule == "sink_collapse":
            threshold = np.maximum(1.0 - s.sink_fraction * (1.0 - ref), ref + s.sink_min_change)
            return value >= threshold, threshold
        threshold = np.minimum(s.sink_fraction * ref, ref - s.sink_min_change)
        return value <= threshold, threshold


def rule_values(
    grids: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], settings: AlertSettings
) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Each applicable rule at one step: ``{(rule, quantity): (fires, value, reference, threshold)}``, grids
    ``[layers, heads]``. A rule is applicable when its statistics are in both ``grids`` and ``reference``;
    ``non_finite`` appears once per quantity it watches."""
    now, ref = _quantities(grids), _quantities(reference)
    out = {}
    for rule in ALERT_RULES[:-1]:
        q = RULE_QUANTITY[rule]
        if q not in now or q not in ref:
            continue
        fires, threshold = _compare(rule, now[q], ref[q], settings)
        out[rule, q] = (fires & np.isfinite(ref[q]), now[q], ref[q], threshold)
        if rule not in LAYER_RULES and ("non_finite", q) not in out:
            broken = ~np.isfinite(now[q]) & np.isfinite(ref[q])
            out["non_finite", q] = (broken, now[q], ref[q], np.full_like(now[q], np.nan))
    return out


def active_alerts(
    reference: Mapping[str, np.ndarray],
    history: Sequence[tuple[int, Mapping[str, np.ndarray]]],
    settings: AlertSettings | None = None,
) -> list[Alert]:
    """The alerts in force at the last step of ``history``.

    Args:
        reference: ``{stat: [layers, heads]}`` of the reference model (bertwatch passes the grids of the run's
            first measured step, taken before any optimiser step).
        history: ``(step, {stat: [layers, heads]})`` in step order, as ``WatchCallback.history``.
        settings: the thresholds (defaults when None).

    Returns:
        One :class:`Alert` per head, rule and quantity whose rule held at the last ``patience`` (or more) measured
        steps of ``history`` carrying its statistics, ordered by rule, quantity, layer, head; ``since`` is the first
        step of that run.

    Example:
        >>> ref = {"entropy": np.full((1, 2), 2.0)}
        >>> hist = [(0, ref), (10, {"entropy": np.array([[2.0, 0.5]])})]
        >>> [(a.layer, a.head, a.rule, a.since) for a in active_alerts(ref, hist)]
        [(0, 1, 'entropy_collapse', 10)]
    """
    s = AlertSettings() if settings is None else settings
    judged = [(step, rule_values(grids, reference, s)) for step, grids in history]
    if not judged:
        return []
    last_step, last = judged[-1]
    alerts = []
    for key in sorted(last, key=lambda k: (ALERT_RULES.index(k[0]), k[1])):
        fires, value, ref, threshold = last[key]
        for layer, head in zip(*np.nonzero(fires), strict=True):
            since, run = last_step, 0
            for step, rules in reversed(judged):
                if key not in rules:
                    continue
                if not rules[key][0][layer, head]:
                    break
                since, run = step, run + 1
            if run < s.patience:
                continue
            alerts.append(
                Alert(
                    int(layer),
                    None if key[0] in LAYER_RULES else int(head),
                    key[0],
                    key[1],
                    int(since),
                    int(last_step),
                    float(value[layer, head]),
                    float(ref[layer, head]),
                    float(threshold[layer, head]),
                )
            )
    return alerts


def alert_counts(alerts: Sequence[Alert], rules: Sequence[str] = ALERT_RULES) -> dict[str, int]:
    """``{rule: heads (layers, for a layer rule) in alert}`` for every rule (0 included) and ``"total"``: the scalars
    bertwatch logs."""
    counts = {rule: sum(1 for a in alerts if a.rule == rule) for rule in rules}
    counts["total"] = len(alerts)
    return counts


#: The last axis of :func:`alert_table`.
TABLE_COLUMNS: tuple[str, ...] = ("since", "value", "reference", "threshold")


def alert_table(alerts: Sequence[Alert], layers: int, heads: int) -> np.ndarray:
    """The alerts of one step as a fixed-shape float32 ``[layers, heads, len(ALERT_RULES), 4]`` table (columns
    :data:`TABLE_COLUMNS`), NaN where a head is not in alert for a rule: what the event file stores. Of two
    ``non_finite`` alerts of one head (two quantities), the first is kept; a layer rule's alert is in head 0."""
    table = np.full((layers, heads, len(ALERT_RULES), len(TABLE_COLUMNS)), np.nan, dtype=np.float32)
    for a in reversed(alerts):
        head = 0 if a.head is None else a.head
        table[a.layer, head, ALERT_RULES.index(a.rule)] = (a.since, a.value, a.reference, a.threshold)
    return table


def episodes(steps: Sequence[int], tables: np.ndarray, rules: Sequence[str] = ALERT_RULES) -> list[dict]:
    """Every alert episode of a run from its stacked :func:`alert_table`s: one dict per head, rule and ``since``.

    Args:
        steps: the steps of the tables, ascending, ``[n]``.
        tables: ``[n, layers, heads, rules, 4]``.
        rules: the rule names of the rules axis (the event file's content).

    Returns:
        ``{"layer", "head", "rule", "since", "last", "value", "reference", "threshold", "active"}`` dicts in
        order of ``since``, then layer, head, rule: ``last`` is the last step the head was in alert, ``value``
        (and the others) its values there, ``active`` whether it is in alert at the last step; ``head`` is None for
        a rule of ``LAYER_RULES`` (a whole layer).
    """
    found: dict[tuple[int, int, int, int], dict] = {}
    for i, step in enumerate(steps):
        for layer, head, r in zip(*np.nonzero(np.isfinite(tables[i, ..., 0])), strict=True):
            since, value, ref, threshold = (float(x) for x in tables[i, layer, head, r])
            key = (int(since), int(layer), int(head), int(r))
            found[key] = {
                "layer": int(layer),
                "head": None if str(rules[r]) in LAYER_RULES else int(head),
                "rule": str(rules[r]),
                "since": int(since),
                "last": int(step),
                "value": value,
                "reference": ref,
                "threshold": threshold,
                "active": i == len(steps) - 1,
            }
    return [found[k] for k in sorted(found)]
