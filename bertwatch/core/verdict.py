"""Will this fine-tune fail? The verdict on a run at each probe step, from its history of run-health signals
(``core.health_names``) and the stability alerts in force. Torch-free: plain numbers in, a :class:`Verdict` out.

The rules (``docs/callbacks.md``, "The verdict"; thresholds in :class:`VerdictSettings`, justified there from
Mosbach et al. 2021 and Dodge et al. 2020). Every comparison is with the first step of the history (the
reference, step 0 in a run started from scratch), and a condition *holds* over the trailing run of consecutive
probe steps after the reference where it is true (``since``: the first of them):

- **collapse**: the share of probe examples predicted as one class is ``collapse_share`` or more (single-label
  classification), or the predictions' standard deviation fell to ``spread_fraction`` of the reference's or less
  (regression);
- **vanishing**: every lower layer's gradient norm (the first ``lower_share`` of the layers, at least one) fell
  below ``vanish_fraction`` of its reference value (``risk_fraction``: the same, at risk);
- **stuck**: the probe loss is ``stuck_fraction`` of its baseline or more: the prior loss, the loss of the best
  constant prediction (``prior_loss``: the label entropy, Mosbach et al.'s mark of a failed run), where the task
  head gives one, else the reference's probe loss (it has not fallen);
- **non-finite**: the probe loss or a layer's gradient norm is NaN or infinite where the reference's is finite.

"failing": non-finite, or a collapse that held for ``patience`` probe steps together with a vanishing gradient or
a stuck loss that held as long. "at risk": a collapse now, a lower-layer gradient below ``risk_fraction`` now, a
loss stuck for ``patience`` steps, or ``alerts_at_risk`` stability alerts in force. "healthy" otherwise. A signal
that is NaN at the reference (a task head that cannot give it) leaves its rule silent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

from bertwatch.core.health_names import (
    LOSS_MEAN,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PREDICTION_STD,
    PRIOR_LOSS,
    layer_of,
)

__all__ = ["LEVELS", "VERDICT_SERIES", "Verdict", "VerdictSettings", "judge_run", "lower_gradient_ratio"]

#: The verdict's levels, by number (the ``verdict`` series' ``level``).
LEVELS: tuple[str, ...] = ("healthy", "at risk", "failing")
#: The named-values series the verdict is written as.
VERDICT_SERIES = "verdict"

Health = Mapping[str, float]


@dataclass(frozen=True)
class VerdictSettings:
    """The thresholds of the run verdict (the rules: module doc; ``docs/callbacks.md`` justifies each default), for
    ``WatchSettings(verdict=...)``.

    Args:
        collapse_share: collapse: this share of the probe examples or more predicted as one class.
        spread_fraction: collapse of a regression head: the spread (std) of its predictions down to this fraction
            of step 0's or less.
        vanish_fraction: vanishing gradient: every lower layer's gradient norm below this fraction of step 0's.
        risk_fraction: gradient at risk: the lower layers' gradient norm below this fraction of step 0's.
        lower_share: the lower layers, for the gradient rules: this share of the layers from the input side (at
            least one).
        stuck_fraction: stuck loss: the probe loss still at least this fraction of the loss of always guessing the
            label frequencies.
        patience: measured steps in a row a collapse, with a vanishing gradient or a stuck loss, must hold before
            the run is failing.
        alerts_at_risk: the run is at risk once this many stability alerts are in force.
        layer_gradients: the gradient pass takes the encoder layers' gradient norms (one ``torch.autograd.grad``
            call with the head gates, but the weight gradients of every layer to compute: about 1.5 times the
            gradient pass on MiniLM on a CPU, ``docs/performance.md``); without them the vanishing rule is silent.

    Raises:
        TypeError: ``layer_gradients`` not True or False.
        ValueError: a fraction outside (0, 1], a count below 1, or ``vanish_fraction`` above ``risk_fraction``.

    Example:
        >>> VerdictSettings(patience=5).patience
        5
        >>> VerdictSettings(vanish_fraction=0.5)
        Traceback (most recent call last):
        ValueError: vanish_fraction must not exceed risk_fraction
    """

    collapse_share: float = 0.95
    spread_fraction: float = 0.05
    vanish_fraction: float = 0.01
    risk_fraction: float = 0.1
    lower_share: float = 1 / 3
    stuck_fraction: float = 0.98
    patience: int = 3
    alerts_at_risk: int = 1
    layer_gradients: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "layer_gradients":
                if not isinstance(value, bool):
                    raise TypeError(f"layer_gradients must be True or False, not {value!r}")
            elif f.name in ("patience", "alerts_at_risk"):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"{f.name} must be an integer >= 1, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{f.name} must be a number in (0, 1], got {value!r}")
        if self.vanish_fraction > self.risk_fraction:
            raise ValueError("vanish_fraction must not exceed risk_fraction")


@dataclass(frozen=True)
class Verdict:
    """The verdict at ``step``: ``level`` (an index of ``LEVELS``) and the ``reasons`` in words."""

    step: int
    level: int
    reasons: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return LEVELS[self.level]

    def describe(self) -> str:
        """``failing: reason; reason`` (``healthy`` alone when no rule holds)."""
        return f"{self.label}: {'; '.join(self.reasons)}" if self.reasons else self.label


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _streak(history: Sequence[tuple[int, Health]], holds: Callable[[Health], bool]) -> tuple[int, int | None]:
    """How many trailing entries after the first (the reference) ``holds`` is true of, and the step of the first."""
    count, since = 0, None
    for step, health in reversed(history[1:]):
        if not holds(health):
            break
        count, since = count + 1, step
    return count, since


def _layers(health: Health) -> list[tuple[int, str]]:
    return sorted((layer, name) for name in health if (layer := layer_of(name)) is not None)


def lower_gradient_ratio(health: Health, reference: Health, lower_share: float) -> tuple[float, tuple[int, ...]]:
    """The largest ratio of a lower layer's gradient norm to its reference value, and those layers (the first
    ``lower_share`` of the layers, at least one); NaN where a norm or its positive reference is missing."""
    layers = _layers(reference)
    if not layers:
        return math.nan, ()
    lower = layers[: max(1, round(len(layers) * lower_share))]
    ratios = []
    for _, name in lower:
        now, then = health.get(name), reference.get(name)
        if not (_finite(then) and then > 0 and now is not None):
            return math.nan, ()
        ratios.append(now / then if math.isfinite(now) else math.nan)
    return (max(ratios) if all(math.isfinite(r) for r in ratios) else math.nan), tuple(l for l, _ in lower)


def _collapsed(health: Health, reference: Health, s: VerdictSettings) -> bool:
    share = health.get(PREDICTION_SHARE)
    if _finite(share):
        return share >= s.collapse_share
    spread, then = health.get(PREDICTION_STD), reference.get(PREDICTION_STD)
    return _finite(spread) and _finite(then) and then > 0 and spread <= s.spread_fraction * then


def _non_finite(health: Health, reference: Health) -> bool:
    names = [LOSS_MEAN] + [name for _, name in _layers(reference)]
    return any(_finite(reference.get(n)) and not _finite(health.get(n)) for n in names)


def _layer_words(layers: tuple[int, ...]) -> str:
    if not layers:
        return "the lower layers"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def judge_run(
    history: Sequence[tuple[int, Health]], alerts: int = 0, settings: VerdictSettings | None = None
) -> Verdict | None:
    """The verdict at the newest step of ``history`` (``(step, run-health values)``, oldest first; the first is
    the reference) with ``alerts`` stability alerts in force; None for an empty history."""
    if not history:
        return None
    s = settings or VerdictSettings()
    ref_step, reference = history[0]
    step, now = history[-1]
    failing, risk = [], []
    bad, bad_since = _streak(history, lambda h: _non_finite(h, reference))
    if bad:
        failing.append(f"the probe loss or a layer's gradient norm is not finite since step {bad_since}")
    collapse, collapse_since = _streak(history, lambda h: _collapsed(h, reference, s))
    what = _collapse_words(now, reference, ref_step, s) if collapse else ""
    ratio, lower = lower_gradient_ratio(now, reference, s.lower_share)
    vanish, vanish_since = _streak(
        history, lambda h: lower_gradient_ratio(h, reference, s.lower_share)[0] < s.vanish_fraction
    )
    stuck, stuck_since = _streak(history, lambda h: _stuck(h, reference, s))
    bound = _percent(s.vanish_fraction if vanish else s.risk_fraction)
    gradient = f"the gradient norm of {_layer_words(lower)} fell below {bound} of its step-{ref_step} value"
    gradient += f" ({_percent(ratio)})"
    baseline, against = _loss_baseline(now, reference)
    loss = f"the probe loss has not fallen ({now.get(LOSS_MEAN, math.nan):.3g} against {baseline:.3g}"
    loss += f" {against.format(ref=ref_step)})"
    if collapse >= s.patience and (vanish >= s.patience or stuck >= s.patience):
        failing.append(f"{what} since step {collapse_since}")
        if vanish >= s.patience:
            failing.append(f"{gradient} since step {vanish_since}")
        if stuck >= s.patience:
            failing.append(f"{loss} since step {stuck_since}")
    else:
        if collapse:
            risk.append(f"{what} since step {collapse_since}")
        if _finite(ratio) and ratio < s.risk_fraction and step != ref_step:
            risk.append(gradient)
        if stuck >= s.patience:
            risk.append(f"{loss} since step {stuck_since}")
    if alerts >= s.alerts_at_risk:
        risk.append(f"{alerts} stability alert{'' if alerts == 1 else 's'} in force")
    level = 2 if failing else (1 if risk else 0)
    return Verdict(step, level, tuple(failing + risk))


def _loss_baseline(health: Health, reference: Health) -> tuple[float, str]:
    """What the probe loss is compared with: the prior loss where given, else the reference's loss; in words."""
    prior = health.get(PRIOR_LOSS)
    if _finite(prior) and prior > 0:
        return prior, "for the best constant prediction"
    return reference.get(LOSS_MEAN, math.nan), "at step {ref}"


def _stuck(health: Health, reference: Health, s: VerdictSettings) -> bool:
    now, then = health.get(LOSS_MEAN), _loss_baseline(health, reference)[0]
    return _finite(now) and _finite(then) and then > 0 and now >= s.stuck_fraction * then


def _percent(value: float) -> str:
    """A share in words: ``3%``, ``0.25%``, ``nan%``."""
    return f"{value:.0%}" if value >= 0.01 else f"{value * 100:.2g}%"


def _collapse_words(now: Health, reference: Health, ref_step: int, s: VerdictSettings) -> str:
    if _finite(now.get(PREDICTION_SHARE)):
        count, total = int(now.get(PREDICTION_COUNT, 0)), int(now.get(PREDICTED, 0))
        return f"predictions have collapsed to one class on {count} of {total} probe examples"
    spread, then = now.get(PREDICTION_STD, math.nan), reference.get(PREDICTION_STD, math.nan)
    return f"predictions have collapsed to a constant (std {spread:.3g} against {then:.3g} at step {ref_step})"
