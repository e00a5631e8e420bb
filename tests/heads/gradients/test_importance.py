"""Gradient statistics against one-example-at-a-time gradients and plain loops; no parameter gradients leak."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.heads.capture import capture
from bertwatch.heads.gradients.importance import (
    gradient_stats,
    integrated_gradients,
    normalize_by_layer,
    per_example_loss,
)
from bertwatch.heads.roles import TokenRoles
from tests.support.models import padded_batch, tiny_model


def _batch_and_roles() -> tuple[dict[str, torch.Tensor], TokenRoles]:
    batch = padded_batch(batch=3, length=10)
    real = batch["attention_mask"].bool()
    sep = torch.zeros_like(real)
    punct = torch.zeros_like(real)
    cls = torch.zeros_like(real)
    cls[:, 0] = True
    for b in range(3):
        n = int(real[b].sum())
        sep[b, n - 1] = True
        punct[b, 1] = True
    sep[0, 4] = True
    punct[2, :] = False
    batch["labels"] = torch.tensor([1, 0, 1])
    roles = TokenRoles(real=real, cls=cls, sep=sep, punct=punct, segment=None)
    return batch, roles


def _single_example_grads(model, batch, b):
    """Gate and attention gradients of example b alone, cropped to its real tokens."""
    n = int(batch["attention_mask"][b].sum())
    one = {k: v[b : b + 1, :n] if v.dim() == 2 else v[b : b + 1] for k, v in batch.items()}
    gates = torch.ones(3, 4, requires_grad=True)
    with capture(model, gates=gates, keep_graph=True) as cap:
        out = model(input_ids=one["input_ids"], attention_mask=one["attention_mask"])
        loss = torch.nn.functional.cross_entropy(out.logits, one["labels"])
        grads = torch.autograd.grad(loss, [gates] + [cap.layer(l) for l in range(3)])
    return grads[0].numpy(), np.stack([g[0].numpy() for g in grads[1:]])


@pytest.mark.fast
def test_gradient_stats_match_plain_loops() -> None:
    model = tiny_model("bert")
    batch, roles = _batch_and_roles()
    got = gradient_stats(model, batch, roles)
    for b in range(3):
        gate_grad, map_grad = _single_example_grads(model, batch, b)
        np.testing.assert_allclose(got["head_importance"][b].numpy(), np.abs(gate_grad), rtol=1e-4, atol=1e-7)
        n = int(batch["attention_mask"][b].sum())
        sep = roles.sep[b, :n].numpy()
        punct = roles.punct[b, :n].numpy()
        for layer in range(3):
            for head in range(4):
                for name, keys in (("sep", sep), ("punct", punct), ("other", ~sep & ~punct)):
                    cells = [abs(map_grad[layer, head, i, j]) for i in range(n) for j in range(n) if keys[j]]
                    value = got[f"attn_grad_{name}"][b, layer, head].item()
                    if not cells:
                        assert np.isnan(value)
                    else:
                        assert value == pytest.approx(sum(cells) / len(cells), rel=1e-4, abs=1e-9)


def test_no_parameter_gradients_and_model_unchanged() -> None:
    model = tiny_model("bert").train()
    batch, roles = _batch_and_roles()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    gradient_stats(model, batch, roles)
    integrated_gradients(model, batch, steps=4)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.training and model.config._attn_implementation == "sdpa"


@pytest.mark.fast
def test_integrated_gradients_completeness() -> None:
    model = tiny_model("bert").double()
    batch, _ = _batch_and_roles()
    attributions = integrated_gradients(model, batch, steps=64)
    assert attributions.shape == (3, 3, 4)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    losses = []
    for value in (1.0, 0.0):
        with torch.no_grad(), capture(model, gates=torch.full((3, 4), value, dtype=torch.float64)):
            losses.append(per_example_loss(model(**inputs), batch))
    np.testing.assert_allclose(attributions.sum((1, 2)).numpy(), (losses[0] - losses[1]).numpy(), rtol=2e-3, atol=1e-4)


def test_regression_loss_and_layer_normalisation() -> None:
    class Out:
        logits = torch.tensor([[0.5], [2.0]])

    loss = per_example_loss(Out(), {"labels": torch.tensor([1.0, 1.0])})
    assert loss.tolist() == [0.25, 1.0]
    with pytest.raises(ValueError, match="labels"):
        per_example_loss(Out(), {})
    grid = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(normalize_by_layer(grid), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))
