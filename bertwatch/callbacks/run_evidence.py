"""The evidence a callback hands to the run's verdict (``core.evidence.Evidence``, judged by ``core.verdict``),
filled from the Trainer's events in this one place: the run's length and the constant prediction on its training
and eval sets at ``on_train_begin``, each probe pass's run-health signals and the stability alerts in force after
it, every ``on_log`` (training loss, learning rate, evaluation metrics) and ``on_evaluate``'s metrics.

It also says which verdicts to write: a step's verdict is final once the step is over (its log and evaluation
come after its probe pass), so the last one judged at a step is written when the next step begins or training
ends; it is written at every step with run-health signals and wherever the level changed. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bertwatch.callbacks._context import TrainerContext
from bertwatch.core.evidence import Constant, Evidence
from bertwatch.core.verdict import Verdict, VerdictSettings

if TYPE_CHECKING:
    from bertwatch.callbacks.alerting import Alerting
    from bertwatch.callbacks.watched_run import WatchedRun

__all__ = ["RunEvidence", "constant_of"]

_LABEL_COLUMNS = ("label", "labels", "label_ids")


def constant_of(dataset: Any) -> Constant | None:
    """The best constant prediction on a dataset's class labels: its label column (a ``datasets`` table's
    ``label``, ``labels`` or ``label_ids``), or the same key of each row of a plain list of dicts; None where it has
    neither (a dataset that builds its rows on access is not read through) or its labels are not classes."""
    names = getattr(dataset, "column_names", None)
    try:
        if isinstance(names, (list, tuple)):
            column = next((c for c in _LABEL_COLUMNS if c in names), None)
            return None if column is None else Constant.of_labels(dataset[column])
        if isinstance(dataset, (list, tuple)) and dataset and all(isinstance(row, Mapping) for row in dataset):
            key = next((c for c in _LABEL_COLUMNS if c in dataset[0]), None)
            return None if key is None else Constant.of_labels(row.get(key) for row in dataset)
    except (TypeError, ValueError, KeyError):
        return None
    return None


class RunEvidence:
    """One callback's evidence over one training run (``evidence``) and the verdict judged but not yet written."""

    def __init__(self) -> None:
        self.evidence = Evidence()
        self._open: tuple[Verdict, bool] | None = None
        self._written_level: int | None = None

    def begin(self, state: Any, context: TrainerContext) -> None:
        """Training begins: the run's length, the constant prediction on the training and eval sets."""
        steps = int(state.max_steps or 0)
        self.evidence = Evidence(
            max_steps=steps if steps > 0 else None,
            eval_constant=constant_of(context.eval_dataset),
            train_constant=constant_of(context.train_dataset),
        )
        self._open, self._written_level = None, None

    def note_probe(self, step: int, health: Mapping[str, float], alerts: int) -> None:
        """A probe pass's run-health signals and the stability alerts in force after it."""
        self.evidence.note_probe(step, health)
        self.evidence.note_alerts(step, alerts)

    def note_log(self, step: int, logs: Mapping[str, Any] | None) -> bool:
        """One ``on_log``; whether it brought evidence (a training loss or an evaluation's values)."""
        before = (len(self.evidence.losses), self.evidence.evaluations[-1:])
        self.evidence.note_log(step, logs or {})
        return before != (len(self.evidence.losses), self.evidence.evaluations[-1:])

    def note_evaluation(self, step: int, metrics: Mapping[str, Any] | None, context: TrainerContext) -> bool:
        """``on_evaluate``'s metrics (the eval set's labels read now when they were not known at the start);
        whether they were new."""
        if self.evidence.eval_constant is None:
            self.evidence.eval_constant = constant_of(context.eval_dataset)
        before = [(s, dict(v)) for s, v in self.evidence.evaluations[-1:]]
        self.evidence.note_evaluation(step, metrics or {})
        return before != self.evidence.evaluations[-1:]

    def judge(
        self,
        alerting: Alerting,
        watched: WatchedRun,
        writer: bool,
        health: tuple[int, Mapping[str, float]] | None,
        send: bool,
        control: Any,
    ) -> None:
        """Judge the evidence so far (``alerting.judge_verdict``) and act on it (``alerting.act_on_verdict``).
        ``writer``: this callback writes the run's verdict: it is kept for :meth:`write` and, at a step with
        run-health signals (``health``: ``(step, values)``) and with ``send``, sent to the trackers now."""
        with alerting.contained():
            verdict = alerting.judge_verdict(self.evidence)
            if verdict is None:
                return
            measured = health is not None and health[0] == verdict.step
            if writer:
                if self._open is not None and self._open[0].step < verdict.step:
                    self._flush(watched, alerting.verdict_settings)
                probed = measured or (self._open is not None and self._open[1])
                self._open = (verdict, probed)
                if measured and send:
                    watched.send_verdict(verdict, health[1])
            alerting.act_on_verdict(verdict, control)

    def write(self, watched: WatchedRun | None, settings: VerdictSettings, before: int | None = None) -> None:
        """Write the verdict of a step that is over: step ``before`` or an earlier one (``on_step_begin``; None:
        every step, at the end)."""
        if self._open is not None and (before is None or self._open[0].step <= before):
            self._flush(watched, settings)

    def _flush(self, watched: WatchedRun | None, settings: VerdictSettings) -> None:
        """Write the last verdict judged at its step, where that step has run-health signals or the level changed
        since the last written."""
        verdict, probed = self._open
        self._open = None
        if watched is not None and (probed or verdict.level != self._written_level):
            self._written_level = verdict.level
            watched.publish_verdict(verdict, settings)
