"""The run's judging, once per probe step for every callback of the run: the stability alerts of the newest step
(``callbacks.alerting`` on ``core.alerts``) and the verdict on all the evidence so far (``callbacks.run_evidence``
on ``core.verdict``), written by the run and acted on once (``on_alert``).

A callback takes no part in it beyond what its member declares (``callbacks.members.Member``): what it measures,
and the settings it judges with (``Member.judging``, a ``Judging``; None: it takes none): a run judges with one set
of settings, so two members of one run that declare different ones are a ``SetupError`` before the first step.

A step's verdict is final once the step is over (its log and evaluation come after its probe pass), so the last
one judged at a step is written when the next step begins or training ends; it is written at every step with
run-health signals and wherever the level changed.

The verdict reads the training loss of every step, whatever the Trainer's ``logging_steps`` (:class:`LossTap`): a
forward hook on the model keeps the ``loss`` of each training forward (the model in training mode, gradients on: the
Trainer's own forwards, never a probe pass or an evaluation), as a detached tensor on the model's device; at the end
of each step the step's mean joins a window of ``every`` steps (a log, as a Trainer logging every ``every`` steps
would give), read to the host once a window is full, with the learning rate then. The Trainer logs every 500 steps
by default, so a run of a few hundred steps would give the verdict no training loss at all. The hook reads what the
model returns and changes nothing; an output without a scalar ``loss`` (the Trainer computes its own: label
smoothing, ``compute_loss_func``, a loss without labels in the batch) leaves the tap silent and the verdict reads the
Trainer's logs instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from bertwatch.callbacks._safe import SetupError
from bertwatch.callbacks.alerting import Alerting
from bertwatch.callbacks.members import Judging, Member, StepResult
from bertwatch.callbacks.probe_setup import TrainerSide
from bertwatch.callbacks.publisher import Publisher
from bertwatch.callbacks.run_evidence import RunEvidence
from bertwatch.core.alerts import ALERT_STATS, AlertSettings
from bertwatch.core.verdict import LEVELS, VERDICT_SERIES, Verdict, VerdictSettings
from bertwatch.probe.records import NamedValues, StepText

#: What the ``verdict`` series and text say of themselves.
VERDICT_DESCRIPTION = (
    "The run's verdict: level 0 healthy, 1 at risk, 2 failing; known 0 where nothing showed learning yet (cannot "
    "tell); evidence: the training loss's distance on the learning side of its line, in standard errors "
    "; margin: the same reading's distance on the learning side of the constant prediction's, as a share of what "
    "the constant leaves to learn; regression: 1 where the labels are real numbers (the rank reads it), else 0 "
    "(bertwatch.core.verdict)"
)
VERDICT_TEXT = "The verdict's reasons at each judged step, one a line (none: healthy); thresholds in the metadata"

__all__ = ["Judging", "LossTap", "RunJudge", "every_for", "learning_rate"]

#: The most loss windows a run's verdict reads: one window is ``max_steps / WINDOWS`` steps.
WINDOWS = 200


def every_for(max_steps: int | None) -> int:
    """The steps a loss window holds in a run of ``max_steps``: at most ``WINDOWS`` windows (1 when unknown)."""
    return max(1, math.ceil(max_steps / WINDOWS)) if max_steps else 1


def learning_rate(scheduler: Any, optimizer: Any) -> float | None:
    """The learning rate of the first parameter group now: the scheduler's last, else the optimizer's."""
    try:
        if scheduler is not None:
            return float(scheduler.get_last_lr()[0])
        if optimizer is not None:
            return float(optimizer.param_groups[0]["lr"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None
    return None


def _loss_of(output: Any) -> torch.Tensor | None:
    # a ModelOutput is a Mapping; a plain tuple or tensor output has no loss attribute
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.is_floating_point():
        return loss.detach()
    return None


class LossTap:
    """The model's training losses, a window of ``every`` steps at a time (module doc). ``seen``: whether any
    training forward gave a loss.

    Example:
        >>> import torch
        >>> class Model(torch.nn.Module):
        ...     def forward(self, x):
        ...         return {"loss": (x**2).mean()}
        >>> model = Model()
        >>> tap = LossTap(model, every=2)
        >>> for step in (1, 2):
        ...     _ = model(torch.full((3,), float(step)))
        ...     full = tap.end_step(step, 1e-4)
        >>> tap.read()
        [(2, 2.5, 0.0001)]
        >>> tap.close()
    """

    def __init__(self, model: torch.nn.Module, every: int = 1) -> None:
        self.every = max(1, int(every))
        self.seen = False
        self._forwards: list[torch.Tensor] = []  # this step's training losses
        self._steps: list[torch.Tensor] = []  # this window's step means
        self._ready: list[tuple[int, torch.Tensor, float | None]] = []  # windows not yet read
        self._handle = model.register_forward_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not (module.training and torch.is_grad_enabled()):
            return
        try:
            loss = _loss_of(output)
        except Exception:  # an output whose loss cannot be read: the tap stays silent
            return
        if loss is not None:
            self._forwards.append(loss)

    def end_step(self, step: int, rate: float | None) -> bool:
        """Close ``step`` (the mean of its training forwards' losses; nothing without one); whether a window is now
        full and waiting to be read."""
        if self._forwards:
            self.seen = True
            self._steps.append(torch.stack(self._forwards).float().mean())
            self._forwards = []
        if len(self._steps) >= self.every:
            self._ready.append((int(step), torch.stack(self._steps).mean(), rate))
            self._steps = []
        return bool(self._ready)

    def read(self) -> list[tuple[int, float, float | None]]:
        """The full windows not read yet, oldest first, as ``(step, mean loss, learning rate)``: one copy to the
        host for them all."""
        if not self._ready:
            return []
        values = torch.stack([loss for _, loss, _ in self._ready]).cpu().tolist()
        out = [(step, value, rate) for (step, _, rate), value in zip(self._ready, values)]
        self._ready = []
        return out

    def close(self) -> None:
        """Remove the hook and drop what it held."""
        self._handle.remove()
        self._forwards, self._steps, self._ready = [], [], []


class RunJudge:
    """The alerts and the verdict of one run: ``alerting`` (the alerts in force, those raised, the last
    verdict, the stop asked for), ``evidence`` (what the verdict reads), ``history`` (``(step, {alert statistic:
    [layers, heads]})`` of every step judged). It writes through the run's ``publisher`` (:meth:`open`) and reads
    the run's ``members``, handed to each call."""

    def __init__(self) -> None:
        self.publisher: Publisher | None = None
        self.shape, self.resumed = (0, 0), False  # the model's (layers, heads); the run started from a checkpoint
        self.judging: Judging | None = None
        self.strict = False
        self.alerting = Alerting("warn", AlertSettings(), False, VerdictSettings())
        self.alerting.speaks = False
        self.evidence = RunEvidence()
        self.history: list[tuple[int, dict[str, np.ndarray]]] = []
        self._open: tuple[Verdict, bool] | None = None
        self._written_level: int | None = None
        self._noted: tuple[Any, Any] = (None, None)  # the last on_log logs and on_evaluate metrics noted
        self.tap: LossTap | None = None
        self._rate_from: tuple[Any, Any] = (None, None)  # the Trainer's scheduler and optimizer
        self._tapped: Any = None  # the model the loss tap goes on, once a member gives the run-health signals

    def open(self, publisher: Publisher, side: TrainerSide, shape: tuple[int, int], trainer: Any, model: Any) -> None:
        """The run is built: its writer, the Trainer's ``side`` of it, the model's ``(layers, heads)``, the evidence
        of its start (``RunEvidence.begin``); the loss tap (:class:`LossTap`) goes on ``model`` once a member
        that gives the run-health signals joins (:meth:`take`), and only in a run of one process: each process of
        a distributed run sees its own batches' loss, so there every process reads the Trainer's logged loss (the
        same on all) and judges alike."""
        self.publisher, self.shape, self.resumed = publisher, shape, side.resumed
        self.evidence.begin(side.state, trainer)
        # a TrainingArguments has world_size; a plain namespace of arguments (a custom loop's) may not
        single = int(getattr(side.args, "world_size", 1) or 1) == 1
        self._tapped = model if single else None
        self._rate_from = (trainer.event.get("lr_scheduler"), trainer.event.get("optimizer"))

    def note_step(self, members: Sequence[Member], step: int, control: Any) -> None:
        """A training step is over: its loss joins the tap's window; a full window is noted and judged."""
        if self.tap is None or not self.tap.end_step(step, learning_rate(*self._rate_from)):
            return
        if self.evidence.note_losses(self.tap.read()):
            self._verdict(members, step, None, "log", control)

    def close(self) -> None:
        """The run is over: the loss tap comes off the model."""
        if self.tap is not None:
            self.tap.close()
        self.tap, self._tapped, self._rate_from = None, None, (None, None)

    def take(self, member: Member) -> None:
        """A member's part in the judging, as it declares it: its settings (``judging``; None: it takes none),
        whether its errors re-raise (``strict``), whether it prints (``speaks``: any member of the run that prints
        makes the alert lines printed) and whether it gives the run-health signals (the first that does puts the
        loss tap on: the verdict is judged)."""
        if member.gives_health and self.tap is None and self._tapped is not None:
            self.tap = LossTap(self._tapped, every_for(self.evidence.evidence.max_steps))
        judging = member.judging
        if judging is not None and self.judging is not None and judging != self.judging:
            raise SetupError(
                f"{member.name}: on_alert, alerts and verdict differ from another bertwatch callback's on this run, "
                "which judges once: give them the same"
            )
        speaks = self.alerting.speaks or member.speaks
        self.judging, self.strict = judging or self.judging, self.strict or member.strict
        j = self.judging or Judging()
        self.alerting = Alerting(j.on_alert, j.alerts, self.strict, j.verdict)
        self.alerting.speaks = speaks

    def after_pass(self, members: Sequence[Member], result: StepResult, control: Any) -> None:
        """Judge a probe pass's result: the alerts where a member due measures an alert statistic, the verdict where
        one due gave the run-health signals."""
        due = result.due_members()
        alert_names = ALERT_STATS & frozenset().union(*(m.stat_names for m in due))
        grids = {n: g for n, g in result.grids.items() if n in alert_names}
        if grids:
            if self.history and self.history[-1][0] == result.step:
                self.history[-1][1].update(grids)
            else:
                self.history.append((result.step, grids))
            self._alerts(members, result.event, control)
        if result.health and any(m.gives_health for m in due):
            self.evidence.note_probe(result.step, result.health, len(self.alerting.alerts))
            self._verdict(members, result.step, (result.step, result.health), result.event, control)

    def note_log(self, members: Sequence[Member], step: int, logs: Mapping[str, Any] | None, control: Any) -> None:
        """One ``on_log`` (each callback of the run hands it on; noted once)."""
        if logs is not None and logs is self._noted[0]:
            return
        self._noted = (logs, self._noted[1])
        if self.evidence.note_log(step, logs):
            self._verdict(members, step, None, "log", control)

    def note_evaluation(self, step: int, metrics: Mapping[str, Any] | None, context: Any) -> bool:
        """``on_evaluate``'s metrics, noted once; whether they were new (then :meth:`judge_metrics` after the
        evaluation's pass)."""
        if metrics is not None and metrics is self._noted[1]:
            return False
        self._noted = (self._noted[0], metrics)
        return self.evidence.note_evaluation(step, metrics, context)

    def judge_metrics(self, members: Sequence[Member], step: int, control: Any) -> None:
        """The verdict after an evaluation's new metrics (no probe pass judged them)."""
        self._verdict(members, step, None, "metrics", control)

    def write(self, before: int | None = None) -> None:
        """Write the verdict of a step that is over: step ``before`` or an earlier one (None: every step, at the
        end)."""
        if self._open is not None and (before is None or self._open[0].step <= before):
            self._flush()

    def _alerts(self, members: Sequence[Member], event: str, control: Any) -> None:
        """The stability alerts of the newest step: written (``Publisher.publish_alerts``), and acted on."""
        with self.alerting.contained():
            judgement = self.alerting.judge(self.history, self.resumed)
            if judgement is None:
                return
            senders = [m for m in members if m.active and m.log_to_trackers and ALERT_STATS & m.stat_names]
            (layers, heads), step = self.shape, judgement.step
            to_trackers = event != "end" and bool(senders)
            self.publisher.publish_alerts(judgement.alerts, layers, heads, step, judgement.reference_step, to_trackers)
            self.alerting.act(judgement, control)

    def _verdict(
        self,
        members: Sequence[Member],
        step: int,
        health: tuple[int, Mapping[str, float]] | None,
        event: str,
        control: Any,
    ) -> None:
        """The verdict after new evidence at ``step`` (``event``: a probe pass's, "log" or "metrics"), where a member
        gives the run-health signals: kept to be written once the step is over, sent to the trackers at a step with
        run-health signals (``health``), acted on."""
        health_members = [m for m in members if m.active and m.gives_health]
        if not health_members:
            return
        with self.alerting.contained("verdict"):
            verdict = self.alerting.judge_verdict(self.evidence.evidence)
            if verdict is None:
                return
            measured = health is not None and health[0] == verdict.step
            if self._open is not None and self._open[0].step < verdict.step:
                self._flush()
            self._open = (verdict, measured or (self._open is not None and self._open[1]))
            if measured and event != "end" and any(m.log_to_trackers for m in health_members):
                self.publisher.send_verdict(verdict, health[1])
            self.alerting.act_on_verdict(verdict, control)

    def _flush(self) -> None:
        """Write the last verdict judged at its step, where that step has run-health signals or the level changed
        since the last written: the ``verdict`` series (its level: 0 healthy, 1 at risk, 2 failing) and its reasons
        as the ``verdict`` text (one a line, kept at every step; the levels' names and the thresholds in its
        metadata)."""
        verdict, probed = self._open
        self._open = None
        if probed or verdict.level != self._written_level:
            self._written_level = verdict.level
            meta = {"levels": list(LEVELS), "settings": asdict(self.alerting.verdict_settings)}
            text = StepText(VERDICT_SERIES, verdict.reasons, VERDICT_TEXT, meta)
            values = {
                "level": float(verdict.level),
                "known": float(verdict.known),
                "evidence": verdict.evidence,
                "margin": verdict.margin,
                "regression": float(verdict.regression),
            }
            level = NamedValues(VERDICT_SERIES, values, VERDICT_DESCRIPTION)
            self.publisher.publish_records([level, text], verdict.step)
