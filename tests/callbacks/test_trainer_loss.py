"""The gradient statistics take the loss the Trainer trains on (issue 21): a ``compute_loss`` override (label
smoothing, focal loss, class weights), ``compute_loss_func`` and ``label_smoothing_factor``, each checked against
a float64 oracle written here (each example alone, its own attention and head gates in hand-written hooks, the
loss written out); refusals before step 0; training bit-identical with the Trainer's loss called at probe steps."""

from __future__ import annotations

import copy
import functools
import logging
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as T

from bertwatch.callbacks import (
    BertWatchCallback,
    BertWatchWarning,
    ExpertOptions,
    GradientImportanceCallback,
    ProbeOptions,
    SetupError,
    watch,
)
from tests.support.models import bert_with_head
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_tokenizer, toy_dataset, training_args

EPS = 0.1
GAMMA = 2.0
CLASS_WEIGHTS = (0.3, 3.0)
IG_STEPS = 3
STATS = ("head_importance", "attn_grad_other", "head_attribution_ig")


# ------------------------------------------------------------------------------------------------ the trainers


class SmoothingTrainer(T.Trainer):
    """Label smoothing written in a ``compute_loss`` override."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits, labels, label_smoothing=EPS)
        return (loss, outputs) if return_outputs else loss


class FocalTrainer(T.Trainer):
    """Focal loss (gamma 2), mean over the batch."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        log_p = F.log_softmax(outputs.logits, dim=-1).gather(1, labels[:, None])[:, 0]
        loss = (-((1 - log_p.exp()) ** GAMMA) * log_p).mean()
        return (loss, outputs) if return_outputs else loss


class ClassWeightTrainer(T.Trainer):
    """Cross-entropy weighted by the example's class, mean over the batch; it also logs, as real overrides do."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        weights = torch.tensor(CLASS_WEIGHTS, device=labels.device)[labels]
        loss = (weights * F.cross_entropy(outputs.logits, labels, reduction="none")).mean()
        self.log({"weighted_loss_calls": 1.0})
        return (loss, outputs) if return_outputs else loss


class InBatchTrainer(T.Trainer):
    """A loss that needs at least two examples in a batch (in-batch negatives): it has no value for one alone."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if inputs["input_ids"].shape[0] < 2:
            raise ValueError("this loss compares an example with the rest of its batch")
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


class LaterFailingTrainer(T.Trainer):
    """A loss that works at setup and at step 0, then fails outside training (a bug in evaluation-only code)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not model.training and self.state.global_step >= 1:
            raise RuntimeError("evaluation-only branch is broken")
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def margin_loss(outputs, labels, num_items_in_batch=None):
    """A ``compute_loss_func``: softplus of the other class's logit minus the label's plus a margin of 1."""
    z = outputs.logits
    right = z.gather(1, labels[:, None])[:, 0]
    wrong = z.gather(1, (1 - labels)[:, None])[:, 0]
    return F.softplus(wrong - right + 1.0).mean()


# ------------------------------------------------------------------------------------------------ the oracle


def _log_softmax(z):
    return z - torch.log(torch.exp(z).sum())


ORACLE_LOSSES = {  # one example's loss from its logits [C] (float64) and label, written out
    "model": lambda z, y: -_log_softmax(z)[y],
    "smoothing": lambda z, y: -(1 - EPS) * _log_softmax(z)[y] - EPS * _log_softmax(z).mean(),
    "focal": lambda z, y: -((1 - torch.exp(_log_softmax(z)[y])) ** GAMMA) * _log_softmax(z)[y],
    "class-weights": lambda z, y: -CLASS_WEIGHTS[y] * _log_softmax(z)[y],
    "margin": lambda z, y: torch.log1p(torch.exp(z[1 - y] - z[y] + 1.0)),
}


class _Heads:
    """Hand-written attention in float64 on every BERT layer (no padding: one example alone), with a gate on
    each head's context; keeps each layer's probabilities ``[heads, T, T]`` for their gradients."""

    def __init__(self, model, gates):
        self.gates, self.maps, self.handles = gates, [], []
        for l, layer in enumerate(model.bert.encoder.layer):
            self.handles.append(layer.attention.self.register_forward_hook(self._hook(l), with_kwargs=True))

    def _hook(self, l):
        def hook(module, args, kwargs, output):
            hidden = args[0] if args else kwargs["hidden_states"]
            t, heads = hidden.shape[1], module.num_attention_heads
            d = hidden.shape[-1] // heads

            def split(x):
                return x[0].reshape(t, heads, d).transpose(0, 1)

            q, k, v = split(module.query(hidden)), split(module.key(hidden)), split(module.value(hidden))
            probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)
            self.maps.append(probs)
            context = (probs @ v) * self.gates[l][:, None, None]
            return context.transpose(0, 1).reshape(1, t, heads * d), probs

        return hook

    def close(self):
        for handle in self.handles:
            handle.remove()


def _oracle_loss(model, example, loss, gates):
    heads = _Heads(model, gates)
    try:
        logits = model(
            input_ids=torch.tensor([example["input_ids"]]), token_type_ids=torch.tensor([example["token_type_ids"]])
        ).logits
    finally:
        heads.close()
    return ORACLE_LOSSES[loss](logits[0], int(example["label"])), heads.maps


def oracle(model, examples, loss, other_ids):
    """``{stat: [layers, heads]}``: the mean over ``examples`` of each one's head importance |∂ℓ/∂gate|, mean
    |∂ℓ/∂A[i, j]| over its queries i and "other" keys j (not [SEP], not punctuation), and integrated gradients of
    its gates from 0 to 1 (Gauss-Legendre, ``IG_STEPS`` nodes), ℓ its ``loss`` alone, in float64."""
    model = copy.deepcopy(model).double().eval()
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    nodes, weights = np.polynomial.legendre.leggauss(IG_STEPS)
    out = {name: [] for name in STATS}
    for example in examples:
        gates = torch.ones(layers, heads, dtype=torch.float64, requires_grad=True)
        value, maps = _oracle_loss(model, example, loss, gates)
        grads = torch.autograd.grad(value, [gates, *maps])
        out["head_importance"].append(grads[0].abs().numpy())
        keys = np.array([t in other_ids for t in example["input_ids"]])
        out["attn_grad_other"].append(np.array([g.abs().numpy()[:, :, keys].mean(axis=(1, 2)) for g in grads[1:]]))
        ig = np.zeros((layers, heads))
        for x, w in zip(nodes, weights):
            point = torch.full((layers, heads), 0.5 * (1 + x), dtype=torch.float64, requires_grad=True)
            value, _ = _oracle_loss(model, example, loss, point)
            ig += 0.5 * w * torch.autograd.grad(value, point)[0].numpy()
        out["head_attribution_ig"].append(ig)
    return {name: np.mean(values, axis=0) for name, values in out.items()}


def assert_matches(measured, expected, name):
    """float32 gradients against the float64 oracle: relative, with an absolute floor of float32 rounding
    (eps × a few hundred operations) on the grid's scale for values near zero."""
    floor = 1e-4 * float(np.abs(expected).max())
    np.testing.assert_allclose(measured, expected, rtol=2e-4, atol=floor, err_msg=name)


# ------------------------------------------------------------------------------------------------ runs


def _setup(out, trainer_cls=T.Trainer, callbacks=None, attach=True, **trainer_kwargs):
    tok = tiny_tokenizer()
    model = bert_with_head(T.BertForSequenceClassification, tok, 2, 4, seed=3, scale=0.25, num_labels=2)
    args_overrides = trainer_kwargs.pop("args_overrides", {})
    trainer = trainer_cls(
        model=model,
        args=training_args(str(out), **{"max_steps": 1, **args_overrides}),
        train_dataset=toy_dataset(tok, 8, 0),
        eval_dataset=toy_dataset(tok, 6, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=callbacks,
        **trainer_kwargs,
    )
    if attach:
        watch(trainer)
    return trainer, tok


def _probe_callback(contained: bool = False, **overrides):
    """The probe callback of these tests; it re-raises its errors unless ``contained``."""
    settings = dict(
        stats=STATS,
        every_n_steps=0,
        probing=ProbeOptions(on_evaluate=False, at_end=False, batch_size=4),
        expert=ExpertOptions(ig_steps=IG_STEPS),
    )
    make = GradientImportanceCallback if contained else functools.partial(strict, GradientImportanceCallback)
    return make(**{**settings, **overrides})


def _measure(tmp_path, loss, trainer_cls=T.Trainer, **trainer_kwargs):
    cb = _probe_callback(loss_fn=trainer_kwargs.pop("loss_fn", None))
    trainer, tok = _setup(tmp_path, trainer_cls, [cb], **trainer_kwargs)
    initial = copy.deepcopy(trainer.model)
    trainer.train()
    step, grids = cb.history[0]
    assert step == 0
    other = {i for t, i in tok.get_vocab().items() if t not in ("[SEP]", ".", ",")}
    expected = oracle(initial, trainer.eval_dataset, loss, other)
    for name in STATS:
        assert_matches(grids[name], expected[name], name)
    return grids, expected


CASES = {
    "compute_loss label smoothing": ("smoothing", SmoothingTrainer, {}),
    "compute_loss focal": ("focal", FocalTrainer, {}),
    "compute_loss class weights": ("class-weights", ClassWeightTrainer, {}),
    "compute_loss_func": ("margin", T.Trainer, {"compute_loss_func": margin_loss}),
    "label_smoothing_factor": ("smoothing", T.Trainer, {"args_overrides": {"label_smoothing_factor": EPS}}),
}


@pytest.mark.fast
@pytest.mark.parametrize("case", list(CASES))
def test_gradient_statistics_take_the_trainers_loss_per_example(tmp_path, case) -> None:
    loss, trainer_cls, kwargs = CASES[case]
    _, expected = _measure(tmp_path, loss, trainer_cls, **dict(kwargs))
    other = {i for t, i in tiny_tokenizer().get_vocab().items() if t not in ("[SEP]", ".", ",")}
    tok = tiny_tokenizer()
    model = bert_with_head(T.BertForSequenceClassification, tok, 2, 4, seed=3, scale=0.25, num_labels=2)
    own = oracle(model, toy_dataset(tok, 6, 1), "model", other)
    difference = np.abs(expected["head_importance"] - own["head_importance"]).max()
    assert difference > 100 * 2e-4 * np.abs(own["head_importance"]).max(), "the case must tell the two losses apart"


@pytest.mark.fast
def test_the_models_own_loss_still_matches_when_the_trainers_is_the_same(tmp_path) -> None:
    _measure(tmp_path, "model")


@pytest.mark.fast
def test_an_explicit_loss_fn_takes_precedence_over_the_trainers_loss(tmp_path) -> None:
    def model_ce(outputs, batch):
        return F.cross_entropy(outputs.logits, batch["labels"], reduction="none")

    _measure(tmp_path, "model", FocalTrainer, loss_fn=model_ce)


@pytest.mark.fast
def test_the_setup_message_says_which_loss(tmp_path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="bertwatch"):
        trainer, _ = _setup(tmp_path / "a", FocalTrainer, [_probe_callback()])
        trainer.train()
    assert "the Trainer's loss (FocalTrainer overrides compute_loss)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bertwatch"):
        trainer, _ = _setup(tmp_path / "b", T.Trainer, [_probe_callback()], attach=False)
        trainer.train()
    assert "BertForSequenceClassification's own loss" in caplog.text
    assert "bertwatch does not know the Trainer" in caplog.text


@pytest.mark.fast
def test_label_smoothing_without_the_trainer_is_refused_before_step_0(tmp_path) -> None:
    trainer, _ = _setup(
        tmp_path, T.Trainer, [_probe_callback()], attach=False, args_overrides={"label_smoothing_factor": EPS}
    )
    with pytest.raises(SetupError, match=r"label_smoothing_factor=0\.1.*bertwatch\.watch\(trainer\).*loss_fn="):
        trainer.train()
    assert trainer.state.global_step == 0


@pytest.mark.fast
def test_a_trainer_loss_without_a_value_for_one_example_is_refused_before_step_0(tmp_path) -> None:
    trainer, _ = _setup(tmp_path / "a", InBatchTrainer, [_probe_callback()])
    with pytest.raises(SetupError, match=r"compute_loss failed on a probe example.*compares an example.*loss_fn="):
        trainer.train()
    assert trainer.state.global_step == 0
    defaults = BertWatchCallback(every_n_steps=0, num_maps=0, probing=ProbeOptions(on_evaluate=False, at_end=False))
    trainer, _ = _setup(tmp_path / "b", InBatchTrainer, [defaults])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert any(issubclass(w.category, BertWatchWarning) and "compute_loss failed" in str(w.message) for w in caught)
    assert "head_importance" not in defaults.latest and "entropy" in defaults.latest


@pytest.mark.fast
def test_a_later_failure_of_the_trainers_loss_is_contained(tmp_path) -> None:
    cb = _probe_callback(every_n_steps=1, contained=True)
    trainer, _ = _setup(tmp_path, LaterFailingTrainer, [cb], args_overrides={"max_steps": 3})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.state.global_step == 3
    assert [s for s, _ in cb.history] == [0]
    stopped = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    assert len(stopped) == 1 and "evaluation-only branch is broken" in str(stopped[0].message)


class LogRecorder(T.TrainerCallback):
    """Every log the Trainer's callbacks receive (what TensorBoard and the other trackers would write), less
    bertwatch's own layer means and timings."""

    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        kept = {k: v for k, v in (logs or {}).items() if not k.startswith("bertwatch") and "runtime" not in k}
        if set(kept) - {"epoch", "step"}:
            self.logs.append({k: v for k, v in kept.items() if "per_second" not in k})


def test_training_is_bit_identical_with_the_trainers_loss_taken_at_probe_steps(tmp_path) -> None:
    def run(out, callbacks):
        recorder = LogRecorder()
        overrides = {"max_steps": 4, "logging_steps": 1, "gradient_accumulation_steps": 2}
        trainer, _ = _setup(
            out, ClassWeightTrainer, [recorder, *callbacks], attach=bool(callbacks), args_overrides=overrides
        )
        trainer.train()
        return trainer, recorder.logs

    plain, plain_logs = run(tmp_path / "a", [])
    cb = _probe_callback(every_n_steps=1)
    watched, watched_logs = run(tmp_path / "b", [cb])
    assert [s for s, _ in cb.history] == [0, 1, 2, 3, 4]
    assert sum("weighted_loss_calls" in log for log in plain_logs) > 0
    assert watched_logs == plain_logs
    assert len(watched.state.log_history) == len(plain.state.log_history)
    pairs = zip(plain.model.state_dict().values(), watched.model.state_dict().values())
    assert all(torch.equal(x, y) for x, y in pairs)
