"""Run-health signals of the gradient pass against independent plain implementations: layer gradient norms
against autograd on a float64 copy of the model (whole probe set at once, no length groups, no gates), the
prediction and loss signals against loops over numpy, per example."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from bertwatch.core.health_names import (
    LOSS_EXAMPLES,
    LOSS_MEAN,
    LOSS_STD,
    PREDICTION_SHARE,
    PREDICTION_STD,
    PRIOR_LOSS,
    grad_norm_name,
)
from bertwatch.heads.gradients import length_groups
from bertwatch.heads.gradients.health import HealthAccumulator, encoder_layer_parameters
from bertwatch.heads.gradients.importance import gradient_stats
from bertwatch.heads.roles import TokenRoles
from tests.support.models import tiny_model

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def cheap_groups(monkeypatch):
    """A group costs little, so the first probe batch runs in length groups on CPU."""
    monkeypatch.setattr(length_groups, "FORWARD_COST", 1.0)


def _batch(size: int, lengths: list[int], seed: int, width: int = 14) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (size, width), generator=g)
    mask = torch.zeros(size, width, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def _roles(batch: dict[str, torch.Tensor]) -> TokenRoles:
    real = batch["attention_mask"].bool()
    none = torch.zeros_like(real)
    cls = none.clone()
    cls[:, 0] = True
    return TokenRoles(real=real, cls=cls, sep=none, punct=none, segment=None)


def _probe(regression: bool = False) -> list[dict[str, torch.Tensor]]:
    """Two probe batches of different sizes and lengths (the first splits into length groups on CPU)."""
    first = _batch(6, [14, 13, 3, 4, 14, 2], seed=1)
    second = _batch(3, [5, 9, 7], seed=2, width=9)
    if regression:
        first["labels"], second["labels"] = torch.randn(6), torch.randn(3)
    else:
        first["labels"], second["labels"] = torch.tensor([1, 0, 1, -100, 0, 1]), torch.tensor([0, 0, 1])
    return [first, second]


def _measured(model, batches, **kwargs) -> dict[str, float]:
    health = HealthAccumulator.for_model(model, 3)
    for batch in batches:
        gradient_stats(model, batch, _roles(batch), health=health, **kwargs)
    return health.values()


def _plain_norms(model, batches, per_example) -> np.ndarray:
    """‖∂L/∂θ_l‖ with L = Σ_b w_b ℓ_b / Σ_b w_b over every probe example, each example run alone in float64."""
    plain = copy.deepcopy(model).double().eval()
    total, weight = 0.0, 0.0
    for batch in batches:
        for b in range(batch["input_ids"].shape[0]):
            n = int(batch["attention_mask"][b].sum())
            out = plain(
                input_ids=batch["input_ids"][b : b + 1, :n], attention_mask=batch["attention_mask"][b : b + 1, :n]
            )
            loss, w = per_example(out.logits[0], batch["labels"][b])
            total, weight = total + w * loss, weight + w
    layers = encoder_layer_parameters(plain, 3)
    grads = torch.autograd.grad(total / weight, [p for layer in layers for p in layer])
    norms, start = [], 0
    for layer in layers:
        norms.append(math.sqrt(sum(float((g**2).sum()) for g in grads[start : start + len(layer)])))
        start += len(layer)
    return np.array(norms)


def _cross_entropy(logits, label):
    if int(label) == -100:
        return torch.zeros((), dtype=logits.dtype), 0.0
    return -torch.log_softmax(logits, -1)[int(label)], 1.0


def test_probe_pass_splits_into_length_groups() -> None:
    batch = _probe()[0]
    assert length_groups.groups_for(
        batch, batch["attention_mask"].bool(), "sequence-classification", torch.device("cpu")
    )


def test_layer_gradient_norms_match_autograd_on_a_plain_copy() -> None:
    model = tiny_model("bert")
    batches = _probe()
    got = _measured(model, batches)
    want = _plain_norms(model, batches, _cross_entropy)
    norms = np.array([got[grad_norm_name(l)] for l in range(3)])
    np.testing.assert_allclose(norms, want, rtol=1e-4)
    assert all(p.grad is None for p in model.parameters())


def test_layer_gradient_norms_with_loss_fn_weigh_examples_equally() -> None:
    model = tiny_model("bert")
    batches = [{**b, "labels": b["labels"].clamp_min(0)} for b in _probe()]

    def loss_fn(outputs, batch):
        return torch.nn.functional.cross_entropy(outputs.logits.float(), batch["labels"], reduction="none")

    got = _measured(model, batches, loss_fn=loss_fn)
    want = _plain_norms(model, batches, _cross_entropy)
    np.testing.assert_allclose([got[grad_norm_name(l)] for l in range(3)], want, rtol=1e-4)


def test_regression_gradient_norms_and_prediction_spread() -> None:
    torch.manual_seed(0)
    model = tiny_model("bert")
    model.num_labels = model.config.num_labels = 1
    model.config.problem_type = "regression"
    model.classifier = torch.nn.Linear(32, 1)
    batches = _probe(regression=True)
    got = _measured(model, batches)
    want = _plain_norms(model, batches, lambda out, y: ((out[0] - float(y)) ** 2, 1.0))
    np.testing.assert_allclose([got[grad_norm_name(l)] for l in range(3)], want, rtol=1e-4)
    predictions = []
    for batch in batches:
        for b in range(batch["input_ids"].shape[0]):
            n = int(batch["attention_mask"][b].sum())
            with torch.no_grad():
                out = model(
                    input_ids=batch["input_ids"][b : b + 1, :n], attention_mask=batch["attention_mask"][b : b + 1, :n]
                )
            predictions.append(float(out.logits[0, 0]))
    mean = sum(predictions) / len(predictions)
    std = math.sqrt(sum((p - mean) ** 2 for p in predictions) / len(predictions))
    assert got[PREDICTION_STD] == pytest.approx(std, rel=1e-4)
    assert math.isnan(got[PREDICTION_SHARE])
    targets = [float(y) for batch in batches for y in batch["labels"]]
    mean = sum(targets) / len(targets)
    assert got[PRIOR_LOSS] == pytest.approx(sum((y - mean) ** 2 for y in targets) / len(targets), rel=1e-5)


def test_predictions_and_losses_match_numpy_loops() -> None:
    model = tiny_model("bert", seed=3)
    batches = _probe()
    got = _measured(model, batches)
    classes, losses = [], []
    for batch in batches:
        for b in range(batch["input_ids"].shape[0]):
            label = int(batch["labels"][b])
            if label == -100:
                continue
            n = int(batch["attention_mask"][b].sum())
            with torch.no_grad():
                out = model(
                    input_ids=batch["input_ids"][b : b + 1, :n], attention_mask=batch["attention_mask"][b : b + 1, :n]
                )
            logits = out.logits[0].double().numpy()
            classes.append(int(np.argmax(logits)))
            log_z = np.log(np.sum(np.exp(logits - logits.max()))) + logits.max()
            losses.append(log_z - logits[label])
    counts = {c: classes.count(c) for c in set(classes)}
    assert got[PREDICTION_SHARE] == pytest.approx(max(counts.values()) / len(classes))
    mean = sum(losses) / len(losses)
    assert got[LOSS_MEAN] == pytest.approx(mean, rel=1e-5)
    assert got[LOSS_STD] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in losses) / len(losses)), rel=1e-4)
    assert got[LOSS_EXAMPLES] == len(losses)  # the labelled examples, -100 left out
    assert math.isnan(got[PREDICTION_STD])
    labels = [int(y) for batch in batches for y in batch["labels"] if int(y) != -100]
    shares = [labels.count(c) / len(labels) for c in set(labels)]
    assert got[PRIOR_LOSS] == pytest.approx(-sum(p * math.log(p) for p in shares), rel=1e-6)


def test_example_loss_gives_losses_but_no_gradient_norms() -> None:
    model = tiny_model("bert")
    batch = _probe()[1]

    def example_loss(inputs):
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        return torch.nn.functional.cross_entropy(out.logits, inputs["labels"])

    health = HealthAccumulator.for_model(model, 3)
    gradient_stats(model, batch, _roles(batch), example_loss=example_loss, health=health)
    got = health.values()
    assert math.isnan(got[grad_norm_name(0)]) and math.isnan(got[PREDICTION_SHARE])
    assert math.isfinite(got[LOSS_MEAN])


def test_albert_shares_its_layer_so_has_no_layer_norms() -> None:
    assert encoder_layer_parameters(tiny_model("albert"), 3) is None
    assert len(encoder_layer_parameters(tiny_model("distilbert"), 3)) == 3
