"""Fine-tuning every task head with ``BertWatchCallback(ablate_on_end=True)`` and a real ``Trainer``: gradient
statistics at every probe step (the history and the event file), and a sweep whose baseline equals a plain
evaluation with the task's metric and whose every head and layer equal that configuration evaluated on its own
(heads zeroed or made uniform by a hand-written hook on the self-attention module, one example at a time, no
bertwatch code).
The case helpers (models, data, plain metrics) are in ``tests/support/task_cases.py``."""

from __future__ import annotations

import glob

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import bertwatch
from bertwatch.callbacks import AblationOptions, ExpertOptions, ProbeOptions, SetupError
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME
from tests.support.models import unit_masks
from tests.support.strict import strict
from tests.support.task_cases import CASES, HEADS, LAYERS, Off, metric_scale, mlm_dataset, model_for, plain_metric
from tests.support.tiny_trainer import tiny_tokenizer, training_args
from tests.support.tolerance import assert_float32_close

STEPS, EVERY = 4, 2
EVAL = 20  # evaluation examples (the sweep scores them all)
STATS = (*GRADIENT_NAMES, IG_NAME, "entropy")


def _trainer(tmp_path, case, tokenizer, model, **overrides) -> T.Trainer:
    return T.Trainer(
        model=model,
        args=training_args(str(tmp_path), max_steps=STEPS, logging_steps=2, **overrides),
        train_dataset=case.dataset(tokenizer, 24, 0),
        eval_dataset=case.dataset(tokenizer, EVAL, 1),
        processing_class=tokenizer,
        data_collator=case.collator(tokenizer),
    )


def _watch(trainer: T.Trainer, case, mode: str) -> bertwatch.BertWatchCallback:
    kwargs = dict(n_resamples=30, keep_only=False, progress=False, max_length=64)
    if case.ablation_rows is not None:
        kwargs["eval_dataset"] = case.ablation_rows(trainer.processing_class)
    return strict(
        bertwatch.watch,  # every default statistic, integrated gradients too
        trainer,
        every_n_steps=EVERY,
        num_probe_examples=6,
        num_maps=1,
        ablate_on_end=True,
        expert=ExpertOptions(integrated_gradients=True, ig_steps=4),
        ablation=AblationOptions(mode=mode, kwargs=kwargs),
        on_alert="none",  # 4 steps of a tiny model may well end failing: the verdict is not what this test checks
    )


def _event_grids(tmp_path, stat: str) -> dict[int, np.ndarray]:
    (run,) = glob.glob(str(tmp_path / "runs" / "*"))
    acc = EventAccumulator(run, size_guidance={"tensors": 0})
    acc.Reload()
    return {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors(f"bertwatch/heads/{stat}")}


def _masks():
    return unit_masks(LAYERS, HEADS)


#: Each head with one disabling mode, both modes over the seven (the other is checked in tests/ablation/test_task_types.py).
MODES = ("uniform", "zero", "uniform", "zero", "uniform", "zero", "uniform")


@pytest.mark.filterwarnings("error::bertwatch.callbacks.BertWatchWarning")  # nothing skipped, nothing stopped
@pytest.mark.parametrize(("case", "mode"), list(zip(CASES, MODES)), ids=[f"{c.name}-{m}" for c, m in zip(CASES, MODES)])
def test_every_head_fine_tunes_with_gradient_statistics_and_an_exact_ablation(tmp_path, case, mode) -> None:
    tokenizer = tiny_tokenizer()
    model = model_for(case, tokenizer)
    trainer = _trainer(tmp_path, case, tokenizer, model)
    callback = _watch(trainer, case, mode)
    trainer.train()

    expected_steps = list(range(0, STEPS + 1, EVERY))
    assert [step for step, _ in callback.history] == expected_steps
    for step, grids in callback.history:
        assert set(GRADIENT_NAMES) | {IG_NAME} <= set(grids), step
        assert np.isfinite(grids[IG_NAME]).all() and (grids[IG_NAME] != 0).any(), step
        assert np.isfinite(grids["head_importance"]).all() and (grids["head_importance"] > 0).any(), step
        assert np.isfinite(grids["attn_grad_other"]).all(), step
    logged = _event_grids(tmp_path, "head_importance")
    assert sorted(logged) == expected_steps
    np.testing.assert_allclose(logged[STEPS], callback.history[-1][1]["head_importance"], rtol=1e-6)

    result = callback.ablation_result
    assert result.config["task_type"] == case.task_type and result.metric == case.metric
    assert result.config["mode"] == mode and result.config["layer_reuse"]
    eval_rows = (
        case.ablation_rows(tokenizer) if case.ablation_rows is not None else list(case.dataset(tokenizer, EVAL, 1))
    )
    model.eval()
    for unit, where, mask in _masks():
        got = {"baseline": lambda: result.baseline, "head": lambda: result.heads[where][0]}.get(
            unit, lambda: result.layers[where][0]
        )()
        off = Off(mask, mode)
        want = plain_metric(case, model, tokenizer, eval_rows, off)
        scale = metric_scale(case, model, tokenizer, eval_rows, off)
        assert_float32_close(got, want, scale=scale, msg=f"{unit} {where}")
    unmasked = Off(np.zeros((LAYERS, HEADS), dtype=bool))
    for name, plain in case.also:
        assert_float32_close(result.baseline_metrics[name], plain(model, tokenizer, eval_rows, unmasked), msg=name)
    changed = np.concatenate([result.heads[..., 1].ravel(), result.layers[:, 1]])
    assert np.any(changed != 0)  # disabling changes the metric: the comparisons above could fail


def test_masked_lm_probe_masks_are_fixed_and_seeded_whatever_the_collator_draws(tmp_path) -> None:
    """The MLM probe set holds the seeded masks of its examples (the same ones the sweep scores), not the
    collator's random ones: identical whatever the global RNG, [MASK] where a label is, the token as label."""
    from bertwatch.heads.task_heads import example_mask
    from bertwatch.probe.probe_set import build_probe_set

    tokenizer = tiny_tokenizer()
    model = model_for(next(c for c in CASES if c.name == "masked-lm"), tokenizer)
    dataset = mlm_dataset(tokenizer, 12, 1)
    collator = T.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5)
    probes = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        probes.append(build_probe_set(tokenizer, dataset=dataset, collator=collator, model=model, num_examples=5))
    first, second = (torch.cat([b["labels"] for b in p.batches]) for p in probes)
    assert torch.equal(first, second) and bool((first != -100).any())
    indices = sorted(np.random.default_rng(0).choice(12, size=5, replace=False).tolist())
    batch = probes[0].batches[0]
    for row, index in enumerate(indices):
        ids = dataset[index]["input_ids"]
        masked, labels = example_mask(ids, index, tokenizer.mask_token_id, tokenizer.all_special_ids)
        assert batch["input_ids"][row, : len(ids)].tolist() == masked
        assert batch["labels"][row].tolist() == labels + [-100] * (batch["labels"].shape[1] - len(ids))
        for token, got, label in zip(ids, masked, labels):
            assert (got, label) == ((tokenizer.mask_token_id, token) if label != -100 else (token, -100))
    original = dataset[0]["input_ids"]  # masked beforehand, the original token in its labels: unmasked first
    premasked = [
        {
            "input_ids": [tokenizer.mask_token_id if i == 2 else t for i, t in enumerate(original)],
            "labels": [t if i == 2 else -100 for i, t in enumerate(original)],
        }
    ]
    again = build_probe_set(tokenizer, dataset=premasked, collator=collator, model=model)
    masked, labels = example_mask(original, 0, tokenizer.mask_token_id, tokenizer.all_special_ids)
    assert again.batches[0]["labels"][0].tolist() == labels and again.batches[0]["input_ids"][0].tolist() == masked
    texts = ["good movie .", "the plot was dull , the music fun"]
    probe = build_probe_set(tokenizer, texts=texts, model=model)
    for number, text in enumerate(texts):  # probe_texts are masked the same way, numbered in order
        ids = tokenizer(text)["input_ids"]
        _, labels = example_mask(ids, number, tokenizer.mask_token_id, tokenizer.all_special_ids)
        assert probe.batches[0]["labels"][number, : len(ids)].tolist() == labels and probe.has_labels


def test_question_answering_features_without_squad_examples_are_refused_at_setup(tmp_path) -> None:
    """A tokenized QA eval set (no question, context, answers) cannot be scored by exact match / F1: refused at
    on_train_begin, before any step, with what to do."""
    tokenizer = tiny_tokenizer()
    case = next(c for c in CASES if c.name == "question-answering")
    trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer))
    strict(bertwatch.watch, trainer, stats=STATS, num_maps=0, ablate_on_end=True)
    steps = []
    trainer.add_callback(type("Spy", (T.TrainerCallback,), {"on_step_begin": lambda *a, **k: steps.append(1)}))
    with pytest.raises(SetupError, match="SQuAD layout.*eval_dataset"):
        trainer.train()
    assert steps == []


def test_gradient_statistics_of_a_head_without_a_loss_are_refused_at_setup(tmp_path) -> None:
    """Explicitly asked-for gradient statistics that cannot be computed fail at on_train_begin: a probe set without
    the head's label fields, an answer position the model's loss would ignore, and a loss_fn that does not return
    one loss per example."""
    tokenizer = tiny_tokenizer()
    case = next(c for c in CASES if c.name == "question-answering")
    no_positions = case.dataset(tokenizer, 12, 1).remove_columns(["start_positions", "end_positions"])
    cut_off = case.dataset(tokenizer, 12, 1).map(
        lambda row, i: {"end_positions": 60 if i == 9 else row["end_positions"]}, with_indices=True
    )
    for callback, match in (
        (strict(bertwatch.GradientImportanceCallback, probe_dataset=no_positions), "no labels"),
        (  # in the third probe batch: every batch is checked
            strict(bertwatch.GradientImportanceCallback, probe_dataset=cut_off, probing=ProbeOptions(batch_size=4)),
            "outside the sequence",
        ),
        (
            strict(bertwatch.GradientImportanceCallback, loss_fn=lambda outputs, batch: outputs.start_logits.sum()),
            "one loss per example",
        ),
    ):
        trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer))
        trainer.add_callback(callback)
        callback.set_trainer(trainer)
        with pytest.raises(SetupError, match=match):
            trainer.train()


def test_loss_fn_gives_gradient_statistics_without_label_fields(tmp_path) -> None:
    """With loss_fn= the probe examples need no label fields: the statistics come from that loss."""
    tokenizer = tiny_tokenizer()
    case = next(c for c in CASES if c.name == "question-answering")
    no_positions = case.dataset(tokenizer, 12, 1).remove_columns(["start_positions", "end_positions"])
    callback = strict(
        bertwatch.GradientImportanceCallback,
        probe_dataset=no_positions,
        every_n_steps=EVERY,
        loss_fn=lambda outputs, batch: outputs.start_logits.logsumexp(-1),
    )
    trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer))
    trainer.add_callback(callback)
    callback.set_trainer(trainer)
    trainer.train()
    assert [step for step, grids in callback.history if "head_importance" in grids] == [0, 2, 4]


def test_multiple_choice_rows_meet_their_own_reference_in_every_probe_batch(tmp_path) -> None:
    """Each choice is a row of the encoder: drift compares each row with its own reference row, in every probe
    batch (three batches here), so it is zero at step 0 and grows after training steps."""
    tokenizer = tiny_tokenizer()
    case = next(c for c in CASES if c.name == "multiple-choice")
    trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer), learning_rate=3e-2)
    callback = strict(
        bertwatch.watch,
        trainer,
        stats=("drift_js", "entropy"),
        every_n_steps=EVERY,
        num_probe_examples=5,
        num_maps=1,
        probing=ProbeOptions(batch_size=2),
    )
    trainer.train()
    grids = dict(callback.history)
    np.testing.assert_allclose(grids[0]["drift_js"], 0, atol=1e-4)
    assert np.isfinite(grids[STEPS]["drift_js"]).all() and grids[STEPS]["drift_js"].max() > 1e-3


def test_ablation_callback_refuses_at_setup_and_contains_a_failure_at_the_end(tmp_path) -> None:
    """What the sweep would refuse (an unknown setting, labels outside the head's classes) stops the run before
    its first step; a failure of the sweep itself at the end costs one warning, and training completes."""
    from bertwatch.callbacks import BertWatchWarning
    from bertwatch.callbacks.ablate_on_end import AblationCallback

    tokenizer = tiny_tokenizer()
    case = CASES[0]
    bad_labels = case.dataset(tokenizer, 4, 1).map(lambda row: {"label": 5})
    for sweep, match in (
        (AblationCallback(n_resamples=30, not_a_setting=1), "not_a_setting"),
        (AblationCallback(eval_dataset=bad_labels, n_resamples=30), "outside the model's 2 classes"),
    ):
        trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer))
        trainer.add_callback(sweep)
        sweep.set_trainer(trainer)
        with pytest.raises(SetupError, match=match):
            trainer.train()
        assert trainer.state.global_step == 0

    def broken(prediction):
        raise RuntimeError("metric server down")

    sweep = AblationCallback(compute_metrics=broken, n_resamples=30, progress=False)
    trainer = _trainer(tmp_path, case, tokenizer, model_for(case, tokenizer))
    trainer.add_callback(sweep)
    sweep.set_trainer(trainer)
    with pytest.warns(BertWatchWarning, match="metric server down"):
        trainer.train()
    assert trainer.state.global_step == STEPS and sweep.disabled and not sweep.results
