"""Pruning a sweep's failing trials end to end on a tiny BERT: ``Trainer.hyperparameter_search(backend="optuna")``
and a user's own Optuna loop, a trial with a learning rate far too high pruned at its failing step (its
checkpoints whole), a learning one run to its end; a run that is no trial never stopped."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import optuna  # the test extra installs it: a missing optuna fails these tests, never skips them
import pytest
import transformers as T

from bertwatch.callbacks import BertWatchCallback, VerdictSettings, prune_failing
from bertwatch.callbacks.trial_pruning import PRUNED_STEP_ATTR, PRUNED_VERDICT_ATTR
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import tiny_tokenizer, training_args

STEPS = 32
#: A learning rate the tiny model learns the task with (at risk while it has not yet, healthy from step 25, never
#: failing with a verdict that waits half the run) and one far too high (its predictions collapse to one class and
#: the lower layers' gradients vanish: failing at once, at step 4).
LEARNS, FAILS = 1e-2, 1.0


def _data(tok, count: int, seed: int):
    """A balanced task a tiny BERT learns in a few steps: the label is whether the text starts with "great" or
    "awful"."""
    from datasets import Dataset

    rng = random.Random(seed)
    filler = "the a movie film plot actors story was is it and scene music".split()
    texts, labels = [], []
    for i in range(count):
        words = [rng.choice(filler) for _ in range(rng.randint(2, 6))]
        words.insert(0, "great" if i % 2 else "awful")
        texts.append(" ".join(words) + " .")
        labels.append(i % 2)
    return Dataset.from_dict({"label": labels, **tok(texts, truncation=True, max_length=16)})


def _trainer(out, **overrides) -> T.Trainer:
    tok = tiny_tokenizer()
    values = dict(max_steps=STEPS, per_device_train_batch_size=8, logging_steps=2, eval_strategy="steps", eval_steps=8)
    values.update(overrides)
    return T.Trainer(
        model_init=lambda: bert_with_head(
            T.BertForSequenceClassification,
            tok,
            scale=0.3,
            num_labels=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
        args=training_args(str(out), **values),
        train_dataset=_data(tok, 64, 0),
        eval_dataset=_data(tok, 16, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
    )


def _watch(trainer: T.Trainer) -> BertWatchCallback:
    callback = BertWatchCallback(
        every_n_steps=4, num_probe_examples=8, quiet=True, on_alert="none", verdict=VerdictSettings(hold_share=0.5)
    )
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    return callback


def test_hyperparameter_search_with_optuna_prunes_the_failing_trial_only(tmp_path) -> None:
    trainer = _trainer(tmp_path / "out", save_strategy="steps", save_steps=2)
    _watch(trainer)
    pruner = prune_failing(trainer)  # the one line
    storage = optuna.storages.InMemoryStorage()
    trainer.hyperparameter_search(
        hp_space=lambda trial: {"learning_rate": trial.suggest_categorical("learning_rate", [FAILS, LEARNS])},
        backend="optuna",
        n_trials=2,
        direction="minimize",
        sampler=optuna.samplers.GridSampler({"learning_rate": [FAILS, LEARNS]}),
        storage=storage,
        study_name="sweep",
    )
    trials = {t.params["learning_rate"]: t for t in optuna.load_study(study_name="sweep", storage=storage).trials}
    failed, learned = trials[FAILS], trials[LEARNS]
    assert failed.state == optuna.trial.TrialState.PRUNED
    assert failed.user_attrs[PRUNED_STEP_ATTR] == 4 and failed.user_attrs[PRUNED_VERDICT_ATTR].startswith("failing")
    assert learned.state == optuna.trial.TrialState.COMPLETE and learned.value is not None
    assert PRUNED_STEP_ATTR not in learned.user_attrs
    assert pruner.pruned_at == (4 if failed.number > learned.number else None)  # the last trial's, reset at each
    # the pruned trial stopped after step 4, whose checkpoint (due there) was written whole first: each loads
    run = tmp_path / "out" / f"run-{failed.number}"
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    for step in (2, 4):
        checkpoint = run / f"checkpoint-{step}"
        assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
        T.BertForSequenceClassification.from_pretrained(checkpoint)
    assert (tmp_path / "out" / f"run-{learned.number}" / f"checkpoint-{STEPS}").is_dir()


def test_your_own_optuna_loop_prunes_through_the_helper(tmp_path) -> None:
    pruned_after = {}

    def objective(trial) -> float:
        learning_rate = trial.suggest_categorical("learning_rate", [FAILS, LEARNS])
        trainer = _trainer(tmp_path / f"t{trial.number}", learning_rate=learning_rate, save_strategy="no")
        _watch(trainer)
        prune_failing(trainer, trial)
        try:
            trainer.train()
        finally:
            pruned_after[learning_rate] = trainer.state.global_step
        return trainer.evaluate()["eval_loss"]

    study = optuna.create_study(sampler=optuna.samplers.GridSampler({"learning_rate": [FAILS, LEARNS]}))
    study.optimize(objective, n_trials=2)
    states = {t.params["learning_rate"]: t.state for t in study.trials}
    assert states == {FAILS: optuna.trial.TrialState.PRUNED, LEARNS: optuna.trial.TrialState.COMPLETE}
    assert pruned_after == {FAILS: 4, LEARNS: STEPS}
    assert study.best_trial.params["learning_rate"] == LEARNS


def test_a_run_that_is_no_trial_is_never_stopped(tmp_path) -> None:
    trainer = _trainer(tmp_path / "out", learning_rate=FAILS, save_strategy="no", max_steps=6, eval_strategy="no")
    callback = _watch(trainer)
    pruner = prune_failing(trainer)
    trainer.train()
    assert callback.alerting.verdict.label == "failing" and trainer.state.global_step == 6
    assert pruner.pruned_at is None


def test_a_trial_that_is_not_optunas_is_refused_with_what_to_give(tmp_path) -> None:
    trainer = _trainer(tmp_path)
    with pytest.raises(TypeError, match="trial must be an Optuna trial"):
        prune_failing(trainer, {"learning_rate": 1e-3})


def ray_search(folder: str) -> dict:
    """``hyperparameter_search(backend="ray")`` over the two learning rates on Ray's own local cluster (one CPU, the
    trials one after the other), watched and pruned; each trial's status and last result, and the best rate."""
    import ray
    from ray import tune

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        trainer = _trainer(Path(folder) / "out", save_strategy="no")
        _watch(trainer)
        prune_failing(trainer)
        best = trainer.hyperparameter_search(
            hp_space=lambda _: {"learning_rate": tune.grid_search([FAILS, LEARNS])},
            backend="ray",
            n_trials=1,  # the grid gives the two trials
            direction="minimize",
            resources_per_trial={"cpu": 1},
            storage_path=str(Path(folder) / "ray"),
            verbose=0,
        )
    finally:
        ray.shutdown()
    trials = {
        str(t.config["learning_rate"]): {"status": t.status, **{k: v for k, v in t.last_result.items() if k in KEPT}}
        for t in best.run_summary.trials
    }
    return {"trials": trials, "best": best.hyperparameters["learning_rate"]}


KEPT = ("training_iteration", "bertwatch_verdict_level", "bertwatch_verdict_rank", "bertwatch_pruned_step")


def test_hyperparameter_search_with_ray_tune_stops_the_failing_trial_only(tmp_path) -> None:
    """Ray Tune on one machine: the failing trial stops at its failing step and says so in its last report; the
    learning one runs to its end; every evaluation reported to Ray carries the verdict. In a fresh process: Ray
    pickles the Trainer, and after any training accelerate's shared gradient state holds weak references that no
    Trainer of that process pickles with (bertwatch's or not)."""
    import ray  # noqa: F401 (the test extra installs ray[tune]: a missing ray fails this test, never skips it)

    from bertwatch.callbacks.trial_pruning import RAY_LEVEL, RAY_PRUNED_STEP, RAY_RANK

    root = Path(__file__).resolve().parents[2]
    code = f"import json; from tests.callbacks.test_trial_pruning import ray_search; print(json.dumps(ray_search({str(tmp_path)!r})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    failed, learned = found["trials"][str(FAILS)], found["trials"][str(LEARNS)]
    assert failed["status"] == learned["status"] == "TERMINATED"
    assert failed[RAY_PRUNED_STEP] == 4 and failed[RAY_LEVEL] == 2
    assert RAY_PRUNED_STEP not in learned and learned["training_iteration"] == STEPS // 8
    assert learned[RAY_LEVEL] == 0 and 0 <= learned[RAY_RANK] < 1
    assert found["best"] == LEARNS
