"""The bodies of the plugin's ``/ablation`` route that are not table reads: what an ablation measured, its pruning
curves, the q-values of its cells, and its answers in words (the texts of :mod:`bertwatch.core.removable` and
:mod:`bertwatch.core.resolution`, so the view shows them and never derives them). Imports only numpy."""

from __future__ import annotations

from typing import Any

import numpy as np

from bertwatch.core.baseline import ConstantComparison
from bertwatch.core.removable import answer_lines, headline, short_answer
from bertwatch.core.resolution import Resolution
from bertwatch.core.significance import benjamini_hochberg
from bertwatch.core.task_names import describe, metric_entries, metric_label, task_label
from bertwatch.tb.series import f32_list

__all__ = ["ablation_about", "ablation_words", "pruning_curves", "q_values", "trivial_words"]


def pruning_curves(content: dict, table) -> dict:
    """The pruning curves of a ``pruning_curves`` summary for the view: ``columns``, ``rows`` ``[k][columns]``
    (Δ per step, null where absent), ``delta``, ``confidence``, ``removable`` (the "N% at δ" answers),
    ``randomOrders``, ``totalHeads``."""
    return {
        "columns": list(content.get("columns", [])),
        "rows": f32_list(table),
        "delta": content.get("delta"),
        "confidence": content.get("confidence"),
        "removable": content.get("removable"),
        "randomOrders": content.get("random_orders", 0),
        "totalHeads": content.get("total_heads"),
    }


def ablation_about(content: dict) -> dict:
    """What an ablation measured, from its tables' content: ``taskType``, ``taskLabel``, ``metrics`` (name,
    label, definition, baseline value; the compared metric first) and the one-line ``description``. Tables
    written before these were recorded give ``taskType`` None and the compared metric's name from
    :mod:`bertwatch.core.task_names`."""
    metric = content.get("metric")
    task_type = content.get("task_type") if isinstance(content.get("task_type"), str) else None
    given = [m for m in content.get("metrics") or [] if isinstance(m, dict) and isinstance(m.get("name"), str)]
    if not given:
        given = metric_entries([metric] if isinstance(metric, str) else [])
    metrics = [
        {
            "name": m["name"],
            "label": str(m.get("label") or metric_label(m["name"])),
            "description": str(m.get("description") or ""),
            "baseline": m.get("baseline"),
        }
        for m in given
    ]
    return {
        "taskType": task_type,
        "taskLabel": task_label(task_type) or None,
        "metrics": metrics,
        "description": describe(task_type, metrics),
    }


def q_values(table: np.ndarray, fields) -> list | None:
    """Benjamini-Hochberg q-values over all cells of an ablation table ``[..., fields]`` (its ``p`` field), in the
    table's shape without the field axis; None when the table has no p-values."""
    if "p" not in fields:
        return None
    p = np.asarray(table, dtype=np.float64)[..., list(fields).index("p")]
    return f32_list(benjamini_hochberg(p.ravel()).reshape(p.shape))


def trivial_words(content: dict) -> dict[str, Any] | None:
    """The full model against the constant answer (:mod:`bertwatch.core.baseline`) for the view: ``noBetter``,
    ``collapsed``, ``lines`` (the verdict sentence, then the predicted class shares), ``constantName``,
    ``value`` (the constant's score; None where a constant has none), ``label``, ``delta``, ``ciLow``,
    ``ciHigh``; None in logs that do not record it."""
    doc = content.get("trivial_baseline")
    if not isinstance(doc, dict) or not doc.get("metric"):
        return None
    found = ConstantComparison.from_json(doc)
    return {
        "noBetter": found.no_better(),
        "collapsed": found.collapsed() is not None,
        "lines": found.lines(),
        "constantName": found.constant_name,
        "value": found.value,
        "label": found.label,
        "delta": found.delta[0] if found.delta else None,
        "ciLow": found.ci_low[0] if found.ci_low else None,
        "ciHigh": found.ci_high[0] if found.ci_high else None,
    }


def ablation_words(content: dict, curves_content: dict | None) -> dict[str, Any]:
    """The answers of one mode's tables in words: ``greaterIsBetter`` (the metric's direction, which colours say
    "worse"), ``resolution`` (what the examples resolve, :meth:`Resolution.clause`; None in logs that do not
    record it), ``headline`` and ``answers`` (:func:`bertwatch.core.removable.headline` and ``answer_lines``),
    ``removable`` (``{"label", "value"}``: the headline's share in a few words, ``"Heads removable within δ = 0.04"``
    and ``"up to 30%"``); None, [] and None without pruning curves."""
    answers = (curves_content or {}).get("removable") or {}
    greater = content.get("greater_is_better", answers.get("greater_is_better", True))
    found = answers.get("resolution") or content.get("resolution")
    label = ablation_about(content)["metrics"][0]["label"] if content.get("metric") else "metric"
    words: dict[str, Any] = {
        "greaterIsBetter": greater is not False,
        "resolution": Resolution.from_json(found).clause() if found else None,
        "headline": None,
        "answers": [],
        "removable": None,
        "trivial": trivial_words(content),
    }
    if answers.get("delta") is not None:
        total = int(curves_content.get("total_heads") or 0)
        lines = answer_lines(answers, total, label)
        delta, answer = short_answer(answers)
        share = "—" if answer is None else "0%" if answer.step < 0 else f"up to {answer.fraction:.0%}"
        share += " or more" if answer is not None and answer.censored else ""
        tile = {"label": f"Heads removable within δ = {delta:g}", "value": share}
        words.update(headline=headline(answers, total, label), answers=lines[1:], removable=tile)
    return words
