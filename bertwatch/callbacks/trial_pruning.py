"""Pruning a sweep's failing trials: a watched trial whose verdict is failing stops, and its search records it as
pruned: Optuna's ``TrialPruned``, with ``Trainer.hyperparameter_search(backend="optuna")`` or your own Optuna loop;
in Ray Tune (``backend="ray"`` or your own trainable), the trial ends early and its results say so.

How a pruned trial stops: at the first event where the run's verdict (``callbacks.judging``, read from the
bertwatch callback's ``alerting.verdict``) is failing before the last step, the pruner asks the Trainer to stop
(``control.should_training_stop``; it asks for no checkpoint). The Trainer finishes that step as it finishes any
other, its log, evaluation and any checkpoint due written whole, leaves its loop and calls every callback's
``on_train_end`` (the trackers close their runs, bertwatch writes its end). Only then does the pruner raise
``optuna.TrialPruned`` out of ``trainer.train()``, as the Trainer's own Optuna pruning does after ``on_train_end``:
no checkpoint is ever cut short. A failing verdict at the last step prunes nothing (there is nothing left to save),
and a run that is no trial of a search is never stopped here (``on_alert="stop"`` stops a run on its own).

In a Ray Tune trial every evaluation's metrics, which the Trainer reports to Ray, carry the verdict
(``bertwatch_verdict_level``, ``bertwatch_verdict_rank``), so Ray's schedulers and stoppers can act on it too; a trial
stopped here reports once more when its training ends (``bertwatch_pruned_step`` and the verdict, beside the last
``objective``), and ends as a finished Ray trial with fewer steps: Ray has no "pruned" state.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import TrainerCallback

from bertwatch.callbacks import announce
from bertwatch.callbacks._safe import BertWatchWarning, OwnCallback, contained
from bertwatch.callbacks.attach import watch
from bertwatch.callbacks.tracking import NotATracker
from bertwatch.callbacks.watch import WatchCallback

__all__ = ["PruneFailing", "prune_failing"]

#: The Optuna trial's user attributes the pruner sets: the step it stopped at and the verdict's words.
PRUNED_STEP_ATTR = "bertwatch_pruned_step"
PRUNED_VERDICT_ATTR = "bertwatch_verdict"


#: The keys the verdict adds to a Ray Tune trial's reported metrics.
RAY_LEVEL, RAY_RANK, RAY_PRUNED_STEP = "bertwatch_verdict_level", "bertwatch_verdict_rank", "bertwatch_pruned_step"


def _in_ray_trial() -> bool:
    """Whether this code runs inside a Ray Tune trial (only where Ray is already imported: no import here)."""
    import sys

    if "ray.tune" not in sys.modules:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Ray warns when asked outside a trial
        try:
            return sys.modules["ray.tune"].get_context().get_trial_id() is not None
        except Exception:  # an older or newer Ray without this context: no trial we know how to read
            return False


def _is_optuna_trial(trial: Any) -> bool:
    """Whether ``trial`` is an Optuna trial (``optuna.Trial``, ``FixedTrial``; not Ray Tune's dict)."""
    try:
        from optuna.trial import BaseTrial
    except ImportError:  # no Optuna: no Optuna trial either
        return False
    return isinstance(trial, BaseTrial)


class PruneFailing(OwnCallback, NotATracker, TrainerCallback):
    """The pruner of one Trainer (made by :func:`prune_failing`): it reads ``monitor``'s verdict and prunes
    ``trial`` (None: the trial ``Trainer.hyperparameter_search`` hands the Trainer for each ``train()``).

    ``pruned_at`` is the step a trial was stopped at (None while it is not), ``reason`` the verdict's words; both
    are reset when a trial begins.
    """

    def __init__(self, monitor: WatchCallback, trial: Any = None) -> None:
        super().__init__()
        self.monitor = monitor
        self.trial = trial
        self.pruned_at: int | None = None
        self.reason: str | None = None
        self._current: Any = None  # the trial of the run under way
        self._ray = False  # it is a Ray Tune trial

    def _trial_of_run(self) -> Any:
        """The trial given, else the one the Trainer's ``hyperparameter_search`` passed to ``train()``."""
        if self.trial is not None:
            return self.trial
        trainer = self.monitor.trainer
        return None if trainer is None else trainer._trial  # set by every Trainer.train() before on_train_begin

    @contained("on_train_begin")
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.pruned_at, self.reason = None, None
        self._current = self._trial_of_run()
        self._ray = self._current is not None and _in_ray_trial()
        if self._current is not None and not (self._ray or _is_optuna_trial(self._current)):
            kind, self._current = type(self._current).__name__, None
            warnings.warn(
                f"bertwatch: prune_failing prunes Optuna and Ray Tune trials; this trial is a {kind} outside a Ray "
                "Tune trial: nothing will be pruned. Use hyperparameter_search(backend='optuna' or 'ray'), or your "
                "own Optuna loop or Ray trainable.",
                BertWatchWarning,
                stacklevel=2,
            )

    def _check(self, state: Any, control: Any) -> None:
        """Ask the Trainer to stop at a failing verdict judged before the last step (once a trial)."""
        verdict = self.monitor.alerting.verdict if self.monitor.alerting is not None else None
        if self._current is None or self.pruned_at is not None or verdict is None or verdict.level < 2:
            return
        step = int(state.global_step)
        if state.max_steps and step >= state.max_steps:
            return
        self.pruned_at, self.reason = step, verdict.describe()
        control.should_training_stop = True
        then = "its last report says so to Ray Tune" if self._ray else "train() raises optuna.TrialPruned"
        if state.is_world_process_zero and not announce.quiet(self.monitor.settings.quiet):
            announce.say([f"pruning this trial at step {step} of {state.max_steps} (the verdict is failing): training "
                          f"stops after this step, then {then}"])  # fmt: skip

    def _verdict_metrics(self) -> dict[str, float]:
        """The verdict as Ray Tune result keys (empty before the first verdict)."""
        verdict = self.monitor.alerting.verdict if self.monitor.alerting is not None else None
        if verdict is None:
            return {}
        found = {RAY_LEVEL: float(verdict.level), RAY_RANK: float(verdict.rank)}
        return found | ({RAY_PRUNED_STEP: float(self.pruned_at)} if self.pruned_at is not None else {})

    @contained("on_step_end")
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._check(state, control)

    @contained("on_log")
    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self._check(state, control)

    @contained("on_evaluate")
    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kwargs: Any) -> None:
        self._check(state, control)
        if self._ray and self._current is not None and isinstance(metrics, dict):
            metrics.update(self._verdict_metrics())  # the Trainer reports these metrics to Ray after this call

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Once every callback has ended the run, raise ``optuna.TrialPruned`` for a trial stopped here. The
        callbacks after this one in the Trainer's list are ended first, by this call, as the Trainer's
        ``on_train_end`` would have."""
        if self._current is None or self.pruned_at is None or self.disabled:
            return
        if self._ray:
            self._report_to_ray()
            return
        trial, self._current = self._current, None
        handler = self.monitor.trainer.callback_handler if self.monitor.trainer is not None else None
        later = handler.callbacks[handler.callbacks.index(self) + 1 :] if handler and self in handler.callbacks else []
        for callback in later:
            callback.on_train_end(args, state, control, **kwargs)
        import optuna

        if hasattr(trial, "set_user_attr"):  # an optuna.Trial; a FixedTrial keeps no attributes
            trial.set_user_attr(PRUNED_STEP_ATTR, self.pruned_at)
            trial.set_user_attr(PRUNED_VERDICT_ATTR, self.reason)
        raise optuna.TrialPruned(f"bertwatch: the verdict was failing at step {self.pruned_at}: {self.reason}")

    def _report_to_ray(self) -> None:
        """The stopped trial's last report to Ray Tune: the verdict and the step it stopped at, beside the last
        evaluation's ``objective`` (Ray's schedulers read it from every report). Before any evaluation there is no
        objective: the Trainer's search evaluates once training ends and reports that, the verdict added to it."""
        trainer = self.monitor.trainer
        # the Trainer sets objective at its first evaluation in a search: before it, it has none
        objective = getattr(trainer, "objective", None) if trainer is not None else None
        if objective is None:
            return
        from ray import tune

        self._current = None
        tune.report({"objective": objective, **self._verdict_metrics()})


def prune_failing(trainer: Any, trial: Any = None) -> PruneFailing:
    """Prune a sweep's trial as soon as bertwatch's verdict on it is failing: training stops after that step; with
    Optuna ``trainer.train()`` then raises ``optuna.TrialPruned``, which Optuna records as a pruned trial; in Ray
    Tune the trial reports the step it stopped at (``bertwatch_pruned_step``) and ends.

    With ``Trainer.hyperparameter_search(backend="optuna")`` or ``backend="ray"`` call it once, before the search:
    the Trainer hands each trial to ``train()`` and the pruner reads it there. In your own Optuna objective, give it
    the trial; in your own Ray Tune trainable, give it the trainable's ``config``. In Ray every evaluation's metrics
    also carry the verdict (``bertwatch_verdict_level``, ``bertwatch_verdict_rank``) for Ray's schedulers. The
    stop is clean: the Trainer finishes the step (its log, evaluation and any checkpoint due, written whole) and
    ends every callback before the exception is raised; a failing verdict at the last step prunes nothing. A run
    that is no trial (no ``trial`` given, not in a search) is never stopped by it.

    Args:
        trainer: the trial's ``transformers.Trainer``; watched with ``bertwatch.watch(trainer, ...)`` before (its
            callback's verdict is the one read), else watched here with the defaults.
        trial: the ``optuna.Trial`` of your own objective, or your Ray Tune trainable's ``config``; None within
            ``hyperparameter_search``.

    Returns:
        The pruner (a Trainer callback, added last): ``pruned_at``, the step a trial was stopped at, and
        ``reason``, the verdict's words. A second call returns the same one, with ``trial`` if given.

    Raises:
        TypeError: ``trainer`` is not a Trainer, or ``trial`` is neither an Optuna trial nor given in a Ray Tune
            trial.

    Example:
        >>> import tempfile
        >>> import transformers as T
        >>> from bertwatch.callbacks import prune_failing
        >>> config = T.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
        ...                       intermediate_size=16)
        >>> args = T.TrainingArguments(tempfile.mkdtemp(), report_to=[])
        >>> trainer = T.Trainer(model=T.BertForSequenceClassification(config), args=args)
        >>> pruner = prune_failing(trainer)
        >>> type(pruner).__name__, pruner.monitor.shown_name, prune_failing(trainer) is pruner
        ('PruneFailing', 'bertwatch', True)
        >>> prune_failing(trainer, trial={"learning_rate": 1e-5})
        Traceback (most recent call last):
        TypeError: prune_failing: trial must be an Optuna trial (the objective's argument), or in a Ray Tune trainable its config, got dict outside a Ray Tune trial
    """
    if trial is not None and not (_is_optuna_trial(trial) or _in_ray_trial()):
        raise TypeError(
            "prune_failing: trial must be an Optuna trial (the objective's argument), or in a Ray Tune trainable its "
            f"config, got {type(trial).__name__} outside a Ray Tune trial"
        )
    monitor = watch(trainer)
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, PruneFailing):
            callback.monitor, callback.trial = monitor, trial if trial is not None else callback.trial
            return callback
    pruner = PruneFailing(monitor, trial)
    trainer.add_callback(pruner)
    return pruner
