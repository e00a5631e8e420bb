"""What each piece of a run's evidence says about learning, with its uncertainty: the probe loss, an evaluation,
the logged training loss, each against the best constant prediction's (``core.evidence.Constant``). Torch-free;
the verdict (``core.verdict``) weighs the readings, the plugin draws the probe loss's.

A :class:`Reading` has a value, its 95% interval (``confidence``), the baseline it is compared with and what it
says: ``learning`` True when the interval lies wholly on the learning side (a loss's below ``loss_line`` × the
constant prediction's loss; an accuracy's above the majority class's share), False when it shows the run no better
(a loss's wholly at ``loss_line`` × the constant's or above; an accuracy at or below the majority's), None when the
sample cannot tell.

Example:
    >>> r = probe_loss({"loss_mean": 0.689, "loss_std": 0.55, "loss_examples": 32, "prior_loss": 0.621})
    >>> r.learning, r.text
    (None, 'probe loss 0.689 ± 0.194 (32 examples) against 0.621 for the constant prediction: cannot tell')
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from bertwatch.core.evidence import Constant
from bertwatch.core.health_names import LOSS_EXAMPLES, LOSS_MEAN, LOSS_STD, PREDICTED, PRIOR_LOSS, layer_of

__all__ = [
    "ACCURACY_KEYS",
    "CORRELATION_KEYS",
    "Z95",
    "Reading",
    "confidence_of",
    "evaluation",
    "interval_words",
    "loss_noise",
    "loss_trend",
    "lower_gradient_ratio",
    "probe_loss",
    "training_loss",
    "warm_up_end",
    "wilson",
    "z_value",
]

#: The ``eval_*`` names read as accuracy (compared with the majority class's share).
ACCURACY_KEYS = ("eval_accuracy", "eval_acc")
#: The ``eval_*`` names read as a correlation, first found first (each compared with 0, any constant prediction's),
#: and what a reading calls it: Matthews (classes), then Spearman and Pearson (regression).
CORRELATION_KEYS = {
    "eval_matthews_correlation": "Matthews", "eval_matthews": "Matthews", "eval_mcc": "Matthews",
    "eval_spearmanr": "Spearman", "eval_spearman": "Spearman", "eval_pearson": "Pearson", "eval_pearsonr": "Pearson",
}  # fmt: skip


@dataclass(frozen=True)
class Reading:
    """One piece of evidence at ``step`` (``source``: "probe loss", "eval accuracy", "eval Matthews", "eval
    Spearman", "eval Pearson", "eval loss", "training loss"): ``value``, its interval ``low``..``high``, the
    constant prediction's ``baseline``, ``learning`` (True, False or None: cannot tell), the words, and
    ``evidence``: how far the value lies on the learning side of the line it is judged against, in standard
    errors (a loss: (``loss_line`` × baseline − value) / its standard error; an accuracy: (value − the majority's
    share) / the majority's binomial standard error; a correlation: value × √n); NaN where the standard error is 0
    or unknown."""

    source: str
    step: int
    value: float
    low: float
    high: float
    baseline: float
    learning: bool | None
    text: str
    evidence: float = math.nan

    @property
    def margin(self) -> float:
        """How far the value lies on the learning side of the constant prediction's, as a share of what the
        constant leaves to learn, whatever the sample's size: a loss's (baseline − value) / baseline, an
        accuracy's (value − the majority's share) / (1 − that share), a correlation's value. 1 is perfect, 0 the
        constant prediction's, below 0 worse than it; NaN without a positive baseline (a share below 1)."""
        if self.source.endswith("loss"):
            return (self.baseline - self.value) / self.baseline if self.baseline > 0 else math.nan
        if self.source == "eval accuracy":
            return (self.value - self.baseline) / (1 - self.baseline) if self.baseline < 1 else math.nan
        return self.value


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


#: The normal quantile of a 95% interval, the readings' default.
Z95 = z_value(0.95)


def confidence_of(z: float) -> float:
    """The two-sided confidence of the normal quantile ``z`` (0.95 at 1.96): the inverse of :func:`z_value`."""
    return 2 * NormalDist().cdf(z) - 1


def interval_words(z: float) -> str:
    """``95% interval`` for the normal quantile ``z`` (the confidence actually used, rounded to a whole percent
    unless that would hide it: ``99.5% interval``)."""
    confidence = 100 * confidence_of(z)
    shown = f"{confidence:.0f}" if abs(confidence - round(confidence)) < 0.05 else f"{confidence:.1f}"
    return f"{shown}% interval"


def _standardised(distance: float, error: float) -> float:
    """``distance`` / ``error``, NaN where the error is not positive."""
    return distance / error if _finite(error) and error > 0 else math.nan


def wilson(share: float, n: int, z: float) -> tuple[float, float]:
    """Wilson's interval of a proportion ``share`` observed on ``n`` examples at normal quantile ``z``."""
    if n <= 0:
        return math.nan, math.nan
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _loss_says(low: float, high: float, baseline: float, line: float) -> tuple[bool | None, str]:
    """What a loss's interval ``low``..``high`` says against ``line`` × the constant prediction's loss: learning
    (wholly below the line), not learning (wholly at or above it) or cannot tell; and in words."""
    share = f"{line:.0%} of it"
    if high < line * baseline:
        return True, f"below {share}"
    if low >= line * baseline:
        return False, f"not below {share}"
    return None, "cannot tell"


def probe_loss(health: Mapping[str, float], step: int = 0, z: float = Z95, loss_line: float = 0.95) -> Reading | None:
    """The probe loss against the constant prediction's (``prior_loss``): its mean ± ``z`` standard errors
    (std / √(n − 1), n the labelled probe examples); None where the head gives no prior loss or too few examples."""
    mean, std, prior = health.get(LOSS_MEAN), health.get(LOSS_STD), health.get(PRIOR_LOSS)
    n = health.get(LOSS_EXAMPLES)
    if not _finite(n):  # a record from before ``loss_examples``: the examples predicted (classification)
        n = health.get(PREDICTED)
    if not (_finite(mean) and _finite(prior) and prior > 0 and _finite(std) and _finite(n) and n >= 2):
        return None
    error = std / math.sqrt(n - 1)
    half = z * error
    says, words = _loss_says(mean - half, mean + half, prior, loss_line)
    text = f"probe loss {mean:.3f} ± {half:.3f} ({int(n)} examples) against {prior:.3f} for the constant prediction: {words}"
    evidence = _standardised(loss_line * prior - mean, error)
    return Reading("probe loss", step, mean, mean - half, mean + half, prior, says, text, evidence)


def evaluation(
    step: int,
    metrics: Mapping[str, float],
    constant: Constant | None,
    probe: Mapping[str, float] | None = None,
    z: float = Z95,
    loss_line: float = 0.95,
) -> Reading | None:
    """An evaluation against the constant prediction on the eval set: its accuracy (``ACCURACY_KEYS``) against
    the majority class's share, with Wilson's interval over the eval set's examples; else its correlation
    (``CORRELATION_KEYS``: Matthews, Spearman or Pearson) against 0 ± z/√n (the spread of the correlation of
    predictions that ignore the labels); else its ``eval_loss`` against the constant prediction's (the label
    entropy, or the targets' variance), the standard error from the spread of the per-example probe losses at the
    same step (``probe``: its run-health values); None without the eval set's labels or a value to compare.

    Example:
        >>> r = evaluation(40, {"eval_spearmanr": 0.31}, Constant(math.nan, 2.1, 400))
        >>> r.learning, r.text
        (True, 'eval Spearman correlation 0.310 over 400 examples against 0 for any constant prediction (95% interval 0.212 to 0.408)')
    """
    if constant is None:
        return None
    n = constant.examples
    accuracy = next((metrics[k] for k in ACCURACY_KEYS if _finite(metrics.get(k))), None)
    if accuracy is not None and _finite(constant.share):
        low, high = wilson(accuracy, n, z)
        m = constant.share
        says = True if low > m else (False if accuracy <= m else None)
        side = f"{accuracy - m:.3f} above" if accuracy > m else f"{m - accuracy:.3f} below"
        bounds = f"({interval_words(z)} {low:.3f} to {high:.3f})"
        text = f"eval accuracy {accuracy:.3f} over {n} examples, {side} the majority's {m:.3f} {bounds}"
        if accuracy == m:
            text = f"eval accuracy {accuracy:.3f} over {n} examples, the majority's share {bounds}"
        evidence = _standardised(accuracy - m, math.sqrt(m * (1 - m) / n))
        return Reading("eval accuracy", step, accuracy, low, high, m, says, text, evidence)
    key = next((k for k in CORRELATION_KEYS if _finite(metrics.get(k))), None)
    if key is not None and n >= 2:
        name, value = CORRELATION_KEYS[key], metrics[key]
        error = 1 / math.sqrt(n)  # a constant's, or any prediction independent of the labels': about 1/√n
        low, high = max(-1.0, value - z * error), min(1.0, value + z * error)
        says = True if low > 0 else (False if value <= 0 else None)
        text = (
            f"eval {name} correlation {value:.3f} over {n} examples against 0 for any constant prediction "
            f"({interval_words(z)} {low:.3f} to {high:.3f})"
        )
        return Reading(f"eval {name}", step, value, low, high, 0.0, says, text, value / error)
    loss, std = metrics.get("eval_loss"), (probe or {}).get(LOSS_STD)
    if not (_finite(loss) and _finite(std) and constant.loss > 0 and n >= 2):
        return None
    error = std / math.sqrt(n - 1)
    half = z * error
    says, words = _loss_says(loss - half, loss + half, constant.loss, loss_line)
    text = (
        f"eval loss {loss:.3f} ± {half:.3f} ({n} examples, the spread of the probe losses) against "
        f"{constant.loss:.3f} for the constant prediction: {words}"
    )
    evidence = _standardised(loss_line * constant.loss - loss, error)
    return Reading("eval loss", step, loss, loss - half, loss + half, constant.loss, says, text, evidence)


def loss_noise(losses: Sequence[float]) -> float:
    """The standard deviation of one logged training loss about its trend: 1.4826 × the median absolute
    difference of successive logged losses / √2 (a trend moves successive values together and barely counts);
    NaN for fewer than three."""
    if len(losses) < 3:
        return math.nan
    diffs = sorted(abs(b - a) for a, b in zip(losses, losses[1:]))
    k = len(diffs)
    median = diffs[k // 2] if k % 2 else (diffs[k // 2 - 1] + diffs[k // 2]) / 2
    return 1.4826 * median / math.sqrt(2)


def training_loss(
    losses: Sequence[tuple[int, float]],
    since: int,
    constant: float | None,
    z: float = Z95,
    loss_line: float = 0.95,
    min_logs: int = 2,
) -> Reading | None:
    """The mean of the training losses logged after step ``since`` (at least the last ``min_logs``) against
    ``constant``, the constant prediction's loss, where known (a fresh classifier starts at it or above: ln 2 on
    a balanced pair; a run that learns only the label frequencies falls to it), else against its start (the first
    logged loss); the interval of the comparison from the noise of one logged loss (:func:`loss_noise`, over all of them): ± z ×
    noise × √(1/k), k the logs averaged, against the constant; √(1/k + 1) against the start, itself one log. None
    with fewer than three logs."""
    values = [v for _, v in losses]
    noise = loss_noise(values)
    if not math.isfinite(noise):
        return None
    window = [(s, v) for s, v in losses[1:] if s > since]
    if len(window) < min_logs:
        window = losses[1:][-min_logs:]
    if not window:
        return None
    mean = sum(v for _, v in window) / len(window)
    start = values[0]
    baseline, against = start, f"its start ({start:.3f} at step {losses[0][0]})"
    spread = 1 / len(window) + 1  # the start is one noisy log too
    if _finite(constant) and constant > 0:
        baseline, against = constant, f"{constant:.3f} for the constant prediction (its start: {start:.3f})"
        spread = 1 / len(window)
    error = noise * math.sqrt(spread)
    half = z * error
    says, words = _loss_says(mean - half, mean + half, baseline, loss_line)
    first, last = window[0][0], window[-1][0]
    span = f"step {last}" if first == last else f"steps {first}-{last}"
    logs = "1 log" if len(window) == 1 else f"{len(window)} logs"
    text = f"training loss {mean:.3f} ± {half:.3f} ({logs}, {span}) against {against}: {words}"
    evidence = _standardised(loss_line * baseline - mean, error)
    return Reading("training loss", last, mean, mean - half, mean + half, baseline, says, text, evidence)


def loss_trend(losses: Sequence[tuple[int, float]], since: int, noise: float) -> tuple[float, float]:
    """The least-squares slope (loss per step) of the losses logged after step ``since``, and its standard error
    from ``noise``, the standard deviation of one logged loss (:func:`loss_noise`): noise / √Σ(step − mean
    step)²; NaN for both with fewer than three logs after ``since``.

    Example:
        >>> slope, error = loss_trend([(10, 0.70), (20, 0.66), (30, 0.62), (40, 0.58)], 0, 0.01)
        >>> round(slope, 6), round(error, 6)
        (-0.004, 0.000447)
    """
    window = [(s, v) for s, v in losses if s > since]
    if len(window) < 3 or not _finite(noise):
        return math.nan, math.nan
    mean_step = sum(s for s, _ in window) / len(window)
    mean_loss = sum(v for _, v in window) / len(window)
    spread = sum((s - mean_step) ** 2 for s, _ in window)
    if spread <= 0:
        return math.nan, math.nan
    slope = sum((s - mean_step) * (v - mean_loss) for s, v in window) / spread
    return slope, noise / math.sqrt(spread)


def _layers(health: Mapping[str, float]) -> list[tuple[int, str]]:
    return sorted((layer, name) for name in health if (layer := layer_of(name)) is not None)


def lower_gradient_ratio(
    health: Mapping[str, float], reference: Mapping[str, float], lower_share: float
) -> tuple[float, tuple[int, ...]]:
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


def warm_up_end(rates: Sequence[tuple[int, float]]) -> int | None:
    """The step the logged learning rate reached its highest value, once a later log shows it no longer rising
    (it decays, or holds: a constant schedule); None while it still rises or with fewer than two logs."""
    if len(rates) < 2:
        return None
    top = max(rate for _, rate in rates)
    if rates[-1][1] > rates[-2][1]:
        return None
    peak = next(step for step, rate in rates if rate == top)
    return peak if peak < rates[-1][0] else None
