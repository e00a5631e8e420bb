"""The setup check of the gradient statistics' loss, made by the start pass (``WatchedRun._pass``): no
forward of its own where that pass takes the gradient statistics, and the same measurements and the same verdict
before the first optimiser step wherever the refusal is found; its own forward, still before that step, where the
start pass cannot make it."""

from __future__ import annotations

import copy
import importlib
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as T

import bertwatch.callbacks.members as members_module
import bertwatch.callbacks.watched_run as watched_module
from bertwatch.callbacks import (
    BertWatchCallback,
    BertWatchWarning,
    ExpertOptions,
    GradientImportanceCallback,
    ProbeOptions,
    SetupError,
)
from bertwatch.heads.gradients.importance import GRADIENT_NAMES
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import tiny_tokenizer, toy_dataset, training_args

watch_module = importlib.import_module("bertwatch.callbacks.watch")  # the package's `watch` is the function

pytestmark = pytest.mark.fast

PROBE = dict(num_probe_examples=6, every_n_steps=0, probing=ProbeOptions(batch_size=3, on_evaluate=False, at_end=False))
REFUSAL = "no example of the batch has a labelled item"


def _probing(**changes) -> dict:
    """``PROBE`` with ``changes`` to its probe options (``at_start=False``)."""
    return {**{k: v for k, v in PROBE.items() if k != "every_n_steps"}, "probing": replace(PROBE["probing"], **changes)}


def _probe(tok, unlabelled_second_batch: bool = False):
    """Six probe examples, two batches of three; with ``unlabelled_second_batch`` the second one's labels are all
    -100, which the model's loss cannot take (found only at that batch)."""
    data = toy_dataset(tok, 6, 1)
    if unlabelled_second_batch:
        data = data.map(lambda row, i: {"label": -100 if i >= 3 else row["label"]}, with_indices=True)
    return data


class _Run:
    """A one-step training run of a tiny BERT classifier with ``callback``; counts the check's own forwards
    (``members.check_gradients``), each with whether the weights were still the initial ones then."""

    def __init__(self, out, callback, monkeypatch, unlabelled_second_batch: bool = False, steps: int = 1) -> None:
        tok = tiny_tokenizer()
        self.model = bert_with_head(T.BertForSequenceClassification, tok, 2, 4, seed=3, scale=0.25, num_labels=2)
        self.initial = copy.deepcopy(self.model)
        self.checks: list[bool] = []
        real = members_module.check_gradients

        def counted(*args, **kwargs):
            self.checks.append(self.untrained())
            return real(*args, **kwargs)

        monkeypatch.setattr(members_module, "check_gradients", counted)
        self.trainer = T.Trainer(
            model=self.model,
            args=training_args(str(out), max_steps=steps),
            train_dataset=toy_dataset(tok, 8, 0),
            eval_dataset=_probe(tok, unlabelled_second_batch),
            processing_class=tok,
            data_collator=T.DataCollatorWithPadding(tok),
            callbacks=[callback],
        )
        callback.set_trainer(self.trainer)

    def untrained(self) -> bool:
        """Whether no optimiser step has changed the weights yet."""
        start = dict(self.initial.named_parameters())
        return all(torch.equal(p, start[n]) for n, p in self.model.named_parameters())


def _assert_same_grids(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_the_start_pass_makes_the_check_and_measures_what_the_checks_own_forward_gave(tmp_path, monkeypatch) -> None:
    folded = BertWatchCallback(**PROBE)
    run = _Run(tmp_path / "a", folded, monkeypatch)
    run.trainer.train()
    assert run.checks == []
    assert set(GRADIENT_NAMES) <= set(folded.history[0][1])
    # the check at setup, by its own forward, and a start pass that only measures
    monkeypatch.setattr(watch_module, "resolve", lambda member, c, _: members_module.resolve(member, c, True))
    monkeypatch.setattr(watched_module.WatchedRun, "_checks_loss", lambda self, *_: False)
    own = BertWatchCallback(**PROBE)
    run = _Run(tmp_path / "b", own, monkeypatch)
    run.trainer.train()
    assert run.checks == [True]
    assert folded.history[0][0] == own.history[0][0] == 0
    _assert_same_grids(folded.history[0][1], own.history[0][1])


def test_a_refusal_in_a_later_batch_drops_the_defaults_gradients_and_measures_the_rest_as_without_them(
    tmp_path, monkeypatch
) -> None:
    defaults = BertWatchCallback(**PROBE)
    run = _Run(tmp_path / "a", defaults, monkeypatch, unlabelled_second_batch=True)
    joined = []  # the member the callback brought to its run
    add = watched_module.WatchedRun.add
    monkeypatch.setattr(
        watched_module.WatchedRun, "add", lambda self, member: joined.append(member) or add(self, member)
    )
    with pytest.warns(
        BertWatchWarning, match=rf"BertWatchCallback skips the gradient statistics \(.*head_importance.*\): {REFUSAL}"
    ):
        run.trainer.train()
    assert run.checks == []
    assert defaults.member_handle.member is joined[0], "the member gave its gradient statistics up, not replaced"
    assert not set(GRADIENT_NAMES) & defaults.stat_names
    assert run.trainer.state.global_step == 1
    others = tuple(n for n in BertWatchCallback.default_stats if n not in GRADIENT_NAMES)
    without = BertWatchCallback(stats=others, **PROBE)
    _Run(tmp_path / "b", without, monkeypatch, unlabelled_second_batch=True).trainer.train()
    assert defaults.history[0][0] == 0
    assert not set(GRADIENT_NAMES) & set(defaults.history[0][1])
    _assert_same_grids(defaults.history[0][1], without.history[0][1])


@pytest.mark.parametrize("at_start", [True, False])
def test_a_refusal_asked_for_by_name_stops_the_run_before_the_first_optimiser_step(
    tmp_path, monkeypatch, at_start
) -> None:
    callback = GradientImportanceCallback(**_probing(at_start=at_start), every_n_steps=1)
    run = _Run(tmp_path, callback, monkeypatch, unlabelled_second_batch=True)
    message = rf"GradientImportanceCallback: \['attn_grad_other', .*'head_importance'\] cannot be measured: {REFUSAL}"
    with pytest.raises(SetupError, match=message):
        run.trainer.train()
    assert run.trainer.state.global_step == 0 and run.untrained()
    assert run.checks == ([] if at_start else [True])  # found by the start pass, else by the check's own forward


def _per_example_ce(outputs, batch):
    return F.cross_entropy(outputs.logits, batch["labels"], reduction="none")


@pytest.mark.parametrize(
    "callback",
    [
        pytest.param(lambda: GradientImportanceCallback(**_probing(at_start=False), every_n_steps=1), id="no-start"),
        pytest.param(
            lambda: BertWatchCallback(**PROBE, expert=ExpertOptions(word_classes=True)), id="riders-over-two-batches"
        ),
        pytest.param(lambda: GradientImportanceCallback(**PROBE, loss_fn=_per_example_ce), id="loss_fn"),
    ],
)
def test_the_checks_own_forward_runs_before_the_first_optimiser_step_where_the_start_pass_cannot_make_it(
    tmp_path, monkeypatch, callback
) -> None:
    cb = callback()
    run = _Run(tmp_path, cb, monkeypatch)
    run.trainer.train()
    assert run.checks == [True]
    assert any(set(GRADIENT_NAMES) <= set(grids) for _, grids in cb.history)
