"""The probe pass's context read from the Trainer (callbacks/probe_setup.py): a setup bertwatch cannot use is
refused before any step with what to do, and without an eval set the probe set comes from the training set, said
once."""

from __future__ import annotations

import warnings

import pytest
import transformers as T

from bertwatch.callbacks import BertWatchCallback, BertWatchWarning, ProbeOptions, SetupError
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        ("logging_dir", r"cannot write its event file in .*a file/runs.*pass logging_dir="),
        ("reference_model", r"reference_model .*a file/model.* cannot be loaded .*pass the folder of a saved model"),
    ],
)
def test_a_setup_bertwatch_cannot_use_is_refused_before_any_step(tmp_path, option, refusal) -> None:
    """An event folder under a file (unwritable, even for root) and a reference model path that holds no model."""
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    options = {
        "logging_dir": {"logging_dir": str(blocker / "runs")},
        "reference_model": {"probing": ProbeOptions(reference_model=str(blocker / "model"))},
    }[option]
    tok = tiny_tokenizer()
    trainer = T.Trainer(
        model=tiny_bert(tok),
        args=training_args(str(tmp_path / "out"), max_steps=2),
        train_dataset=toy_dataset(tok, 8, 0),
        eval_dataset=toy_dataset(tok, 4, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
    )
    steps: list[int] = []

    class Steps(T.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    callback = BertWatchCallback(num_probe_examples=4, **options)
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    trainer.add_callback(Steps())
    with pytest.raises(SetupError, match=refusal):
        trainer.train()
    assert steps == []


def test_without_an_eval_set_the_probe_set_comes_from_the_training_set_with_one_warning(tmp_path) -> None:
    tok = tiny_tokenizer()
    train = toy_dataset(tok, 8, 0)
    trainer = T.Trainer(
        model=tiny_bert(tok),
        args=training_args(str(tmp_path / "out"), max_steps=1),
        train_dataset=train,
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
    )
    callback = BertWatchCallback(num_probe_examples=4, every_n_steps=0, probing=ProbeOptions(at_end=False))
    callback.set_trainer(trainer)
    trainer.add_callback(callback)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    said = [str(w.message) for w in caught if issubclass(w.category, BertWatchWarning)]
    sampled = [m for m in said if "sampled from the training set" in m]
    assert len(sampled) == 1 and "the Trainer has no eval_dataset" in sampled[0], said
    assert not callback.disabled and [step for step, _ in callback.history] == [0]
