"""The report's first screen: the run at a glance, then one card per answer to "what happened to the heads" (the
heads that drifted most from the pretrained model, the largest change of each statistic family, the heads the loss
depends on, the ablation's verdict), each with one sentence of meaning and a small figure of its heads over the
logged steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import numpy as np

from bertwatch.core.baseline import improvement_note
from bertwatch.core.verdict import CANNOT_TELL, LEVELS, NOTHING_AT_END, NOTHING_YET
from bertwatch.report.changes import HeadChange, biggest_changes, empty_stats, family_leaders
from bertwatch.report.events import verdict_steps
from bertwatch.report.figures import trajectory_figure
from bertwatch.report.markup import b64, escape, head_name, image, number
from bertwatch.report.pruning_section import answer_lines, curves_figure
from bertwatch.report.result import AblationResult
from bertwatch.report.training_section import changes_text, probe_note

__all__ = ["summary_section"]

#: What a family of statistics says about a head, in plain words (the families of ``core.stat_names.STAT_GROUPS``).
FAMILY_MEANINGS = {
    "Special tokens": "How much attention lands on [CLS], [SEP] and punctuation; a head with nothing to do often "
    "parks its attention there.",
    "Norm-based (Kobayashi)": "The same masses weighted by how much each attended vector moves the output, not by "
    "attention weight alone.",
    "Mixing": "How much of a token's new representation comes from other tokens, by contribution.",
    "Position": "Attention to the token itself, to the previous and to the next token.",
    "Spread": "How broad attention is: high entropy spreads it over many tokens, low focuses it on a few.",
    "Segments": "Attention kept inside the query's own sentence of a pair.",
    "Importance": "How strongly the loss reacts to each head, by its gradients.",
    "Stability": "The size of the attention scores; scores that keep growing announce an unstable run.",
    "Word classes (Kovaleva)": "Attention to pronouns, subjects, objects and negation.",
    "Word classes (UD share)": "Attention shared out over nouns, verbs, pronouns, … of annotated sentences.",
    "Other": "Statistics outside the plugin's families.",
}
_DRIFT_TEXT = {
    "drift_js": "How far each head's attention moved from the pretrained model's on the probe set (Jensen-Shannon "
    "divergence; 0 = unchanged). Heads that moved far are the ones fine-tuning rewrote.",
    "drift_cosine": "How far each head's attention moved from the pretrained model's on the probe set (cosine "
    "similarity; 1 = unchanged). Heads that moved far are the ones fine-tuning rewrote.",
}


def _card(title: str, sentence: str, body: str, figure: str = "", css: str = "card") -> str:
    return (
        f'<div class="{css}"><h3>{title}</h3><p class="meaning">{sentence}</p><p class="heads">{body}</p>{figure}</div>'
    )


def _trajectory(stat: str, entry: Mapping[str, Any], heads: Sequence[tuple[int, int]]) -> str:
    steps = entry.get("steps")
    if not heads or steps is None or len(steps) < 2:
        return ""
    png = trajectory_figure(steps, entry["values"], heads, stat)
    return image(b64(png), f"{stat} over the logged steps", "traj")


def _change_card(title: str, sentence: str, stat: str, entry: Mapping[str, Any], changes: list[HeadChange]) -> str:
    first, last = entry["first"][0], entry["last"][0]
    body = f"<code>{escape(stat)}</code>, step {first} → {last}: {changes_text(stat, changes)}"
    figure = _trajectory(stat, entry, [(c.layer, c.head) for c in changes])
    return _card(escape(title), escape(sentence), f'<span data-stat="{escape(stat)}">{body}</span>', figure)


def _drift_card(grids: Mapping[str, Any]) -> str:
    for stat in ("drift_js", "drift_cosine"):
        if stat in grids and grids[stat]["first"][0] != grids[stat]["last"][0]:
            return _change_card(
                "Drift from the pretrained model", _DRIFT_TEXT[stat], stat, grids[stat], _drift(stat, grids)
            )
    return ""


def _drift(stat: str, grids: Mapping[str, Any]) -> list[HeadChange]:
    return biggest_changes(stat, grids[stat])


def _importance_card(grids: Mapping[str, Any], results: Sequence[AblationResult] = ()) -> str:
    """The heads the loss depends on most (gradient importance, its last step). With an ablation of the same
    shape, each of them beside its measured Δ, and where the two disagree (the ablation finds no cost beyond
    resampling noise, or a gain) the card says so and why; without one, the card says what the gradient predicts."""
    entry = grids.get("head_importance")
    if entry is None:
        return ""
    step, last = entry["last"][0], np.asarray(entry["last"][1], dtype=np.float64)
    cells = [(l, h) for l, h in np.ndindex(last.shape) if np.isfinite(last[l, h])]
    cells.sort(key=lambda c: (-last[c], c))
    top = cells[:3]
    body = f"<code>head_importance</code> at step {step}: " + ", ".join(
        f"<b>{head_name(l, h)}</b> {number(last[l, h], 4)}" for l, h in top
    )
    slope = (
        "the gradient of the loss with respect to each head's gate (Michel et al. 2019), the loss's local slope "
        "at the full model"
    )
    ablation = next((r for r in results if r.shape == last.shape), None)
    if ablation is None:
        sentence = (
            f"The heads the loss depends on most: {slope}. By this first-order estimate disabling these should "
            "cost most; an ablation (bertwatch ablate) measures it."
        )
        return _card("The heads the loss depends on", sentence, body, _trajectory("head_importance", entry, top))
    measured, disagree = _measured(ablation, top)
    body += f"<br>ablation ({escape(ablation.mode)}), Δ {escape(_label(ablation))} when disabled: {measured}"
    sentence = f"The heads the loss depends on most: {slope}; the ablation measured what disabling each does."
    if disagree:
        names = ", ".join(head_name(l, h) for l, h, _ in disagree)
        what = "; ".join(f"disabling {head_name(l, h)} {word}" for l, h, word in disagree)
        body += (
            f"<br><b>Gradient importance and ablation disagree on {names}</b>: {what}. They measure different things: the gradient is the loss's local slope at the full model, the "
            "ablation the metric's change when the head is gone (not a small step, and the metric is not the "
            "loss). For what disabling a head does to the metric, the ablation is the measurement."
        )
    return _card("The heads the loss depends on", sentence, body, _trajectory("head_importance", entry, top))


def _label(result: AblationResult) -> str:
    return result.metrics[0]["label"] if result.metrics else result.metric


def _measured(result: AblationResult, heads: Sequence[tuple[int, int]]) -> tuple[str, list[tuple[int, int, str]]]:
    """Each head's ablation Δ with its interval and a word (costs, improves, within noise), and the heads where
    the ablation finds no cost beyond noise, with what it found."""
    greater = bool(result.config.get("greater_is_better", True))
    parts, disagree = [], []
    for l, h in heads:
        row = result.heads[l, h]
        if not np.isfinite(row[1]):
            parts.append(f"<b>{head_name(l, h)}</b> not measured")
            continue
        worse = row[3] < 0 if greater else row[2] > 0
        better = row[2] > 0 if greater else row[3] < 0
        word = "costs" if worse else "improves" if better else "within noise"
        parts.append(f"<b>{head_name(l, h)}</b> {row[1]:+.4f} [{row[2]:+.4f}, {row[3]:+.4f}] ({word})")
        if not worse:
            label = escape(_label(result))
            disagree.append((l, h, f"improves {label}" if better else f"costs no {label} beyond resampling noise"))
    return ", ".join(parts), disagree


def _verdict_card(result: AblationResult) -> str:
    """The ablation's verdict: how many heads can go and at what cost, and the single head that costs most."""
    greater = bool(result.config.get("greater_is_better", True))
    lines = [escape(line) for line in answer_lines(result)]
    if lines:
        lines[0] = f"<b>{lines[0]}</b>"  # the headline: how many heads can go, and what the examples resolve
    trivial = result.trivial
    if trivial is not None:  # against the constant answer: first when the model is no better than it
        said = [escape(line) for line in trivial.lines()]
        if trivial.no_better():
            lines = [f'<b class="no-better">{said[0]}</b>', *said[1:], *lines]
        else:
            lines = [*lines[:1], *said, *lines[1:]]
    heads = [(f"<b>{head_name(l, h)}</b> alone", result.heads[l, h]) for l, h in np.ndindex(result.shape)]
    layers = [(f"all of layer <b>L{l}</b>", row) for l, row in enumerate(result.layers)]
    for units in (heads, layers):
        rows = [(name, row) for name, row in units if np.isfinite(row[1])]
        if rows:
            name, row = min(rows, key=lambda r: r[1][1] if greater else -r[1][1])
            lines.append(
                f"disabling {name} costs most: Δ {escape(result.metric_label)} {number(row[1])} "
                f"[{number(row[2])}, {number(row[3])}]{_within_noise(row)}"
            )
    gains = [(l, h) for l, h in np.ndindex(result.shape) if improvement_note(*result.heads[l, h, 1:4], greater)]
    if gains:
        l, h = max(gains, key=lambda c: result.heads[c][1] if greater else -result.heads[c][1])
        row = result.heads[l, h]
        lines.append(
            f"disabling <b>{head_name(l, h)}</b> alone changes {escape(result.metric)} by {row[1]:+.4f} "
            f"[{row[2]:+.4f}, {row[3]:+.4f}]{escape(improvement_note(*row[1:4], greater))}"
        )
    if not result.pruning:  # the headline of the pruning answer says it otherwise
        lines.append(escape(result.resolution().clause()))
    sentence = (
        f"Each head and layer disabled ({escape(result.mode)}) on {result.num_examples} examples, baseline "
        f"{escape(result.metric_label)} {number(result.baseline)}: how many heads can go, and what the costliest cost."
    )
    body = "<br>".join(lines) or "no single head could be measured"
    figure = image(b64(curves_figure(result)), "pruning orders", "traj") if result.pruning else ""
    return _card(f"Ablation verdict ({escape(result.mode)})", sentence, body, figure, css="card verdict")


def _within_noise(row: np.ndarray) -> str:
    """ " (within resampling noise)" when the 95% interval of Δ holds 0."""
    return " (within resampling noise)" if row[2] <= 0 <= row[3] else ""


def _steps(grids: Mapping[str, Any]) -> list[int]:
    steps: set[int] = set()
    for entry in grids.values():
        steps.update(entry.get("steps") or (entry["first"][0], entry["last"][0]))
    return sorted(steps)


def _alerts_text(alerts: Mapping[str, Any] | None) -> str:
    if not alerts or not alerts.get("steps"):
        return "not measured in this run"
    episodes = alerts.get("episodes") or []
    if not episodes:
        return "none fired"
    active = sum(1 for e in episodes if e["active"])
    return f'<a href="#alerts">{len(episodes)} alert{"s" if len(episodes) != 1 else ""}, {active} still in force</a>'


def _verdict_text(training: Mapping[str, Any]) -> str | None:
    """The run's verdict (``core.verdict``) at its last judged step and since when, its reasons as a list, and
    the steps that were not healthy; None when the run wrote no verdict."""
    judged = verdict_steps(dict(training))
    if not judged:
        return None
    steps = [step for step, _, _ in judged]
    levels = [level for _, level, _ in judged]
    since = steps[-1]
    for step, level in zip(reversed(steps), reversed(levels)):
        if level != levels[-1]:
            break
        since = step
    text = f" at step {steps[-1]}, the last judged" + (f", since step {since}" if since != steps[-1] else "")
    reasons = "".join(f"<li>{escape(reason)}</li>" for reason in judged[-1][2])
    counts = []
    for level in (2, 1):
        marked = [step for step, have in zip(steps, levels) if have == level]
        if marked:
            listed = ", ".join(str(step) for step in marked[:6]) + (", ..." if len(marked) > 6 else "")
            counts.append(f"{LEVELS[level]} at {len(marked)} of {len(steps)} judged steps ({listed})")
    css = ("healthy", "at-risk", "failing")[levels[-1]]
    unknown = levels[-1] == 0 and tuple(judged[-1][2]) in ((NOTHING_YET,), (NOTHING_AT_END,))
    label = CANNOT_TELL if unknown else LEVELS[levels[-1]]
    return (
        f'<span class="run-verdict {css}" id="run-verdict"><b>{label}</b>{escape(text)}</span>'
        + (f'<ul class="verdict-reasons">{reasons}</ul>' if reasons else "")
        + (f'<span class="verdict-counts"><br>{escape("; ".join(counts).capitalize())}</span>' if counts else "")
    )


def _constant_cell(result: AblationResult) -> str:
    """``"; always 'paraphrase' 0.8120: no better"`` for the glance row (empty without a trivial baseline)."""
    found = result.trivial
    if found is None:
        return ""
    if found.value is None:
        return f"; no constant answer scores on {escape(found.label)}"
    verdict = "<b>no better</b>" if found.no_better() else "better"
    return f"; always &#x27;{escape(found.constant_name)}&#x27; {number(found.value)}: {verdict}"


def _short(model: str) -> str:
    """A model's folder by its last two parts (``…/all-MiniLM-L6-v2/model``); a Hub name as it is."""
    parts = PurePath(model).parts
    return model if len(parts) <= 2 else "…/" + "/".join(parts[-2:])


def _glance(
    results: Sequence[AblationResult], training: Mapping[str, Any] | None, more: Sequence[tuple[str, str]] = ()
) -> str:
    grids = (training or {}).get("grids") or {}
    rows: list[tuple[str, str]] = []
    shapes = [np.shape(e["last"][1]) for e in grids.values()] + [r.shape for r in results]
    models = sorted({str(r.config["model"]) for r in results if r.config.get("model")})
    watched = ((training or {}).get("probe") or {}).get("model")
    if not models and watched:
        models = [str(watched)]
    if shapes:
        layers, heads = max(shapes)
        names = "".join(f'<span title="{escape(m)}">{escape(_short(m))}</span> · ' for m in models)
        rows.append(("model", f"{names}{layers} layers × {heads} heads"))
    if training and (grids or training.get("series")):
        runs = training.get("runs") or []
        named = f" ({', '.join(runs)})" if runs and runs != ["."] else ""
        rows.append(("run", escape(str(training.get("source", "")) + named)))
        steps = _steps(grids)
        if steps:
            rows.append(("steps measured", f"{len(steps)}, from step {steps[0]} to step {steps[-1]}"))
        rows.append(("probe set", f'<span id="probe-length">{escape(probe_note(training.get("probe")))}</span>'))
        rows.append(("alerts", _alerts_text(training.get("alerts"))))
        verdict = _verdict_text(training)
        if verdict:
            rows.append(("run verdict", verdict))
        empty = empty_stats(grids)
        count = len(grids) - len(empty)
        rows.append(("statistics", f'{count} with values (<a href="#details">details</a>)'))
    for r in results:
        rows.append(
            (
                f"ablation ({escape(r.mode)})",
                f"{r.num_examples} examples, baseline {escape(r.metric_label)} {number(r.baseline)}"
                + _constant_cell(r),
            )
        )
    rows.extend(more)
    cells = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="glance">{cells}</dl>' if rows else ""


def summary_section(
    results: Sequence[AblationResult], training: Mapping[str, Any] | None, glance: Sequence[tuple[str, str]] = ()
) -> str:
    """The first screen (see the module docstring): the glance table (``glance``: more rows, ``(name, HTML)``, at its
    end), then the cards, the ablation's verdict and drift first. Empty when there is neither a result nor a
    training grid nor a row."""
    grids = {s: e for s, e in ((training or {}).get("grids") or {}).items() if s not in empty_stats({s: e})}
    lead = [_verdict_card(r) for r in results]  # the first screen leads with what the ablation measured
    cards = [_drift_card(grids)]
    cards.append(_importance_card(grids, results))
    for family, stat, changes in family_leaders(grids):
        if stat == "head_importance" and cards[-1]:
            continue  # the card of the heads the loss depends on shows it already
        title = f"{family}: largest change"
        cards.append(_change_card(title, FAMILY_MEANINGS.get(family, ""), stat, grids[stat], changes))
    cards = [c for c in cards if c]
    table = _glance(results, training, glance)
    if not table and not cards and not lead:
        return ""
    return (
        '<section id="summary"><h2>What happened to the heads</h2>'
        + (f'<div class="cards lead">{"".join(lead)}</div>' if lead else "")
        + table
        + (f'<div class="cards">{"".join(cards)}</div>' if cards else "")
        + "</section>"
    )
