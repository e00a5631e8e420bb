"""Gradient statistics from the model's own loss, for every task head, against a hand-gated float64 forward of
each example alone; setup-time refusals where no loss can be computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.heads.gradients.importance import gradient_stats
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.task_heads import LossSetupError, fixed_mask, head_kind, label_names, model_loss

LAYERS, HEADS = 2, 4


def _config(**extra) -> T.BertConfig:
    return T.BertConfig(
        vocab_size=60,
        hidden_size=16,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=20,
        max_position_embeddings=32,
        **extra,
    )


def _ids(batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch):
        mask[b, length - 2 * b :] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def _roles(mask: torch.Tensor) -> TokenRoles:
    real = mask.bool()
    sep = torch.zeros_like(real)
    punct = torch.zeros_like(real)
    sep[:, 0] = True
    punct[:, 1] = True
    return TokenRoles(real=real, cls=torch.zeros_like(real), sep=sep, punct=punct)


def _hand_gated_gradient(model, inputs: dict, labels: dict) -> np.ndarray:
    """d(model's loss of one example alone)/d gate, the gate multiplying each head's context by a forward hook
    on the self-attention module (no bertwatch code), float64."""
    gate = torch.ones(LAYERS, HEADS, dtype=torch.float64, requires_grad=True)

    def hook(layer):
        def scale(module, args, output):
            context = output[0]
            shape = context.shape
            gated = context.reshape(*shape[:-1], HEADS, -1) * gate[layer][:, None]
            return (gated.reshape(shape), *output[1:])

        return scale

    encoder = model.base_model.encoder.layer
    handles = [encoder[l].attention.self.register_forward_hook(hook(l)) for l in range(LAYERS)]
    try:
        loss = model(**inputs, **labels).loss
        (grad,) = torch.autograd.grad(loss, gate)
    finally:
        for h in handles:
            h.remove()
    return grad.numpy()


def _check(model, inputs: dict, labels: dict, token_level: bool, crop: bool = True) -> None:
    """head_importance of each example of a padded batch equals the hand-gated gradient of that example alone
    (cropped to its real tokens, unless the head reads pad positions too, as QA's span logits do)."""
    model = model.double().eval()
    mask = inputs["attention_mask"]
    flat_mask = mask.reshape(-1, mask.shape[-1])
    got = gradient_stats(model, {**inputs, **labels}, _roles(flat_mask))
    assert got["head_importance"].shape == (mask.shape[0], LAYERS, HEADS)
    for b in range(mask.shape[0]):
        n = int(mask[b].reshape(-1, mask.shape[-1]).sum(-1).max()) if crop else mask.shape[-1]
        one_inputs = {k: v[b : b + 1, ..., :n] for k, v in inputs.items()}
        one_labels = {k: (v[b : b + 1, ..., :n] if token_level else v[b : b + 1]) for k, v in labels.items()}
        expected = np.abs(_hand_gated_gradient(model, one_inputs, one_labels))
        np.testing.assert_allclose(got["head_importance"][b].numpy(), expected, rtol=1e-6, atol=1e-9)
        assert np.all(np.isfinite(got["attn_grad_other"][b].numpy()))


def test_sequence_classification_single_label() -> None:
    torch.manual_seed(0)
    model = T.BertForSequenceClassification(_config(num_labels=3))
    _check(model, _ids(3, 9, 1), {"labels": torch.tensor([0, 2, 1])}, token_level=False)


def test_sequence_regression() -> None:
    torch.manual_seed(1)
    model = T.BertForSequenceClassification(_config(num_labels=1))
    _check(model, _ids(3, 9, 2), {"labels": torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)}, token_level=False)


def test_multi_label() -> None:
    torch.manual_seed(2)
    model = T.BertForSequenceClassification(_config(num_labels=3, problem_type="multi_label_classification"))
    labels = torch.tensor([[1, 0, 1], [0, 0, 1], [1, 1, 0]], dtype=torch.float64)
    _check(model, _ids(3, 9, 3), {"labels": labels}, token_level=False)


def test_token_classification_ignores_minus_100() -> None:
    torch.manual_seed(3)
    model = T.BertForTokenClassification(_config(num_labels=5))
    inputs = _ids(3, 10, 4)
    labels = torch.randint(0, 5, (3, 10), generator=torch.Generator().manual_seed(0))
    labels = labels.masked_fill(inputs["attention_mask"] == 0, -100)
    labels[:, 0] = -100
    labels[1, 3] = -100  # a sub-word continuation
    _check(model, inputs, {"labels": labels}, token_level=True)


def test_question_answering() -> None:
    torch.manual_seed(4)
    model = T.BertForQuestionAnswering(_config())
    labels = {"start_positions": torch.tensor([2, 1, 0]), "end_positions": torch.tensor([4, 3, 0])}
    _check(model, _ids(3, 9, 5), labels, token_level=False, crop=False)


def test_multiple_choice() -> None:
    torch.manual_seed(5)
    model = T.BertForMultipleChoice(_config())
    inputs = {k: v.reshape(3, 2, 14) for k, v in _ids(6, 14, 6).items()}  # choices padded differently
    _check(model, inputs, {"labels": torch.tensor([1, 0, 1])}, token_level=False)


def test_masked_lm_with_a_fixed_seeded_mask() -> None:
    torch.manual_seed(6)
    model = T.BertForMaskedLM(_config())
    inputs = _ids(3, 10, 7)
    masked, labels = fixed_mask(inputs["input_ids"], inputs["attention_mask"], 4, special_ids=(0,), seed=3)
    again, labels_again = fixed_mask(inputs["input_ids"], inputs["attention_mask"], 4, special_ids=(0,), seed=3)
    assert torch.equal(masked, again) and torch.equal(labels, labels_again)
    assert bool(((labels != -100).sum(-1) >= 1).all())
    assert bool((masked[labels != -100] == 4).all()) and bool((labels[inputs["attention_mask"] == 0] == -100).all())
    _check(model, {**inputs, "input_ids": masked}, {"labels": labels}, token_level=True)


def test_refusals_name_what_to_do() -> None:
    torch.manual_seed(0)
    inputs = _ids(2, 6, 0)
    roles = _roles(inputs["attention_mask"])
    qa = T.BertForQuestionAnswering(_config()).eval()
    with pytest.raises(LossSetupError, match="start_positions and end_positions.*loss_fn"):
        gradient_stats(qa, inputs, roles)
    with pytest.raises(LossSetupError, match="outside the sequence"):
        gradient_stats(
            qa, {**inputs, "start_positions": torch.tensor([1, 9]), "end_positions": torch.tensor([2, 9])}, roles
        )
    bare = T.BertModel(_config()).eval()
    with pytest.raises(LossSetupError, match="no task head"):
        gradient_stats(bare, {**inputs, "labels": torch.tensor([0, 1])}, roles)
    weighted = T.BertForSequenceClassification(_config(num_labels=2)).eval()
    original = weighted.forward

    def custom(*args, labels=None, **kwargs):
        out = original(*args, labels=labels, **kwargs)
        if out.loss is not None:
            out.loss = out.loss * 2
        return out

    weighted.forward = custom
    with pytest.raises(LossSetupError, match="not the sequence-classification loss"):
        gradient_stats(weighted, {**inputs, "labels": torch.tensor([0, 1])}, roles)
    # loss_fn= is the way out, and it is used as given
    got = gradient_stats(
        weighted,
        {**inputs, "labels": torch.tensor([0, 1])},
        roles,
        loss_fn=lambda out, batch: 2 * torch.nn.functional.cross_entropy(out.logits, batch["labels"], reduction="none"),
    )
    assert got["head_importance"].shape == (2, LAYERS, HEADS)
    assert head_kind(bare) is None and head_kind(qa) == "question-answering"


def test_an_example_without_labelled_tokens_is_nan_not_zero() -> None:
    torch.manual_seed(3)
    model = T.BertForTokenClassification(_config(num_labels=3)).eval()
    inputs = _ids(2, 6, 1)
    labels = torch.tensor([[-100, 1, 2, 0, 1, -100], [-100] * 6])
    out = model(**inputs, labels=labels)
    _, scale = model_loss(model, out, {**inputs, "labels": labels})
    assert scale[0].item() == pytest.approx(1.0) and torch.isnan(scale[1])
    got = gradient_stats(model, {**inputs, "labels": labels}, _roles(inputs["attention_mask"]))
    assert torch.isnan(got["head_importance"][1]).all() and torch.isfinite(got["head_importance"][0]).all()


def test_integrated_gradients_of_multiple_choice_share_a_gate_between_choices() -> None:
    """Completeness: an example's attributions sum to its loss with every head on minus its loss with every head
    zeroed (each by a hand-written hook, no bertwatch code), with one gate per head shared by its choices."""
    from bertwatch.heads.gradients.importance import integrated_gradients
    from tests.support.task_cases import zeroed

    torch.manual_seed(5)
    model = T.BertForMultipleChoice(_config()).double().eval()
    inputs = {k: v.reshape(3, 2, 14) for k, v in _ids(6, 14, 6).items()}
    labels = torch.tensor([1, 0, 1])
    got = integrated_gradients(model, {**inputs, "labels": labels}, steps=64)
    assert got.shape == (3, LAYERS, HEADS)

    def losses(mask: np.ndarray) -> np.ndarray:
        with torch.no_grad(), zeroed(model, mask):
            logits = model(**inputs).logits
        return torch.nn.functional.cross_entropy(logits, labels, reduction="none").numpy()

    on, off = losses(np.zeros((LAYERS, HEADS), bool)), losses(np.ones((LAYERS, HEADS), bool))
    np.testing.assert_allclose(got.sum((1, 2)).numpy(), on - off, rtol=1e-4, atol=1e-6)


def test_class_names_by_id_with_the_id_where_a_name_is_missing() -> None:
    assert label_names(_config(id2label={0: "neg", 1: "pos"})) == ("neg", "pos")
    assert label_names(_config()) == ("LABEL_0", "LABEL_1")  # transformers' default names of two classes
    gap = _config()
    gap.id2label = {0: "neg", 2: "pos"}  # two classes, the second named under another id
    assert label_names(gap) == ("neg", "1")
    by_hand = _config()
    by_hand.id2label = {"0": "neg", "1": "pos"}  # ids set as strings, as read from JSON by hand
    assert label_names(by_hand) == ("neg", "pos")
