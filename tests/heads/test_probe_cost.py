"""What a probe pass costs: the gradient pass's maps, value states, contexts, logit summary and attention blocks are
the no-grad capture forward's, bit for bit, so the monitor takes every statistic of a probe batch (the mixing ratio
and rollout's masses included) from that one forward."""

from __future__ import annotations

import pytest
import torch

from bertwatch.heads.capture import capture
from bertwatch.heads.gradients.importance import gradient_stats
from bertwatch.heads.mixing.mixing_model import record_blocks
from tests.heads.norms.test_norm_based import batch_and_roles
from tests.support.models import tiny_model


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_the_gradient_pass_records_the_states_of_the_plain_forward(model_type) -> None:
    model = tiny_model(model_type)
    batch, roles = batch_and_roles(length=10)
    labelled = {**batch, "labels": torch.tensor([0, 1, 1])}
    stats, maps, values, contexts, logits, blocks = gradient_stats(
        model, labelled, roles, return_states=True, record_blocks=True
    )
    with torch.no_grad(), capture(model, record_values=True, record_logits=True) as cap, record_blocks(model) as own:
        model(**batch)
    assert torch.equal(maps, cap.attentions)
    assert values is not None and torch.equal(values, cap.values)
    assert contexts is not None and torch.equal(contexts, cap.contexts)
    assert not values.requires_grad and not contexts.requires_grad
    assert set(logits) == {"max_logit", "logit_std"}
    assert all(torch.equal(logits[name], cap.logit_summary[name]) for name in logits)
    assert not any(t.requires_grad for t in logits.values())
    assert torch.equal(blocks.residuals, own.residuals) and torch.equal(blocks.mixed, own.mixed)
    assert not blocks.residuals.requires_grad and not blocks.mixed.requires_grad
    plain = gradient_stats(model, labelled, roles)
    assert all(torch.equal(stats[name], plain[name]) for name in plain)
