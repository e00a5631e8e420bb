"""How many heads can go: the one rule behind "up to N% of heads removed with the metric within δ of the baseline".

Shared by the sweep (``ablation.json``), the report, the plugin's Ablation view and ``bertwatch ablate``'s summary.

The rule, on one pruning curve (steps in the order they prune, each with the paired-bootstrap interval
``[ci_low, ci_high]`` of Δ = metric(step) − metric(unpruned) at the sweep's confidence, 95% by default):

* a step **holds** when its interval lies within δ of no change on the harmful side: ``ci_low >= -δ`` when higher
  is better, ``ci_high <= δ`` when lower is better (a loss); an undefined interval (NaN) does not hold;
* the answer is the largest fraction of heads pruned at a step that holds **and every earlier step holds too**
  (0 when the first step does not hold). A later step that holds again after one that failed does not count: the
  curve is read from the left, as a user would prune.
* ``censored`` says that every evaluated step held while heads were left: the curve was not followed further, so
  the true fraction may be larger (the curve stops at the importance curve's threshold, see docs/ablation.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bertwatch.core.resolution import Resolution

__all__ = ["DEFAULT_DELTA", "Removable", "answer_lines", "headline", "removable", "removable_text", "short_answer"]

#: δ by default: one point of a metric on the 0-1 scale (accuracy 0.01 = one percentage point).
DEFAULT_DELTA = 0.01


@dataclass(frozen=True)
class Removable:
    """The answer on one curve: ``fraction`` of all heads (``pruned`` of them) at the last step that holds with
    every earlier one (``step``: its index, -1 when none holds); ``censored`` when every evaluated step held."""

    fraction: float
    pruned: int
    step: int
    censored: bool

    def to_json(self) -> dict[str, float | int | bool]:
        return {"fraction": self.fraction, "pruned": self.pruned, "step": self.step, "censored": self.censored}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> Removable | None:
        if not doc:
            return None
        return cls(float(doc["fraction"]), int(doc["pruned"]), int(doc["step"]), bool(doc.get("censored", False)))


def _holds(low: float | None, high: float | None, delta: float, greater_is_better: bool) -> bool:
    bound = low if greater_is_better else high
    if bound is None or not math.isfinite(float(bound)):
        return False
    return float(bound) >= -delta if greater_is_better else float(bound) <= delta


def removable(
    fractions: Sequence[float],
    pruned: Sequence[int],
    ci_low: Sequence[float | None],
    ci_high: Sequence[float | None],
    delta: float,
    greater_is_better: bool = True,
) -> Removable:
    """The largest fraction of heads removed with Δ's interval within ``delta`` at that step and every earlier one.

    Args:
        fractions: ``[steps]`` fraction of all heads pruned at each step, increasing.
        pruned: ``[steps]`` number of heads pruned at each step.
        ci_low, ci_high: ``[steps]`` the interval of Δ (step minus unpruned) at each step; None or NaN: undefined.
        delta: δ >= 0, in the metric's units.
        greater_is_better: the metric's direction (False for a loss: the interval's upper end is checked).
    Returns:
        :class:`Removable`; fraction 0 and step -1 when the first step already fails (or there is no step).
    Example:
        >>> removable([0.1, 0.2, 0.3], [7, 14, 21], [-0.004, -0.009, -0.02], [0.01, 0.0, -0.001], 0.01)
        Removable(fraction=0.2, pruned=14, step=1, censored=False)
    """
    if not delta >= 0:
        raise ValueError(f"delta must be a number >= 0, got {delta}")
    last = -1
    for j in range(len(fractions)):
        if not _holds(ci_low[j], ci_high[j], delta, greater_is_better):
            break
        last = j
    if last < 0:
        return Removable(0.0, 0, -1, False)
    censored = last == len(fractions) - 1 and float(fractions[last]) < 1
    return Removable(float(fractions[last]), int(pruned[last]), last, censored)


def removable_text(answer: Removable, total_heads: int, metric: str, delta: float, confidence: float = 0.95) -> str:
    """``"up to 40% of heads (29 of 72) removed with accuracy within 0.01 of the baseline (95% interval)"``."""
    level = f"{confidence:.0%} interval"
    within = f"with {metric} within {delta:g} of the baseline ({level})"
    if answer.step < 0:
        return f"no pruning step keeps {metric} within {delta:g} of the baseline ({level})"
    more = " or more (every step tried held)" if answer.censored else ""
    return f"up to {answer.fraction:.0%}{more} of heads ({answer.pruned} of {total_heads}) removed {within}"


def _can_go(answer: Removable | None, total: int, delta: float | None = None) -> str:
    """``"up to 30% of the heads (21 of 72) can go"``, prefixed ``"at δ = 0.04, "`` when ``delta`` is given."""
    at = f"at δ = {delta:g}, " if delta is not None else ""
    if answer is None or answer.step < 0:
        return f"{at}not even the first pruning step holds"
    more = " or more (every step tried held)" if answer.censored else ""
    return f"{at}up to {answer.fraction:.0%}{more} of the heads ({answer.pruned} of {total}) can go"


def headline(answers: Mapping[str, Any], total_heads: int, metric: str) -> str:
    """The pruning answer in one sentence, with what the evaluation set resolves (:mod:`bertwatch.core.resolution`).

    ``answers`` is the JSON form of the answers (``AblationResult.removable_json``: ``delta``, ``confidence``,
    ``importance``, and ``resolution`` with ``at_resolution`` where the sweep recorded them). When the examples
    resolve δ: that they do, and the importance order's share (``"872 examples resolve a change of 0.01 (one example
    is 0.0011; the 95% interval where the answer stops is ±0.008): up to 40% of the heads (29 of 72) can go"``).
    When they do not: that they cannot tell, the share at the δ they resolve, and the examples that would resolve
    δ. Files without a resolution get the importance order's answer alone.

    Example:
        >>> answers = {"delta": 0.01, "confidence": 0.95, "importance": {"fraction": 13 / 72, "pruned": 13, "step": 1},
        ...     "resolution": {"examples": 128, "metric": "accuracy", "one_example": 0.0078125, "how": "flip",
        ...                    "half_width": 0.0390625, "width_of": "stop"},
        ...     "at_resolution": {"delta": 0.04, "importance": {"fraction": 0.25, "pruned": 18, "step": 2}}}
        >>> print(headline(answers, 72, "accuracy"))
        128 examples cannot tell a change of 0.01 (one example is 0.0078; the 95% interval where the answer stops is ±0.039): at δ = 0.04, up to 25% of the heads (18 of 72) can go; about 2,000 examples would resolve 0.01
    """
    delta, confidence = float(answers["delta"]), float(answers.get("confidence") or 0.95)
    importance = Removable.from_json(answers.get("importance"))
    if not answers.get("resolution"):
        return removable_text(importance or Removable(0.0, 0, -1, False), total_heads, metric, delta, confidence)
    resolution = Resolution.from_json(answers["resolution"])
    if resolution.resolves(delta):
        return f"{resolution.resolves_words(delta)}: {_can_go(importance, total_heads)}"
    wider = answers.get("at_resolution") or {}
    text = resolution.cannot_tell(delta)
    if wider.get("delta"):
        text += ": " + _can_go(Removable.from_json(wider.get("importance")), total_heads, float(wider["delta"]))
    more = resolution.would_resolve(delta)
    return text + (f"; {more}" if more else "")


def short_answer(answers: Mapping[str, Any]) -> tuple[float, Removable | None]:
    """The importance order's answer at the δ the headline reads it at (``answers`` as in :func:`headline`): the
    sweep's δ when the examples resolve it, else the δ they resolve; (δ, answer).

    Example:
        >>> short_answer({"delta": 0.01, "importance": {"fraction": 0.1, "pruned": 7, "step": 0}})
        (0.01, Removable(fraction=0.1, pruned=7, step=0, censored=False))
    """
    delta = float(answers["delta"])
    wider = answers.get("at_resolution") or {}
    resolution = answers.get("resolution")
    if resolution and wider.get("delta") and not Resolution.from_json(resolution).resolves(delta):
        return float(wider["delta"]), Removable.from_json(wider.get("importance"))
    return delta, Removable.from_json(answers.get("importance"))


def answer_lines(answers: Mapping[str, Any], total_heads: int, metric: str) -> list[str]:
    """The pruning answers as people read them (``answers`` as in :func:`headline`): the :func:`headline` first,
    then one line per order at the sweep's δ: the importance order's, the iterative order's, and the random
    orders' median with their range.

    Example:
        >>> answer_lines({"delta": 0.01, "importance": {"fraction": 0.4, "pruned": 29, "step": 3},
        ...               "random": [{"fraction": 0.1, "pruned": 7, "step": 0}]}, 72, "accuracy")[2]
        'random orders (1): median 10% of heads, range 10%-10%'
    """
    delta, confidence = float(answers["delta"]), float(answers.get("confidence") or 0.95)
    lines = [headline(answers, total_heads, metric)]
    for key, name in (("importance", "importance order"), ("iterative", "iterative order")):
        answer = Removable.from_json(answers.get(key))
        if answer is not None:
            lines.append(f"{name}: {removable_text(answer, total_heads, metric, delta, confidence)}")
    randoms = [Removable.from_json(r) for r in answers.get("random") or []]
    if randoms:
        fractions = sorted(r.fraction for r in randoms)
        median = (fractions[(len(fractions) - 1) // 2] + fractions[len(fractions) // 2]) / 2
        more = " (some orders held at every step tried)" if any(r.censored for r in randoms) else ""
        lines.append(
            f"random orders ({len(randoms)}): median {median:.0%} of heads, range "
            f"{fractions[0]:.0%}-{fractions[-1]:.0%}{more}"
        )
    return lines
