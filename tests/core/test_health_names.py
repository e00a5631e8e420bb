"""The names of the run-health signals (``core.health_names``): a layer's gradient-norm name and back, and one
spelling per signal."""

from __future__ import annotations

import pytest

from bertwatch.core import health_names as N

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("layer", [0, 5, 11, 47])
def test_a_layers_gradient_norm_name_gives_the_layer_back(layer: int) -> None:
    name = N.grad_norm_name(layer)
    assert name == f"grad_norm_layer_{layer}"
    assert N.layer_of(name) == layer


@pytest.mark.parametrize(
    "name", ["loss_mean", "prediction_share", "grad_norm_layer_", "grad_norm_layer_x", "grad_norm_layer_-1", "layer_3"]
)
def test_another_signal_has_no_layer(name: str) -> None:
    assert N.layer_of(name) is None


def test_every_signal_has_its_own_name() -> None:
    names = [N.PREDICTION_SHARE, N.PREDICTION_COUNT, N.PREDICTED, N.PREDICTION_STD, N.LOSS_MEAN, N.LOSS_STD]
    names += [N.PRIOR_LOSS, N.GRAD_NORM_PREFIX]
    assert len(set(names)) == len(names) and N.HEALTH_SERIES == "run_health"
    assert all(N.layer_of(n) is None for n in names)
