"""What a stability alert does during training: judge a callback's history (``bertwatch.core.alerts``), warn,
log the counts to TensorBoard and the trackers, and ask the Trainer to save and stop when ``on_alert="stop"``.

The rules read grids the probe pass has already measured, so judging adds no forward pass and changes nothing in
the training; the only effect on the run is the save-and-stop request (``control.should_save`` and
``control.should_training_stop``), made at the event where the alert appeared. An error in this module costs one
warning and turns the alerts off; training and the callback's measurements go on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bertwatch.core.alerts import RULE_STATS, Alert, AlertSettings, active_alerts
from bertwatch.core.warnings import BertWatchWarning

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.callbacks.monitor import Monitor

__all__ = ["ALERT_STATS", "Alerting"]

#: Every statistic an alert rule reads (``max_logit`` only once the probe pass measures it).
ALERT_STATS: frozenset[str] = frozenset(s for stats in RULE_STATS.values() for s in stats)


def _writes_alerts(callback: Any, monitor: Monitor | None) -> bool:
    """Whether ``callback`` is the first active subscriber of ``monitor`` measuring an alert statistic."""
    if monitor is None:
        return False
    owner = next((c for c in monitor.active() if ALERT_STATS & set(c.stat_names)), None)
    return owner is callback


class Alerting:
    """The alert state of one callback over one training run.

    ``on_alert``: ``"warn"`` (one ``BertWatchWarning`` per head and rule), ``"stop"`` (also ask the Trainer to save
    a checkpoint and stop), ``"none"`` (log only), or a callable given the new alerts (a list of
    :class:`~bertwatch.core.alerts.Alert`) that may return ``"stop"``. ``alerts`` holds those in force at the last
    judged step and ``raised`` every alert that was new when raised.
    """

    def __init__(self, on_alert: str | Callable[[list[Alert]], Any], settings: AlertSettings, strict: bool) -> None:
        self.on_alert = on_alert
        self.settings = settings
        self.strict = strict
        self.reset()

    def reset(self) -> None:
        self.disabled = False
        self.alerts: list[Alert] = []
        self.raised: list[Alert] = []
        self.stop_requested_at: int | None = None
        self._seen: set[tuple[int, int, str, str]] = set()
        self._judged_step: int | None = None
        self._stop_pending = False
        self._reference_noted = False

    def update(self, callback: Any, state: Any, control: Any, event: str = "step") -> None:
        """Judge the newest step of ``callback.history`` (once per step) at a Trainer ``event`` and act: warn, log,
        and at most once set ``control.should_save`` and ``control.should_training_stop``.

        Of several callbacks on one probe pass, the first with an alert statistic writes the event file's alert
        table and sends the counts; each warns and stops by its own ``on_alert``."""
        if self.disabled:
            return
        try:
            self._update(callback, state, event)
            if self._stop_pending and control is not None:
                control.should_save = True
                control.should_training_stop = True
                self._stop_pending = False
        except Exception as err:
            if self.strict:
                raise
            self.disabled = True
            warnings.warn(
                f"bertwatch: the stability alerts stopped after an error ({type(err).__name__}: {err}); training "
                "and the other measurements continue.",
                BertWatchWarning,
                stacklevel=3,
            )

    def _update(self, callback: Any, state: Any, event: str) -> None:
        history, monitor = callback.history, callback.monitor
        if not history or history[-1][0] == self._judged_step:
            return
        reference_step, reference = history[0]
        if not any(n in ALERT_STATS for n in reference):
            return
        step = history[-1][0]
        self._judged_step = step
        self._note_reference(reference_step, monitor is not None and monitor.context.resumed)
        self.alerts = active_alerts(reference, history, self.settings)
        new = [a for a in self.alerts if (a.layer, a.head, a.rule, a.stat) not in self._seen]
        self._seen.update((a.layer, a.head, a.rule, a.stat) for a in new)
        self.raised.extend(new)
        if _writes_alerts(callback, monitor):
            monitor.publish_alerts(self.alerts, step, reference_step, callback.log_to_trackers and event != "end")
        if new:
            self._act(new, step)

    def _note_reference(self, reference_step: int, resumed: bool) -> None:
        """One warning when the first measured step is not the model before its first optimiser step."""
        if self._reference_noted:
            return
        self._reference_noted = True
        if reference_step != 0 or resumed:
            warnings.warn(
                f"bertwatch: the stability alerts compare each head with its value at step {reference_step}, the "
                "first step measured in this run, not with the model before fine-tuning (measure at step 0, the default, and "
                "start the run from step 0, for that reference)",
                BertWatchWarning,
                stacklevel=5,
            )

    def _act(self, new: list[Alert], step: int) -> None:
        stop = self.on_alert == "stop"
        if callable(self.on_alert):
            stop = self.on_alert(list(new)) == "stop"
        elif self.on_alert in ("warn", "stop"):
            for alert in new:
                what = "; saving a checkpoint and stopping training (on_alert='stop')" if stop else ""
                warnings.warn(f"bertwatch alert: {alert.describe()}{what}", BertWatchWarning, stacklevel=5)
        if stop and self.stop_requested_at is None:
            self.stop_requested_at = step
            self._stop_pending = True
