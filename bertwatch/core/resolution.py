"""What an evaluation set of n examples can resolve: one example's share of the metric, the typical width of the
intervals the answers compare with δ, and how many examples would resolve a smaller δ.

Shared by the ablation (``ablation.json``, the report, the plugin's Ablation view, ``bertwatch ablate``'s summary)
and ``bertwatch ship``'s readings. The rule:

* **one example's share**: the largest change of the metric one example can make. For accuracy (and any metric
  that is a mean of per-example scores in [0, 1]) it is 1/n; for F1 or Matthews it is the largest change when one
  example's predicted class changes, on the measured confusion counts (``how="flip"``); for a metric with no such
  bound (a correlation, a loss, a metric of summed counts) the largest change when one example is left out
  (``how="left out"``); None when not known (a ``compute_metrics`` the sweep cannot take apart).
* **the interval width**: the half-width ``(ci_high - ci_low) / 2`` of the interval an answer turns on. For the
  pruning answer that is the step where it stops, the first step that fails at δ (``width_of="stop"``; the widest
  step when every step holds, ``"widest"``): a pruning curve's intervals widen as more predictions change, so the
  step the answer stops at is the one whose width decides it. Elsewhere (single heads, ``bertwatch ship``'s
  variants) the median half-width of the intervals, leaving out intervals of width 0 (a configuration that changed
  no prediction says nothing about the set's resolution; ``"median"``). A paired-bootstrap interval of a change
  in accuracy is about ``±1.96·√(d/n)`` with ``d`` the share of predictions that changed, so its width shrinks as
  ``1/√n``.
* **resolves δ** when neither the typical half-width nor one example's share exceeds δ; otherwise no interval of
  a typical change can fit within δ of "no change", and the answer says so in words with what it can say: the
  answer at the smallest round δ the set resolves (:func:`round_up`), and the examples that would resolve δ,
  ``n·(half-width/δ)²`` (the width's ``1/√n`` scaling), at least ``1/δ`` when one example's share is ``1/n``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bertwatch.core.task_names import metric_label

__all__ = ["Resolution", "examples_text", "round_up", "typical_half_width"]

#: The round values :func:`round_up` picks from, per power of ten.
_ROUND = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def typical_half_width(lows: Iterable[float | None], highs: Iterable[float | None]) -> float | None:
    """The median half-width of the finite intervals of non-zero width; None when there is none.

    Example:
        >>> typical_half_width([-0.03, -0.05, 0.0, None], [0.01, 0.01, 0.0, None])
        0.025
    """
    widths = sorted(
        (float(hi) - float(lo)) / 2
        for lo, hi in zip(lows, highs)
        if lo is not None and hi is not None and math.isfinite(float(lo)) and math.isfinite(float(hi)) and hi > lo
    )
    if not widths:
        return None
    mid = len(widths) // 2
    return widths[mid] if len(widths) % 2 else (widths[mid - 1] + widths[mid]) / 2


def round_up(value: float) -> float:
    """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 (times a power of ten) at or above ``value`` > 0.

    Example:
        >>> round_up(0.037), round_up(0.011), round_up(0.02)
        (0.04, 0.015, 0.02)
    """
    if not value > 0 or not math.isfinite(value):
        raise ValueError(f"value must be a finite number > 0, got {value}")
    power = 10.0 ** math.floor(math.log10(value))
    for step in _ROUND:
        if step * power >= value * (1 - 1e-12):
            return float(f"{step * power:.12g}")
    return 10 * power  # pragma: no cover (10 is in _ROUND)


def examples_text(count: int) -> str:
    """A count of examples to two significant digits, with thousands separators: ``1752 -> "1,800"``."""
    digits = max(0, len(str(int(count))) - 2)
    return f"{int(round(count, -digits)):,}"


def _short(value: float) -> str:
    """Two significant digits: 0.0078125 -> "0.0078", 0.0371 -> "0.037"."""
    return f"{value:.2g}"


@dataclass(frozen=True)
class Resolution:
    """What ``examples`` evaluation examples resolve for one metric (see the module docstring).

    ``one_example``: the largest change of the metric one example makes (None: not known); ``how``: ``"flip"`` (one
    example's prediction changes) or ``"left out"`` (one example left out); ``half_width``: the typical half-width
    of the intervals (None when no interval had a width); ``width_from``: which intervals, in words; ``confidence``:
    their level.
    """

    examples: int
    metric: str
    one_example: float | None
    how: str
    half_width: float | None
    width_from: str
    confidence: float = 0.95
    width_of: str = "median"
    #: the interval where a pruning answer stops lies wholly beyond δ (that step is shown to cost more than δ):
    #: the answer is decided by the data, however wide the interval
    beyond: bool = False

    @property
    def limit(self) -> float:
        """The smallest δ this set resolves: the larger of the typical half-width and one example's share (0 when
        neither is known)."""
        return max(v for v in (self.one_example, self.half_width, 0.0) if v is not None)

    def resolves(self, delta: float) -> bool:
        """Whether a change of ``delta`` can be told apart from none at this sample size (or the step that decides
        the answer was shown to cost more than ``delta`` all the same)."""
        if self.beyond:
            return float(delta) >= (self.one_example or 0.0)
        return float(delta) >= self.limit

    def wider_delta(self) -> float | None:
        """The round δ the answer is read at when ``delta`` is below the limit (None when the limit is 0)."""
        return round_up(self.limit) if self.limit > 0 else None

    def examples_for(self, delta: float) -> int | None:
        """Examples that would resolve ``delta``: ``n·(half-width/δ)²``, at least ``1/δ`` where one example's share
        is ``1/n``; None when neither can be said."""
        if not delta > 0:
            return None
        needed = []
        if self.half_width:
            needed.append(self.examples * (self.half_width / delta) ** 2)
        if self.one_example and self.how == "flip":
            needed.append(self.examples * self.one_example / delta)
        return math.ceil(max(needed)) if needed else None

    def one_example_words(self) -> str:
        """``"one example is 0.0078"``, ``"one example moves F1 by up to 0.012"``, ``"leaving one example out moves
        Pearson by up to 0.031"``, or that it is not known."""
        label = metric_label(self.metric)  # a key ("f1") or a label ("F1") reads as its label
        if self.one_example is None:
            return f"one example's share of {label} is not known"
        if self.how == "left out":
            return f"leaving one example out moves {label} by up to {_short(self.one_example)}"
        if math.isclose(self.one_example, 1 / max(1, self.examples), rel_tol=1e-9):
            return f"one example is {_short(self.one_example)}"
        return f"one example moves {label} by up to {_short(self.one_example)}"

    def width_words(self) -> str:
        """``"the 95% intervals are about ±0.037"``, ``"the 95% interval where the answer stops is ±0.039"``,
        ``"the widest 95% interval is ±0.012"`` (or that every interval had width 0)."""
        level = f"{self.confidence:.0%}"
        if self.half_width is None:
            return f"no {level} interval had a width"
        width = _short(self.half_width)
        if self.width_of == "stop":
            beyond = " and lies beyond δ" if self.beyond else ""
            return f"the {level} interval where the answer stops is ±{width}{beyond}"
        if self.width_of == "widest":
            return f"the widest {level} interval is ±{width}"
        return f"the {level} intervals are about ±{width}"

    def clause(self) -> str:
        """``"128 examples: one example is 0.0078; the 95% intervals are about ±0.037"``."""
        return f"{self.examples:,} examples: {self.one_example_words()}; {self.width_words()}"

    def cannot_tell(self, delta: float) -> str:
        """``"128 examples cannot tell a change of 0.01 (one example is 0.0078; the 95% intervals are about
        ±0.037)"``."""
        return (
            f"{self.examples:,} examples cannot tell a change of {delta:g} "
            f"({self.one_example_words()}; {self.width_words()})"
        )

    def resolves_words(self, delta: float) -> str:
        """``"872 examples resolve a change of 0.01 (one example is 0.0011; the 95% intervals are about
        ±0.0081)"``."""
        return (
            f"{self.examples:,} examples resolve a change of {delta:g} "
            f"({self.one_example_words()}; {self.width_words()})"
        )

    def would_resolve(self, delta: float) -> str:
        """``"about 1,800 examples would resolve 0.01"`` ('' when it cannot be said)."""
        needed = self.examples_for(delta)
        return f"about {examples_text(needed)} examples would resolve {delta:g}" if needed else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "examples": int(self.examples),
            "metric": self.metric,
            "one_example": self.one_example,
            "how": self.how,
            "half_width": self.half_width,
            "width_from": self.width_from,
            "width_of": self.width_of,
            "beyond": bool(self.beyond),
            "confidence": float(self.confidence),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Resolution:
        def number(key: str) -> float | None:
            value = doc.get(key)
            return None if value is None or not math.isfinite(float(value)) else float(value)

        return cls(
            examples=int(doc["examples"]),
            metric=str(doc.get("metric") or "metric"),
            one_example=number("one_example"),
            how=str(doc.get("how") or ""),
            half_width=number("half_width"),
            width_from=str(doc.get("width_from") or ""),
            width_of=str(doc.get("width_of") or "median"),
            beyond=bool(doc.get("beyond", False)),
            confidence=float(doc.get("confidence") or 0.95),
        )
