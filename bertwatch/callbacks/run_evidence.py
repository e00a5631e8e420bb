"""The evidence a run hands to the run's verdict (``core.evidence.Evidence``, judged by ``core.verdict``),
filled from the Trainer's events in this one place: the run's length and the constant prediction on its training
and eval sets at ``on_train_begin``, each probe pass's run-health signals and the stability alerts in force after
it, every ``on_log`` (training loss, learning rate, evaluation metrics) and ``on_evaluate``'s metrics.

Held by the run's judge (``callbacks.judging``), which judges it. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bertwatch.callbacks._context import TrainerContext
from bertwatch.core.evidence import Constant, Evidence

__all__ = ["RunEvidence", "constant_of"]

_LABEL_COLUMNS = ("label", "labels", "label_ids")


def constant_of(dataset: Any) -> Constant | None:
    """The best constant prediction on a dataset's class labels: its label column (a ``datasets`` table's
    ``label``, ``labels`` or ``label_ids``), or the same key of each row of a plain list of dicts; None where it has
    neither (a dataset that builds its rows on access is not read through) or its labels are not classes."""
    names = getattr(dataset, "column_names", None)  # a datasets.Dataset has it; a list or torch Dataset has not
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
    """One run's evidence (``evidence``); ``tapped``: the training loss comes from the model's own outputs
    (``callbacks.judging.LossTap``), and the Trainer's logged loss and learning rate are no longer read."""

    def __init__(self) -> None:
        self.evidence = Evidence()
        self.tapped = False

    def begin(self, state: Any, context: TrainerContext) -> None:
        """Training begins: the run's length, the constant prediction on the training and eval sets."""
        steps = int(state.max_steps or 0)
        self.evidence = Evidence(
            max_steps=steps if steps > 0 else None,
            eval_constant=constant_of(context.eval_dataset),
            train_constant=constant_of(context.train_dataset),
        )

    def note_probe(self, step: int, health: Mapping[str, float], alerts: int) -> None:
        """A probe pass's run-health signals and the stability alerts in force after it."""
        self.evidence.note_probe(step, health)
        self.evidence.note_alerts(step, alerts)

    def note_losses(self, windows: Sequence[tuple[int, float, float | None]]) -> bool:
        """The loss tap's windows ``(step, mean training loss, learning rate)``; whether there were any."""
        for step, loss, rate in windows:
            self.tapped = True
            self.evidence.note_log(step, {"loss": loss} if rate is None else {"loss": loss, "learning_rate": rate})
        return bool(windows)

    def note_log(self, step: int, logs: Mapping[str, Any] | None) -> bool:
        """One ``on_log``; whether it brought evidence (a training loss or an evaluation's values)."""
        before = (len(self.evidence.losses), self.evidence.evaluations[-1:])
        logs = logs or {}
        if self.tapped:
            logs = {k: v for k, v in logs.items() if k not in ("loss", "learning_rate")}
        self.evidence.note_log(step, logs)
        return before != (len(self.evidence.losses), self.evidence.evaluations[-1:])

    def note_evaluation(self, step: int, metrics: Mapping[str, Any] | None, context: TrainerContext) -> bool:
        """``on_evaluate``'s metrics (the eval set's labels read now when they were not known at the start);
        whether they were new."""
        if self.evidence.eval_constant is None:
            self.evidence.eval_constant = constant_of(context.eval_dataset)
        before = [(s, dict(v)) for s, v in self.evidence.evaluations[-1:]]
        self.evidence.note_evaluation(step, metrics or {})
        return before != self.evidence.evaluations[-1:]
