"""The names of the run-health signals (the ``run_health`` series), shared by the gradient pass that measures them
(``heads.gradients.health``) and the verdict that reads them (``core.verdict``). Torch-free.

Each signal is one number per probe pass (``docs/statistics.md``, "Run health"):

- ``grad_norm_layer_{l}``: ‖∂L/∂θ_l‖₂, the gradient norm of encoder layer l's parameters, L the probe set's loss
  as the model's own loss weighs it (NaN where the pass cannot take it: ``example_loss``, no layer list found);
- ``prediction_share``: the share of labelled probe examples predicted as the most frequent predicted class
  (single-label sequence classification; NaN otherwise), ``prediction_count`` that many examples, ``predicted``
  the number of examples predicted;
- ``prediction_std``: the standard deviation of the predictions of a regression head (NaN otherwise);
- ``loss_mean``: the probe set's loss, Σ w_b ℓ_b / Σ w_b; ``loss_std``: the standard deviation of the per-example
  losses ℓ_b over the labelled examples; ``loss_examples``: how many labelled examples (w_b > 0) that is;
- ``prior_loss``: the loss of the best constant prediction on the probe labels, the loss a model that ignores its
  input can reach: the entropy of the label frequencies (single-label classification), their variance
  (regression); NaN otherwise.
"""

from __future__ import annotations

__all__ = [
    "GRAD_NORM_PREFIX",
    "HEALTH_SERIES",
    "LOSS_EXAMPLES",
    "LOSS_MEAN",
    "LOSS_STD",
    "PREDICTED",
    "PREDICTION_COUNT",
    "PREDICTION_SHARE",
    "PREDICTION_STD",
    "PRIOR_LOSS",
    "grad_norm_name",
    "layer_of",
]

#: The named-values series the run-health signals are written as.
HEALTH_SERIES = "run_health"
GRAD_NORM_PREFIX = "grad_norm_layer_"
PREDICTION_SHARE = "prediction_share"
PREDICTION_COUNT = "prediction_count"
PREDICTED = "predicted"
PREDICTION_STD = "prediction_std"
LOSS_MEAN = "loss_mean"
LOSS_STD = "loss_std"
LOSS_EXAMPLES = "loss_examples"
PRIOR_LOSS = "prior_loss"


def grad_norm_name(layer: int) -> str:
    """The signal name of layer ``layer``'s gradient norm."""
    return f"{GRAD_NORM_PREFIX}{layer}"


def layer_of(name: str) -> int | None:
    """The layer of a gradient-norm signal's name, None for another signal."""
    if not name.startswith(GRAD_NORM_PREFIX):
        return None
    rest = name[len(GRAD_NORM_PREFIX) :]
    return int(rest) if rest.isdigit() else None
