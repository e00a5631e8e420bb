"""What a stability alert or a failing verdict does during training: judge a callback's history
(``bertwatch.core.alerts``, ``bertwatch.core.verdict``), say so in ``bertwatch:`` lines (``callbacks.announce``;
one per new kind of alert, its heads named together) with one ``BertWatchAlert`` warning each (hidden unless a
filter shows it: ``core.warnings``), and ask the Trainer to save and stop when ``on_alert="stop"``.

The rules read grids the probe pass has already measured, so judging adds no forward pass and changes nothing in
the training; the only effect on the run is the save-and-stop request (``control.should_save`` and
``control.should_training_stop``), made at the event where the alert appeared. An error here costs one warning
and turns the alerts off; training and the callback's measurements go on.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertwatch.callbacks import announce
from bertwatch.callbacks.alert_lines import STOPPING, alert_lines, verdict_line
from bertwatch.core.alerts import ALERT_STATS, Alert, AlertSettings, active_alerts
from bertwatch.core.evidence import Evidence
from bertwatch.core.verdict import Verdict, VerdictSettings, judge
from bertwatch.core.warnings import BertWatchWarning, warn_alert

__all__ = ["Alerting", "Judgement"]


@dataclass(frozen=True)
class Judgement:
    """The alerts in force at ``step`` (``alerts``), those new there (``new``), and the step they compare with."""

    step: int
    reference_step: int
    alerts: tuple[Alert, ...]
    new: tuple[Alert, ...]


class Alerting:
    """The alert state of one callback over one training run.

    ``on_alert``: ``"warn"`` (a ``bertwatch:`` line, and a ``BertWatchAlert``, per new rule, naming its heads;
    only where ``speaks``: world process zero, not quiet), ``"stop"`` (also ask the Trainer to save a checkpoint
    and stop), ``"none"`` (log only), or a callable given the new alerts (a list of
    :class:`~bertwatch.core.alerts.Alert`) that may return ``"stop"``; a callable is given stability alerts only,
    never verdicts (it can read ``verdict``, the last verdict, when called). ``alerts`` holds those in force at the
    last judged step and ``raised`` every alert that was new when raised; ``stop_requested_at`` and ``stop_reason``
    the step and the words of the first stop asked for (an alert's ``describe()``, or ``verdict: `` and the
    verdict's).
    """

    def __init__(
        self,
        on_alert: str | Callable[[list[Alert]], Any],
        settings: AlertSettings,
        strict: bool,
        verdict: VerdictSettings | None = None,
    ) -> None:
        self.on_alert = on_alert
        self.settings = settings
        self.strict = strict
        self.verdict_settings = verdict or VerdictSettings()
        self.speaks = True
        self.reset()

    def reset(self) -> None:
        self.disabled = False  # the alerts, after an error in judging them
        self.verdict_disabled = False  # the verdict, after an error in judging it
        self.alerts: list[Alert] = []
        self.raised: list[Alert] = []
        self.stop_requested_at: int | None = None
        self.stop_reason: str | None = None
        self._seen: set[tuple[int, int, str, str]] = set()
        self._judged_step: int | None = None
        self._reference_noted = False
        self.verdict: Verdict | None = None
        self.verdict_told = False  # the end lines have said the last verdict (once a run)
        self.verdict_said: tuple[int, str] | None = None  # the failing line's step and words, once said
        self._failing_noted = False

    @contextlib.contextmanager
    def contained(self, part: str = "alerts") -> Iterator[None]:
        """An error inside turns ``part`` off ("alerts": the stability alerts; "verdict": the run verdict) with one
        warning (re-raised when strict); the other part goes on."""
        try:
            yield
        except Exception as err:
            if self.strict:
                raise
            if part == "verdict":
                self.verdict_disabled = True
            else:
                self.disabled = True
            what = "run verdict" if part == "verdict" else "stability alerts"
            warnings.warn(
                f"bertwatch: the {what} stopped after an error ({type(err).__name__}: {err}); training and the "
                "other measurements continue.",
                BertWatchWarning,
                stacklevel=4,
            )

    def judge(self, history: Sequence[tuple[int, dict[str, np.ndarray]]], resumed: bool) -> Judgement | None:
        """Judge the newest step of ``history`` (``(step, grids)`` oldest first) against its first, once per step;
        None when there is nothing new to judge or no alert statistic was measured."""
        if self.disabled or not history or history[-1][0] == self._judged_step:
            return None
        reference_step, reference = history[0]
        if not any(n in ALERT_STATS for n in reference):
            return None
        step = history[-1][0]
        self._judged_step = step
        self._note_reference(reference_step, resumed)
        self.alerts = active_alerts(reference, history, self.settings)
        new = [a for a in self.alerts if (a.layer, a.head, a.rule, a.stat) not in self._seen]
        self._seen.update((a.layer, a.head, a.rule, a.stat) for a in new)
        self.raised.extend(new)
        return Judgement(step, reference_step, tuple(self.alerts), tuple(new))

    def act(self, judgement: Judgement, control: Any) -> None:
        """Say the new alerts (``alert_lines``) and, at most once, set ``control.should_save`` and
        ``control.should_training_stop`` (``on_alert="stop"``, or the callable's answer)."""
        new = list(judgement.new)
        if not new:
            return
        stop = self.on_alert == "stop"
        if callable(self.on_alert):
            stop = self.on_alert(list(new)) == "stop"
        elif self.on_alert in ("warn", "stop"):
            lines = alert_lines(new, judgement.reference_step)
            self._tell(lines + ([STOPPING] if stop and self.stop_requested_at is None else []))
        if stop and self.stop_requested_at is None:
            self._stop(judgement.step, "; ".join(alert.describe() for alert in new), control)

    def verdict_to_tell(self) -> Verdict | None:
        """The last verdict for the end lines, once a run: None once told, or where the failing line said it just
        now (the same step and words); the first caller that gets it tells it."""
        verdict, self.verdict_told = (None if self.verdict_told else self.verdict), True
        if verdict is not None and self.verdict_said == (verdict.step, verdict.describe()):
            return None
        return verdict

    def judge_verdict(self, evidence: Evidence) -> Verdict | None:
        """The verdict on all of the run's ``evidence`` so far (``core.verdict.judge``: its probe passes, the alerts
        in force, evaluations, logged training loss), kept in ``verdict``. None when there is no evidence or the
        verdict was turned off by an error (the alerts' errors leave it on)."""
        if self.verdict_disabled or evidence.step is None:
            return None
        self.verdict = judge(evidence, self.verdict_settings)
        return self.verdict

    def act_on_verdict(self, verdict: Verdict, control: Any) -> None:
        """The first "failing" verdict: one line with its reasons (``on_alert`` ``"warn"`` or ``"stop"``) and,
        with ``"stop"``, at most once, ``control.should_save`` and ``control.should_training_stop``. A callable
        ``on_alert`` is given alerts only, not verdicts: a failing verdict is said and stops only with ``"warn"``
        and ``"stop"``."""
        if verdict.level < 2 or self._failing_noted or self.on_alert not in ("warn", "stop"):
            return
        self._failing_noted = True
        self.verdict_said = (verdict.step, verdict.describe())
        stop = self.on_alert == "stop" and self.stop_requested_at is None
        self._tell([verdict_line(verdict.step, verdict.describe())] + ([STOPPING] if stop else []))
        if stop:
            self._stop(verdict.step, f"verdict: {verdict.describe()}", control)

    def _tell(self, lines: list[str]) -> None:
        """Print ``lines`` as ``bertwatch:`` lines (where this process ``speaks``) and warn each as a
        ``BertWatchAlert`` (hidden unless a filter shows it), the last line (stopping) with the one before."""
        if self.speaks:
            announce.say(lines)
        if lines[-1] == STOPPING and len(lines) > 1:
            lines = [*lines[:-2], f"{lines[-2]}; {lines[-1]}"]
        for line in lines:
            warn_alert(f"bertwatch: {line}", stacklevel=3)  # the line that acted on the alerts

    def _stop(self, step: int, reason: str, control: Any) -> None:
        """Ask the Trainer to save a checkpoint and stop (once), and keep the step and the reason."""
        self.stop_requested_at, self.stop_reason = step, reason
        if control is not None:
            control.should_save = True
            control.should_training_stop = True

    def _note_reference(self, reference_step: int, resumed: bool) -> None:
        """One warning when the first measured step is not the model before its first optimiser step."""
        if self._reference_noted:
            return
        self._reference_noted = True
        if reference_step != 0 or resumed:
            warnings.warn(
                f"bertwatch: the stability alerts compare each head with its value at step {reference_step}, the "
                "first step measured in this run, not with the model before fine-tuning (measure at step 0, the "
                "default, and start the run from step 0, for that reference)",
                BertWatchWarning,
                stacklevel=5,
            )
