"""Float64 loops over the context-mixing definitions (Kobayashi et al. 2021's mixing ratio, ALTI per layer and per
head, ALTI's composition, attention rollout), one example alone over its real tokens, from the weights found by each
family's attribute names (not by bertwatch), the hidden states (``output_hidden_states``) and the model's own eager
attention probabilities (``output_attentions``), for tests/heads/mixing/test_mixing_scores.py."""

from __future__ import annotations

import numpy as np

#: family: (encoder attribute, layer list, value, output projection, post-attention LayerNorm), by attribute names.
_PATHS = {
    "distilbert": ("distilbert", "transformer.layer", "attention.v_lin", "attention.out_lin", "sa_layer_norm"),
    "deberta-v2": (
        "deberta",
        "encoder.layer",
        "attention.self.value_proj",
        "attention.output.dense",
        "attention.output.LayerNorm",
    ),
    "mpnet": ("mpnet", "encoder.layer", "attention.attn.v", "attention.attn.o", "attention.LayerNorm"),
    "albert": ("albert", "encoder.albert_layer_groups.0.albert_layers", "attention.value", "attention.dense",
               "attention.LayerNorm"),
}  # fmt: skip


def value_module(model, model_type: str, layer: int):
    """The value projection of one layer, by the family's attribute names (not for ALBERT's shared layer)."""
    encoder, layers, v, _, _ = _paths(model_type)
    return getattr(model, encoder, model).get_submodule(layers)[layer].get_submodule(v)


def _paths(model_type: str) -> tuple[str, str, str, str, str]:
    return _PATHS.get(
        model_type,
        (
            "roberta" if model_type in ("xlm-roberta", "camembert") else model_type,
            "encoder.layer",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
        ),
    )


def block(model, model_type: str, layer: int) -> dict[str, np.ndarray | float]:
    """W_V, b_V, W_O, b_O, γ, β (float64 numpy) and ε of one layer's attention block."""
    encoder, layers, v, o, ln = _paths(model_type)
    stack = getattr(model, encoder, model).get_submodule(layers)
    module = stack[0] if model_type == "albert" else stack[layer]
    as64 = lambda t: t.detach().double().numpy()  # noqa: E731
    value, out, norm = module.get_submodule(v), module.get_submodule(o), module.get_submodule(ln)
    return {
        "w_v": as64(value.weight),
        "b_v": as64(value.bias),
        "w_o": as64(out.weight),
        "b_o": as64(out.bias),
        "gamma": as64(norm.weight),
        "beta": as64(norm.bias),
        "eps": float(norm.eps),
    }


def layer_terms(x, attn, params, heads):
    """For one example's real tokens: x ``[n, d]``, attn ``[H, n, n]`` -> (T ``[n, n, d]``, per-head T ``[H, n, n, d]``,
    y ``[n, d]``, ratio ``[n]``) by loops over i, j, h."""
    n, d = x.shape
    dh = params["w_v"].shape[0] // heads
    value = x @ params["w_v"].T + params["b_v"]
    f = np.zeros((heads, n, d))
    for h in range(heads):
        for j in range(n):
            f[h, j] = value[j, h * dh : (h + 1) * dh] @ params["w_o"][:, h * dh : (h + 1) * dh].T
    t = np.zeros((n, n, d))
    per_head = np.zeros((heads, n, n, d))
    y = np.zeros((n, d))
    ratio = np.zeros(n)
    for i in range(n):
        z = x[i] + params["b_o"] + sum(attn[h, i, j] * f[h, j] for h in range(heads) for j in range(n))
        sigma = np.sqrt(np.mean((z - z.mean()) ** 2) + params["eps"])

        def g(v, sigma=sigma):
            return params["gamma"] * (v - v.mean()) / sigma

        y[i] = g(z) + params["beta"]
        for j in range(n):
            r = sum(attn[h, i, j] * f[h, j] for h in range(heads)) + (x[i] if i == j else 0.0)
            t[i, j] = g(r)
            for h in range(heads):
                per_head[h, i, j] = g(attn[h, i, j] * f[h, j])
        other = g(sum(attn[h, i, j] * f[h, j] for h in range(heads) for j in range(n) if j != i))
        own = g(sum(attn[h, i, i] * f[h, i] for h in range(heads)) + x[i])
        ratio[i] = np.linalg.norm(other) / (np.linalg.norm(other) + np.linalg.norm(own))
    return t, per_head, y, ratio


def alti(t, y):
    """C ``[n, n]`` from T ``[n, n, d]`` and the resultants y ``[n, d]``: L1 proximity, clipped, rows summing to 1.

    Also records in ``SCALES`` the factor by which C amplifies a rounding of its inputs: c_ij is a difference of
    two L1 norms of size ‖y_i‖₁, then divided by Σ_k c_ik, so a float32 C is off by a few roundings of
    ‖y_i‖₁ / Σ_k c_ik (the ``scale`` of tests/support/tolerance.py)."""
    n = t.shape[0]
    c = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            c[i, j] = max(0.0, np.abs(y[i]).sum() - np.abs(y[i] - t[i, j]).sum())
        SCALES.append(np.abs(y[i]).sum() / c[i].sum())
        c[i] /= c[i].sum()
    return c


SCALES: list[float] = []


def alti_scale() -> float:
    """The largest amplification recorded by :func:`alti` since the last call (then cleared)."""
    scale = max(SCALES, default=1.0)
    SCALES.clear()
    return max(1.0, scale)


def rollout(attn_layers):
    """Rollout ``[L, n, n]`` from ``[L, H, n, n]``: (mean_h α + I) row-normalised, later layers on the left."""
    out, previous = [], None
    for attn in attn_layers:
        mixed = attn.mean(0) + np.eye(attn.shape[-1])
        mixed /= mixed.sum(-1, keepdims=True)
        previous = mixed if previous is None else mixed @ previous
        out.append(previous)
    return np.stack(out)


def mass(maps, keys):
    """The mean over rows of the mass on ``keys`` (a list of column indices)."""
    return float(np.mean([sum(maps[i, j] for j in keys) for i in range(maps.shape[0])]))


def example_measures(model, model_type, hidden, attentions, b, real_index, cls, sep):
    """Every measure of example ``b`` alone: {"alti" [L, n, n], "alti_composed", "rollout", "mixing_ratio" [L],
    "cls_mass_alti" [L, H], ...} with cls / sep column indices among the real tokens."""
    layers = len(attentions)
    heads = attentions[0].shape[1]
    out = {k: [] for k in ("alti", "mixing_ratio", "cls_mass_alti", "sep_mass_alti")}
    attn_layers = []
    for l in range(layers):
        x = hidden[l][b].detach().double().numpy()[real_index]
        attn = attentions[l][b].detach().double().numpy()[:, real_index][:, :, real_index]
        attn_layers.append(attn)
        t, per_head, y, ratio = layer_terms(x, attn, block(model, model_type, l), heads)
        out["alti"].append(alti(t, y))
        out["mixing_ratio"].append(ratio.mean())
        head_maps = [alti(per_head[h], per_head[h].sum(1)) for h in range(heads)]
        out["cls_mass_alti"].append([mass(m, cls) for m in head_maps])
        out["sep_mass_alti"].append([mass(m, sep) for m in head_maps])
    out = {k: np.array(v) for k, v in out.items()}
    composed, previous = [], None
    for c in out["alti"]:
        previous = c if previous is None else c @ previous
        composed.append(previous)
    out["alti_composed"] = np.stack(composed)
    out["rollout"] = rollout(attn_layers)
    for measure in ("alti", "rollout"):
        for name, keys in (("cls", cls), ("sep", sep)):
            key = f"{name}_mass_{measure}" + ("_layer" if measure == "alti" else "")
            out[key] = np.array([mass(m, keys) for m in out[measure]])
    return out
