"""What a training run has shown by a step, for its verdict (``core.verdict``): the probe passes' run-health
signals, the stability alerts in force, the Trainer's evaluations, its logged training loss and learning rate, how
far training is, and the best constant prediction on the eval and training sets. Torch-free.

One record a run: the callback fills it from the Trainer's events (``note_probe`` at each probe pass with the
gradient statistics, ``note_alerts`` after each alert judgement, ``note_log`` at each ``on_log``,
``note_evaluation`` at each ``on_evaluate``), a benchmark from a recorded run; :meth:`Evidence.until` cuts it to
what was known at a step, so a verdict replayed from a record is the one the run saw live.

Example:
    >>> e = Evidence(max_steps=100)
    >>> e.note_log(10, {"loss": 0.69, "learning_rate": 5e-5})
    >>> e.note_log(20, {"eval_loss": 0.61, "eval_accuracy": 0.7, "eval_runtime": 1.2})
    >>> e.losses, e.evaluations, e.until(15).evaluations
    ([(10, 0.69)], [(20, {'eval_loss': 0.61, 'eval_accuracy': 0.7})], [])
"""

from __future__ import annotations

import math
import numbers
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bertwatch.core.health_names import PREDICTION_SHARE, PREDICTION_STD, PRIOR_LOSS

__all__ = ["Constant", "Evidence"]

#: ``on_log`` / ``on_evaluate`` values that say how long an evaluation took, not how good the model is.
_NOT_EVIDENCE = ("_runtime", "_samples_per_second", "_steps_per_second", "_epoch")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


@dataclass(frozen=True)
class Constant:
    """The best constant prediction on a set of ``examples`` labels, and what it scores. Class labels: predicting
    the most frequent class scores accuracy ``share``; predicting the label frequencies has cross-entropy ``loss``
    (nats). Regression targets: predicting their mean has squared error ``loss`` (their variance); ``share`` is
    NaN. ``loss`` is the lowest a model that ignores its input can reach."""

    share: float
    loss: float
    examples: int

    @classmethod
    def of_labels(cls, labels: Iterable[Any]) -> Constant | None:
        """From the labels of a single-label classification set (whole numbers) or of a regression set (real
        numbers, at least one of them a float); None for an empty set, a non-finite target or labels that are
        neither (lists of a multi-label or token task).

        Example:
            >>> Constant.of_labels([0, 1, 1, 1]).share, Constant.of_labels([1.0, 2.0, 3.0]).loss
            (0.75, 0.6666666666666666)
        """
        values = list(labels)
        if values and all(_real(v) for v in values) and not all(isinstance(v, numbers.Integral) for v in values):
            return cls._of_targets([float(v) for v in values])
        counts: Counter[int] = Counter()
        for label in values:
            if isinstance(label, bool) or not isinstance(label, int) and not _whole(label):
                return None
            if int(label) >= 0:  # -100: an example the loss ignores
                counts[int(label)] += 1
        total = sum(counts.values())
        if not total:
            return None
        entropy = -sum(c / total * math.log(c / total) for c in counts.values())
        return cls(max(counts.values()) / total, entropy, total)

    @classmethod
    def _of_targets(cls, targets: list[float]) -> Constant | None:
        if not all(math.isfinite(t) for t in targets):
            return None
        mean = sum(targets) / len(targets)
        return cls(math.nan, sum((t - mean) ** 2 for t in targets) / len(targets), len(targets))


def _real(value: Any) -> bool:
    """A real number that is not a bool (a float, an int, a numpy scalar of either); a float one makes a set of
    labels regression targets."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    """A numpy integer (or another whole-number scalar that is not a float)."""
    try:
        return not isinstance(value, float) and int(value) == value and not hasattr(value, "__len__")
    except (TypeError, ValueError):
        return False


@dataclass
class Evidence:
    """The evidence a run has shown, oldest first in each list.

    ``probes``: ``(step, {signal: value})`` of each probe pass with the gradient statistics (``core.health_names``;
    the first is the reference); ``alerts``: ``(step, stability alerts in force)`` after each judgement;
    ``evaluations``: ``(step, {eval_*: value})`` of each evaluation (its timing values left out); ``losses`` and
    ``rates``: the training loss and learning rate the Trainer logged (each logged loss is the mean over the steps
    since the log before); ``max_steps``: the run's length when known; ``eval_constant`` and ``train_constant``:
    the best constant prediction on the eval and training sets' labels (:class:`Constant`), when known.
    """

    probes: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    alerts: list[tuple[int, int]] = field(default_factory=list)
    evaluations: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)
    rates: list[tuple[int, float]] = field(default_factory=list)
    max_steps: int | None = None
    eval_constant: Constant | None = None
    train_constant: Constant | None = None

    def note_probe(self, step: int, health: Mapping[str, float]) -> None:
        """A probe pass's run-health signals at ``step`` (a second pass at the same step replaces the first)."""
        if self.probes and self.probes[-1][0] == step:
            self.probes[-1] = (step, dict(health))
        else:
            self.probes.append((int(step), dict(health)))

    def note_alerts(self, step: int, count: int) -> None:
        """The number of stability alerts in force after the judgement at ``step``."""
        if self.alerts and self.alerts[-1][0] == step:
            self.alerts[-1] = (step, int(count))
        else:
            self.alerts.append((int(step), int(count)))

    def note_log(self, step: int, logs: Mapping[str, Any]) -> None:
        """One ``on_log``'s values at ``step``: ``loss`` and ``learning_rate`` (a training log), ``eval_*`` (an
        evaluation's metrics, as the Trainer logs them before ``on_evaluate``); the rest is left out."""
        loss, rate = _number(logs.get("loss")), _number(logs.get("learning_rate"))
        if loss is not None:
            self.losses.append((int(step), loss))
        if rate is not None:
            self.rates.append((int(step), rate))
        if any(str(k).startswith("eval_") for k in logs):
            self.note_evaluation(step, logs)

    def note_evaluation(self, step: int, metrics: Mapping[str, Any]) -> None:
        """An evaluation's ``eval_*`` numbers at ``step`` (merged with those already noted at that step)."""
        values = {
            str(k): v
            for k, value in metrics.items()
            if str(k).startswith("eval_") and not str(k).endswith(_NOT_EVIDENCE) and (v := _number(value)) is not None
        }
        if not values:
            return
        if self.evaluations and self.evaluations[-1][0] == step:
            self.evaluations[-1][1].update(values)
        else:
            self.evaluations.append((int(step), values))

    @property
    def constant_loss(self) -> float | None:
        """The constant prediction's training loss (the label entropy; a regression's target variance): the
        training set's, else the eval set's, else the probe set's (its newest ``prior_loss``)."""
        for constant in (self.train_constant, self.eval_constant):
            if constant is not None:
                return constant.loss
        prior = self.probes[-1][1].get(PRIOR_LOSS) if self.probes else None
        return prior if prior is not None and math.isfinite(prior) and prior > 0 else None

    @property
    def regression(self) -> bool:
        """Whether the run's labels are regression targets: its training or eval set's constant has no majority
        share (``Constant.share`` NaN), else its newest probe pass measured the predictions' spread, not a class
        share."""
        constant = self.train_constant or self.eval_constant
        if constant is not None:
            return not math.isfinite(constant.share)
        health = self.probes[-1][1] if self.probes else {}
        share, spread = health.get(PREDICTION_SHARE, math.nan), health.get(PREDICTION_STD, math.nan)
        return not math.isfinite(share) and math.isfinite(spread)

    @property
    def step(self) -> int | None:
        """The newest step any evidence comes from (None for none)."""
        steps = [rows[-1][0] for rows in (self.probes, self.alerts, self.evaluations, self.losses) if rows]
        return max(steps) if steps else None

    def until(self, step: int) -> Evidence:
        """What was known at ``step``: every value noted at a step at or before it."""

        def cut(rows: list) -> list:
            return [row for row in rows if row[0] <= step]

        return replace(
            self,
            probes=cut(self.probes),
            alerts=cut(self.alerts),
            evaluations=[(s, dict(v)) for s, v in cut(self.evaluations)],
            losses=cut(self.losses),
            rates=cut(self.rates),
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_dict` reads it back; NaN stays a float, as ``json`` writes it)."""
        constants = {k: None if c is None else vars(c) for k, c in (("eval", self.eval_constant),
                                                                     ("train", self.train_constant))}  # fmt: skip
        return {
            "probes": [[s, dict(h)] for s, h in self.probes],
            "alerts": [list(a) for a in self.alerts],
            "evaluations": [[s, dict(v)] for s, v in self.evaluations],
            "losses": [list(x) for x in self.losses],
            "rates": [list(x) for x in self.rates],
            "max_steps": self.max_steps,
            "eval_constant": constants["eval"],
            "train_constant": constants["train"],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        """The record :meth:`as_dict` wrote."""

        def constant(value: Mapping[str, Any] | None) -> Constant | None:
            if value is None:
                return None
            loss = value.get("loss", value.get("entropy"))  # "entropy": a record written before regressions
            return Constant(float(value["share"]), float(loss), int(value["examples"]))

        return cls(
            probes=[(int(s), {k: float(v) for k, v in h.items()}) for s, h in data.get("probes", [])],
            alerts=[(int(s), int(c)) for s, c in data.get("alerts", [])],
            evaluations=[(int(s), {k: float(v) for k, v in m.items()}) for s, m in data.get("evaluations", [])],
            losses=[(int(s), float(v)) for s, v in data.get("losses", [])],
            rates=[(int(s), float(v)) for s, v in data.get("rates", [])],
            max_steps=data.get("max_steps"),
            eval_constant=constant(data.get("eval_constant")),
            train_constant=constant(data.get("train_constant")),
        )
