"""Float64 loops over Kobayashi et al.'s norm-based attention, with each family's value and output projections
found by attribute names (not by bertwatch), for tests/heads/test_norms*.py."""

from __future__ import annotations

import numpy as np

from bertwatch.heads.norms.norm_based import NORM_NAMES


def value_and_output(model, model_type: str, layer: int):
    """(W_V, b_V, W_O) of one layer as float64 numpy, found by the family's attribute names (not by bertwatch)."""
    if model_type == "distilbert":
        att = model.distilbert.transformer.layer[layer].attention
        v, o = att.v_lin, att.out_lin
    elif model_type == "deberta-v2":
        att = model.deberta.encoder.layer[layer].attention
        v, o = att.self.value_proj, att.output.dense
    elif model_type == "mpnet":
        att = model.mpnet.encoder.layer[layer].attention.attn
        v, o = att.v, att.o
    else:
        att = getattr(model, model_type).encoder.layer[layer].attention
        v, o = att.self.value, att.output.dense
    as64 = lambda t: t.detach().double().numpy()  # noqa: E731
    return as64(v.weight), as64(v.bias), as64(o.weight)


def reference(attn, hidden, model, model_type, roles):
    """{name: [batch, layers, heads]} by loops over the definition, float64."""
    batch, layers, heads, length, _ = attn.shape
    out = {name: np.full((batch, layers, heads), np.nan) for name in NORM_NAMES}
    masks = {"cls_mass_norm": roles.cls, "sep_mass_norm": roles.sep, "punct_mass_norm": roles.punct}
    for l in range(layers):
        w_v, b_v, w_o = value_and_output(model, model_type, l)
        d = w_v.shape[0] // heads
        for b in range(batch):
            real = [j for j in range(length) if roles.real[b, j]]
            if not real:
                continue
            x = hidden[l][b].detach().double().numpy()
            value = x @ w_v.T + b_v  # [T, hidden]
            for h in range(heads):
                f = {j: value[j, h * d : (h + 1) * d] @ w_o[:, h * d : (h + 1) * d].T for j in real}
                a = attn[b, l, h].double().numpy()
                sums = {name: 0.0 for name in NORM_NAMES}
                for i in real:
                    total = sum(a[i, j] * np.linalg.norm(f[j]) for j in real)
                    for name, mask in masks.items():
                        sums[name] += sum(a[i, j] * np.linalg.norm(f[j]) for j in real if mask[b, j]) / total
                    sums["norm_ratio"] += np.linalg.norm(sum(a[i, j] * f[j] for j in real)) / total
                for name in NORM_NAMES:
                    out[name][b, l, h] = sums[name] / len(real)
    return out
