"""The thresholds of the run verdict (``core.verdict``), each with its command-line flag and its check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertwatch.core.schema import Checked, Flag, number, option, switch, whole

__all__ = ["VerdictSettings"]


def _fraction(flag: str, default: float, help_text: str, below: float | None = None) -> Any:
    """A share or fraction of the verdict, in (0, 1] (below ``below`` when given), set with ``flag``."""
    check = number(0.0, below=below) if below is not None else number(0.0, at_most=1.0)
    return option(default, help_text, check, Flag((flag,), "float", metavar="X"))


@dataclass(frozen=True, eq=False, init=False)
class VerdictSettings(Checked):
    """The thresholds of the run verdict (the rules: ``core.verdict``; ``docs/callbacks.md`` justifies each
    default), for ``WatchSettings(verdict=...)``.

    Args:
        collapse_share: collapse: this share of the probe examples or more predicted as one class.
        spread_fraction: collapse of a regression head: the spread (std) of its predictions down to this fraction
            of step 0's or less.
        vanish_fraction: failing at once: the predictions collapsed and every lower layer's gradient norm below
            this fraction of step 0's.
        risk_fraction: gradient at risk: the lower layers' gradient norm below this fraction of step 0's.
        lower_share: the lower layers, for the gradient rules: this share of the layers from the input side (at
            least one).
        loss_line: a loss shows learning when its whole interval is below this fraction of the loss of always
            guessing the label frequencies, and not learning when it is at or above it.
        hold_share: failing once a sign of not learning has lasted this share of the run's steps.
        confidence: the confidence of every interval the verdict reads (probe loss, evaluation, training loss).
        alerts_at_risk: the run is at risk once this many stability alerts are in force, unless it clearly learns.
        layer_gradients: the gradient pass takes the encoder layers' gradient norms (one ``torch.autograd.grad``
            call with the head gates, but the weight gradients of every layer to compute: about 1.5 times the
            gradient pass on MiniLM on a CPU, ``docs/performance.md``); without them the vanishing rules are silent.

    Raises:
        TypeError: a value that is not a number, or ``layer_gradients`` not True or False.
        ValueError: a fraction outside (0, 1], ``confidence`` of 1, a count below 1, or ``vanish_fraction`` above
            ``risk_fraction``.

    Example:
        >>> VerdictSettings(hold_share=0.4).hold_share
        0.4
        >>> VerdictSettings(vanish_fraction=0.5)
        Traceback (most recent call last):
        ValueError: VerdictSettings.vanish_fraction must not exceed risk_fraction
    """

    collapse_share: float = _fraction(
        "--verdict-collapse-share", 0.95, "collapse: this share of the probe examples or more predicted as one class"
    )
    spread_fraction: float = _fraction(
        "--verdict-spread-fraction", 0.05,
        "collapse of a regression head: the spread (std) of its predictions down to this fraction of step 0's or less",
    )  # fmt: skip
    vanish_fraction: float = _fraction(
        "--verdict-vanish-fraction", 0.01, "failing at once: the predictions collapsed and every lower layer's "
        "gradient norm below this fraction of step 0's",
    )  # fmt: skip
    risk_fraction: float = _fraction(
        "--verdict-risk-fraction", 0.1, "gradient at risk: the lower layers' gradient norm below this fraction of "
        "step 0's",
    )  # fmt: skip
    lower_share: float = _fraction(
        "--verdict-lower-share", 1 / 3,
        "the lower layers, for the gradient rules: this share of the layers from the input side (at least one)",
    )  # fmt: skip
    loss_line: float = _fraction(
        "--verdict-loss-line", 0.95, "a loss shows learning when its whole interval is below this fraction of the "
        "loss of always guessing the label frequencies, and not learning when it is at or above it",
    )  # fmt: skip
    hold_share: float = _fraction(
        "--verdict-hold-share", 0.3, "failing once a sign of not learning has lasted this share of the run's steps"
    )
    confidence: float = _fraction(
        "--verdict-confidence", 0.95,
        "the confidence of every interval the verdict reads (probe loss, evaluation, training loss)", below=1.0,
    )  # fmt: skip
    alerts_at_risk: int = option(
        1, "the run is at risk once this many stability alerts are in force, unless it clearly learns", whole(1),
        Flag(("--verdict-alerts-at-risk",), "int"),
    )  # fmt: skip
    layer_gradients: bool = option(
        True, "measure each layer's gradient norm, which the vanishing-gradient rule reads (the gradient statistics "
        "then take about 1.5x as long)", switch(),
        Flag(("--no-verdict-layer-gradients",), "false",
             help="do not measure each layer's gradient norm (faster; the vanishing-gradient rule is then silent)"),
    )  # fmt: skip

    not_above = (("vanish_fraction", "risk_fraction"),)
