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
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_DELTA", "Removable", "removable", "removable_text"]

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
