"""Will this fine-tune fail? The verdict on a run from all the evidence it has shown by a step
(``core.evidence.Evidence``): the probe passes' run-health signals, the stability alerts in force, the Trainer's
evaluations, its logged training loss and learning rate, and how far training is. Torch-free: plain numbers in, a
:class:`Verdict` with its reasons out.

The rules (``docs/callbacks.md``, "The verdict"; thresholds in :class:`VerdictSettings`, justified there from
Mosbach et al. 2021, Dodge et al. 2020 and ``benchmarks/bench_failures.py``). Each piece of evidence is read
with its uncertainty (``core.readings``): learning (a loss's interval wholly below ``loss_line`` × the best
constant prediction's, an accuracy's wholly above the majority's), not learning (shown at or above that line, or
no better than the majority), or cannot tell. ``hold`` is ``hold_share`` of the run's steps.

- **failing at once**, whatever the cadence: a non-finite probe loss, layer gradient, logged training loss or
  evaluation loss; every probe prediction in one class (``collapse_share``) *and* the lower layers' gradient norm
  below ``vanish_fraction`` of the reference's (Mosbach et al.'s mark of a failed run);
- **failing once it has held** ``hold`` steps: the training loss's interval over them at or above the constant
  prediction's own loss, all after the warm-up (``MIN_LOGS`` logs at least), and not clearly falling (not a
  regression's: its fresh head starts far above its targets' variance); evaluations no better than the
  majority class; the probe predictions collapsed with the probe loss not learning at every pass.
- **failing at the end of training**: an evaluation no better than the majority class (or the constant
  prediction), the training loss not below the line nor clearly below ``A_LITTLE`` × the constant prediction's
  loss, or the probe predictions collapsed to one class. An
  evaluation clearly better than the constant prediction at or after the start of such a finding overrules it.
  An evaluation above the majority's that its interval cannot tell from it fails nothing.
- **at risk**: a collapse now, a lower-layer gradient below ``risk_fraction`` now, the probe loss, an evaluation
  or the training loss (after the warm-up) not learning, ``alerts_at_risk`` stability alerts in force; each
  outweighed by clear learning from evidence at least as strong and as recent (an evaluation over the eval set >
  the logged training loss > the 32-example probe set > the stability alerts).
- **healthy** otherwise, or "cannot tell" (``NOTHING_YET``, ``NOTHING_AT_END``) where nothing shows learning.
  At the end of training "at risk" forecasts nothing: a risk still standing then gives "cannot tell"
  (``ENDED_UNRESOLVED``, then the risks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from bertwatch.core.evidence import Evidence
from bertwatch.core.health_names import (
    LOSS_MEAN,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PREDICTION_STD,
    layer_of,
)
from bertwatch.core.readings import (
    evaluation,
    loss_noise,
    loss_trend,
    lower_gradient_ratio,
    probe_loss,
    training_loss,
    warm_up_end,
    z_value,
)
from bertwatch.core.verdict_settings import VerdictSettings

__all__ = [
    "CANNOT_TELL",
    "ENDED_UNRESOLVED",
    "LEVELS",
    "NOTHING_AT_END",
    "NOTHING_YET",
    "VERDICT_SERIES",
    "Verdict",
    "VerdictSettings",
    "judge",
]

#: The verdict's levels, by number (the ``verdict`` series' ``level``).
LEVELS: tuple[str, ...] = ("healthy", "at risk", "failing")
#: The reason of a "healthy" verdict that has no evidence of learning: no trouble seen, and nothing to tell yet.
NOTHING_YET = (
    "cannot tell yet: no evidence of learning or of trouble (no evaluation, logged training loss or probe loss "
    "clearly below the constant prediction's)"
)
#: The label of a "healthy" level that no evidence of learning backs.
CANNOT_TELL = "cannot tell"
#: The first reason of a run that ended with evidence of trouble that does not show it failed.
ENDED_UNRESOLVED = (
    "training ended with nothing showing that the run failed, and with doubts below that no stronger evidence clears"
)
#: The reason of a run that ended with nothing showing learning or trouble.
NOTHING_AT_END = (
    "cannot tell without an evaluation: nothing showed learning or trouble (no evaluation, and neither the logged "
    "training loss nor the probe loss clearly below the constant prediction's); evaluate on labelled data to know"
)
#: How much a regression's margin below 0 counts in ``Verdict.rank``.
_REGRESSION_WEIGHT = 1e-4
#: The named-values series the verdict is written as.
VERDICT_SERIES = "verdict"

Health = Mapping[str, float]

#: The fewest logged training losses after the warm-up that can make a run failing before its end.
MIN_LOGS = 5
#: The share of the run's steps the training loss is read over (its newest logs; ``hold_share`` for failing it).
LOSS_WINDOW = 0.2
#: A training loss that ends clearly below this share of the constant prediction's loss, though not below the
#: learning line, learned a little: it does not fail the run (a loss within 1% of the constant's learned too little
#: to show on a dev set).
A_LITTLE = 0.99
#: How much each source weighs when learning outweighs a risk: an evaluation over the eval set, the logged
#: training loss, the probe set, the stability alerts.
_RANK = {"evaluation": 3, "training loss": 2, "probe": 1, "alerts": 0}


@dataclass(frozen=True)
class Verdict:
    """The verdict at ``step``: ``level`` (an index of ``LEVELS``) and the ``reasons`` in words, the evidence that
    decided first; ``known``: False for a "healthy" level that no evidence of learning backs (its label is then
    "cannot tell"); ``evidence``: how far the logged training loss (the reading every run has; before its first
    logs, the newest evaluation, else the probe loss) lies on the learning side of its line, in standard errors
    (``core.readings.Reading``), NaN without one; ``margin``: how far the same reading lies on the learning side
    of the constant prediction's, as a share of what the constant leaves to learn (``Reading.margin``: 0 the
    constant's, 1 perfect); ``regression``: the run's labels are real numbers. ``rank`` orders runs from the
    most to the least likely to fail."""

    step: int
    level: int
    reasons: tuple[str, ...] = ()
    known: bool = True
    evidence: float = math.nan
    margin: float = math.nan
    regression: bool = False

    @property
    def label(self) -> str:
        return CANNOT_TELL if self.level == 0 and not self.known else LEVELS[self.level]

    @property
    def rank(self) -> float:
        """A failure score: 2 for a failing run, plus 1 / (1 + e^(10 × ``margin``)), a half where the margin is
        unknown; the higher, the likelier the run fails. Below "failing" the margin alone orders the runs: early in
        training most runs are "at risk" (not yet clearly learning), so that level does not tell them apart, while
        the share of the constant's loss a run has already learned compares between runs (a standard error from
        a few noisy logs does not). A regression's margin below 0 counts ``_REGRESSION_WEIGHT`` as much: a fresh
        regression head starts far above its targets' variance in runs that learn too, so such a margin says
        little against another run's; it puts the run just above a half, ordering regressions among themselves."""
        failing = 2.0 if self.level == 2 else 0.0
        if not math.isfinite(self.margin):
            return failing + 0.5
        margin = self.margin * (_REGRESSION_WEIGHT if self.regression and self.margin < 0 else 1.0)
        return failing + 1 / (1 + math.exp(max(-50.0, min(50.0, 10 * margin))))

    def describe(self) -> str:
        """``failing: reason; reason`` (the label alone without reasons)."""
        return f"{self.label}: {'; '.join(self.reasons)}" if self.reasons else self.label


@dataclass(frozen=True)
class _Finding:
    """What one rule found: ``kind`` ("failing", "risk" or "learning"), the evidence's ``source`` (``_RANK``), the
    step it starts from (``since``) and the words; ``final``: no evaluation overrules it."""

    kind: str
    source: str
    since: int
    text: str
    final: bool = False
    evidence: float = math.nan
    margin: float = math.nan


def _measures(reading) -> dict[str, float]:
    return {"evidence": reading.evidence, "margin": reading.margin}  # what a finding keeps of its Reading


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _collapsed(health: Health, reference: Health, s: VerdictSettings) -> bool:
    share = health.get(PREDICTION_SHARE)
    if _finite(share):
        return share >= s.collapse_share
    spread, then = health.get(PREDICTION_STD), reference.get(PREDICTION_STD)
    return _finite(spread) and _finite(then) and then > 0 and spread <= s.spread_fraction * then


def _layer_words(layers: tuple[int, ...]) -> str:
    if not layers:
        return "the lower layers"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def _percent(value: float) -> str:
    """A share in words: ``3%``, ``0.25%``, ``nan%``."""
    return f"{value:.0%}" if value >= 0.01 else f"{value * 100:.2g}%"


def _collapse_words(now: Health, reference: Health, ref_step: int) -> str:
    if _finite(now.get(PREDICTION_SHARE)):
        count, total = int(now.get(PREDICTION_COUNT, 0)), int(now.get(PREDICTED, 0))
        return f"{count} of {total} probe predictions in one class"
    spread, then = now.get(PREDICTION_STD, math.nan), reference.get(PREDICTION_STD, math.nan)
    return f"the probe predictions nearly constant (std {spread:.3g} against {then:.3g} at step {ref_step})"


def _span(steps: float, max_steps: int | None) -> str:
    """A number of steps as a share of the run's: ``20% of training`` (``30 steps`` when its length is unknown)."""
    return f"{steps / max_steps:.0%} of training" if max_steps else f"{steps:.0f} steps"


def _share(steps: float, max_steps: int | None) -> str:
    return f" ({_span(steps, max_steps)})" if max_steps else ""


def _non_finite(e: Evidence) -> list[_Finding]:
    out = []
    if len(e.probes) >= 2:
        (_, reference), (step, now) = e.probes[0], e.probes[-1]
        names = [LOSS_MEAN] + [name for name in reference if layer_of(name) is not None]
        bad = [n for n in names if _finite(reference.get(n)) and not _finite(now.get(n))]
        if bad:
            what = "the probe loss" if LOSS_MEAN in bad else "a layer's gradient norm"
            out.append(_Finding("failing", "probe", step, f"{what} is not finite at step {step}", True))
    bad_loss = next(((s, v) for s, v in e.losses if not math.isfinite(v)), None)
    if bad_loss is not None:
        text = f"the training loss is not finite ({bad_loss[1]}) at step {bad_loss[0]}"
        out.append(_Finding("failing", "training loss", bad_loss[0], text, True))
    if e.evaluations and not _finite(e.evaluations[-1][1].get("eval_loss", 0.0)):
        step = e.evaluations[-1][0]
        out.append(_Finding("failing", "evaluation", step, f"the eval loss is not finite at step {step}", True))
    return out


def _probe_findings(e: Evidence, s: VerdictSettings, z: float, hold: float | None) -> list[_Finding]:
    """The probe passes' findings at the newest one after the reference: dead (collapse and vanished gradients),
    a collapse with the loss not learning held ``hold`` steps, a collapse at the end of training, a collapse now, a
    low gradient, the probe loss's reading."""
    if len(e.probes) < 2:
        return []
    ref_step, reference = e.probes[0]
    step, now = e.probes[-1]
    out = []
    collapsed = _collapsed(now, reference, s)
    ratio, lower = lower_gradient_ratio(now, reference, s.lower_share)
    gradient = f"the gradient norm of {_layer_words(lower)} at {_percent(ratio)} of its step-{ref_step} value"
    reading = probe_loss(now, step, z, s.loss_line)
    if collapsed and _finite(ratio) and ratio < s.vanish_fraction:
        text = f"{_collapse_words(now, reference, ref_step)} and {gradient} at step {step}: a run in this state does not learn"
        out.append(_Finding("failing", "probe", step, text, True))
        return out
    since = None
    for k in range(len(e.probes) - 1, 0, -1):
        at, health = e.probes[k]
        loss = probe_loss(health, at, z, s.loss_line)
        if not (_collapsed(health, reference, s) and loss is not None and loss.learning is False):
            break
        since = at
    if since is not None and hold is not None and step - since >= hold:
        what = f"{_collapse_words(now, reference, ref_step)} and the probe loss not learning"
        out.append(_Finding("failing", "probe", since, f"{what} since step {since}{_share(step - since, e.max_steps)}"))
    elif collapsed and e.max_steps is not None and step >= e.max_steps:
        text = f"{_collapse_words(now, reference, ref_step)} at the end of training: the run ends predicting a constant"
        out.append(_Finding("failing", "probe", step, text))
    elif collapsed:
        out.append(_Finding("risk", "probe", step, f"{_collapse_words(now, reference, ref_step)} at step {step}"))
    if _finite(ratio) and ratio < s.risk_fraction:
        out.append(_Finding("risk", "probe", step, f"{gradient} at step {step}"))
    if reading is not None and reading.learning is not None:
        kind = "learning" if reading.learning else "risk"
        out.append(_Finding(kind, "probe", step, reading.text, **_measures(reading)))
    elif reading is not None:
        out.append(_Finding("unsure", "probe", step, reading.text, **_measures(reading)))
    return out


def _evaluation_findings(e: Evidence, s: VerdictSettings, z: float, hold: float | None) -> list[_Finding]:
    """The newest evaluation against the constant prediction on the eval set: learning, or at risk; failing when
    it has been no better than the constant prediction since ``hold`` steps, or when training has ended and it
    cannot show the run better than it (the definition of a failed run)."""
    probes = dict(e.probes)
    readings = [evaluation(at, m, e.eval_constant, probes.get(at), z, s.loss_line) for at, m in e.evaluations]
    readings = [r for r in readings if r is not None]
    if not readings:
        return []
    newest = readings[-1]
    found = _evaluation_finding(e, newest, readings, hold)
    return [replace(found, **_measures(newest))]


def _evaluation_finding(e: Evidence, newest: Any, readings: list, hold: float | None) -> _Finding:
    if newest.learning is True:
        return _Finding("learning", "evaluation", newest.step, newest.text)
    since = newest.step
    for r in reversed(readings[:-1] if newest.learning is False else []):
        if r.learning is not False:
            break
        since = r.step
    what = "predicting the majority class" if newest.source == "eval accuracy" else "the constant prediction"
    if e.max_steps is not None and newest.step >= e.max_steps and newest.learning is False:
        return _Finding("failing", "evaluation", since, f"{newest.text}: the run ends no better than {what}")
    if newest.learning is False and hold is not None and newest.step - since >= hold:
        text = f"{newest.text}: no better than {what} since step {since}"
        return _Finding("failing", "evaluation", since, text + _share(newest.step - since, e.max_steps))
    if newest.source.endswith("loss"):  # a loss reading's words already say what it cannot tell
        return _Finding("risk", "evaluation", newest.step, newest.text)
    words = "cannot tell it from" if newest.learning is None else "no better than"
    return _Finding("risk", "evaluation", newest.step, f"{newest.text}: {words} {what}")


def _training_findings(e: Evidence, s: VerdictSettings, z: float, hold: float | None) -> list[_Finding]:
    """The logged training loss over the last ``LOSS_WINDOW`` of training (at least ``MIN_LOGS`` logs) against the
    constant prediction's loss (else its own first log). Learning when clearly below ``loss_line`` × it. Not below
    it: no finding while the learning rate still warms up; failing at the end of training (at risk if clearly below
    ``A_LITTLE`` × the constant prediction's loss: it learned a little), or before it once the loss's interval over
    the last ``hold`` steps, all after the warm-up and ``MIN_LOGS`` logs at least, is at or above that loss without
    clearly falling (never for a regression, whose fresh head starts far above it); at risk otherwise. The
    schedule's decay is never evidence."""
    step = e.step
    if step is None or len(e.losses) < 3:
        return []
    reading, since = _loss_reading(e, s, z, LOSS_WINDOW * e.max_steps if e.max_steps else None)
    if reading is None:
        return []
    if reading.learning is None:
        return [_Finding("unsure", "training loss", reading.step, reading.text, **_measures(reading))]
    if reading.learning:
        return [_Finding("learning", "training loss", reading.step, reading.text, **_measures(reading))]
    ended = e.max_steps is not None and step >= e.max_steps
    if ended and reading.baseline == e.constant_loss and reading.high < A_LITTLE * reading.baseline:
        text = f"{reading.text}, yet clearly below {A_LITTLE:.0%} of it: the run learned a little"
        return [_Finding("risk", "training loss", reading.step, text, **_measures(reading))]
    if ended:
        text = f"{reading.text} at the end of training: the run ends without learning its training set"
        return [_Finding("failing", "training loss", int(since), text, **_measures(reading))]
    warmed = warm_up_end(e.rates)
    if warmed is None:  # still warming up: a loss at its start says nothing yet, but its margin ranks the run
        return [_Finding("unsure", "training loss", reading.step, reading.text, **_measures(reading))]
    if e.regression:  # a fresh regression head starts far above the targets' variance: only its end can fail it
        text = f"{reading.text}; a regression head starts far above its targets' variance, so only the end can fail it"
        return [_Finding("risk", "training loss", reading.step, text, **_measures(reading))]
    held = _held_loss(e, s, z, hold, warmed)
    if held is not None:
        return [replace(held, **_measures(reading))]
    slope, error = loss_trend(e.losses, max(since, warmed), loss_noise([v for _, v in e.losses]))
    trend = ", falling" if _finite(slope) and slope + z * error < 0 else ""
    return [_Finding("risk", "training loss", reading.step, f"{reading.text}{trend}", **_measures(reading))]


def _loss_reading(e: Evidence, s: VerdictSettings, z: float, window: float | None) -> tuple[Any, float]:
    """The training loss's reading over the last ``window`` steps (the last three logs without one; at least
    ``MIN_LOGS`` logs), and the step it reads from."""
    step = e.step
    since = step - window if window is not None else e.losses[-3][0]
    if sum(1 for s_, _ in e.losses if s_ > since) < MIN_LOGS:
        since = e.losses[-MIN_LOGS - 1][0] if len(e.losses) > MIN_LOGS else e.losses[0][0]
    return training_loss(e.losses, since, e.constant_loss, z, s.loss_line), since


def _held_loss(e: Evidence, s: VerdictSettings, z: float, hold: float | None, warmed: int) -> _Finding | None:
    """Failing before the end: the training loss's interval over the last ``hold`` steps, all after the warm-up
    (``MIN_LOGS`` logs at least), at or above the constant prediction's loss, and not clearly falling."""
    if hold is None or e.step - warmed < hold:
        return None
    reading, since = _loss_reading(e, s, z, hold)
    after = [v for s_, v in e.losses if s_ > max(since, warmed)]
    if reading is None or reading.learning is not False or len(after) < MIN_LOGS or reading.low < reading.baseline:
        return None
    slope, error = loss_trend(e.losses, max(since, warmed), loss_noise([v for _, v in e.losses]))
    if _finite(slope) and slope + z * error < 0:
        return None
    text = (
        f"{reading.text}, at or above it over the last {_span(e.step - max(since, warmed), e.max_steps)} after the "
        f"warm-up ({len(after)} logs), and not falling"
    )
    return _Finding("failing", "training loss", int(since), text)


def judge(evidence: Evidence, settings: VerdictSettings | None = None) -> Verdict | None:
    """The verdict at the newest step of ``evidence`` (``Evidence.step``); None when there is no evidence.

    Example:
        >>> from bertwatch.core.evidence import Constant, Evidence
        >>> e = Evidence(max_steps=100, eval_constant=Constant(0.523, 0.692, 500))
        >>> e.note_evaluation(20, {"eval_accuracy": 0.648})
        >>> verdict = judge(e)
        >>> verdict.label, verdict.reasons[0][:60]
        ('healthy', 'eval accuracy 0.648 over 500 examples, 0.125 above the major')
    """
    step = evidence.step
    if step is None:
        return None
    s = settings or VerdictSettings()
    z = z_value(s.confidence)
    hold = s.hold_share * evidence.max_steps if evidence.max_steps else None
    findings = _non_finite(evidence)
    findings += _probe_findings(evidence, s, z, hold)
    findings += _evaluation_findings(evidence, s, z, hold)
    findings += _training_findings(evidence, s, z, hold)
    alerts = evidence.alerts[-1] if evidence.alerts else None
    if alerts is not None and alerts[1] >= s.alerts_at_risk:
        count = alerts[1]
        findings.append(
            _Finding("risk", "alerts", alerts[0], f"{count} stability alert{'' if count == 1 else 's'} in force")
        )
    ended = evidence.max_steps is not None and step >= evidence.max_steps
    return replace(_weigh(step, findings, ended), regression=evidence.regression)


#: Whose evidence and margin a verdict carries, first found first: the training loss, logged by every run and
#: averaged over many batches, ranks runs better early in training than an evaluation on a small eval set.
_MEASURED_FIRST = {"training loss": 0, "evaluation": 1, "probe": 2, "alerts": 3}


def _rank_measures(findings: list[_Finding]) -> dict[str, float]:
    """The evidence and margin of the reading the rank reads (``_MEASURED_FIRST``; the newest of its source)."""
    measured = [f for f in findings if _finite(f.evidence) or _finite(f.margin)]
    first = min(measured, key=lambda f: (_MEASURED_FIRST[f.source], -f.since), default=None)
    return {"evidence": first.evidence, "margin": first.margin} if first else {}


def _weigh(step: int, findings: list[_Finding], ended: bool = False) -> Verdict:
    measures = _rank_measures(findings)
    findings = [f for f in findings if f.kind != "unsure"]
    learning = [f for f in findings if f.kind == "learning"]
    clear_eval = [f.since for f in learning if f.source == "evaluation"]
    failing = [f for f in findings if f.kind == "failing" and (f.final or not any(e >= f.since for e in clear_eval))]
    overruled = [f for f in findings if f.kind == "failing" and f not in failing]
    risks = [f for f in findings if f.kind == "risk"] + overruled

    def outweighed(risk: _Finding) -> bool:
        return any(_RANK[f.source] >= _RANK[risk.source] and f.since >= risk.since for f in learning)

    standing = [f for f in risks if not outweighed(f)]
    by_rank = sorted(learning, key=lambda f: -_RANK[f.source])
    if failing:
        return Verdict(step, 2, tuple(f.text for f in failing + standing), **measures)
    if standing and ended:  # a forecast has nothing left to forecast: the run either showed its outcome or not
        reasons = (ENDED_UNRESOLVED, *(f.text for f in standing), *(f.text for f in by_rank))
        return Verdict(step, 0, reasons, known=False, **measures)
    if standing:
        return Verdict(step, 1, tuple(f.text for f in standing + by_rank), **measures)
    weighed = [f"{f.text} (outweighed)" for f in risks]
    if by_rank:
        return Verdict(step, 0, tuple(f.text for f in by_rank) + tuple(weighed), **measures)
    return Verdict(step, 0, (NOTHING_AT_END if ended else NOTHING_YET,), known=False, **measures)
