"""Float64 loops over the stability statistics' definitions, each family's projections found by attribute names
(not by bertwatch), for tests/heads/stability/test_spectral_norms.py.

``logits_alone``: one example alone (unpadded) through a float64 copy of the model; hand-written hooks take the
inputs of each layer's query and key projections (and the relative-position inputs of DeBERTa, MPNet and the rotary
cos/sin of ModernBERT), then every score s_ij = q_i·k_j·c (+ relative terms) is a Python loop over numpy vectors.
``qk_norms``: numpy's SVD of the full d_model × d_model matrix W_Q^h W_K^hᵀ, times the family's scale.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

SEGMENT_FAMILIES = ("bert", "roberta", "electra", "albert", "mobilebert")


def family_of(model) -> str:
    return str(model.config.model_type).replace("_", "-")


def _layers(model, family: str) -> list:
    if family == "distilbert":
        return list(model.transformer.layer)
    if family == "modernbert":
        return list(model.layers)
    if family == "albert":
        return [model.encoder.albert_layer_groups[0].albert_layers[0]] * model.config.num_hidden_layers
    return list(model.encoder.layer)


def projections(model, family: str, layer: int):
    """(W_Q, b_Q, W_K, b_K) of one layer, float64 numpy, ``[heads * d, in]``; the attention module too."""
    att = _layers(model, family)[layer]
    if family == "distilbert":
        module, q, k = att.attention, att.attention.q_lin, att.attention.k_lin
    elif family == "deberta-v2":
        module, q, k = att.attention.self, att.attention.self.query_proj, att.attention.self.key_proj
    elif family == "mpnet":
        module, q, k = att.attention.attn, att.attention.attn.q, att.attention.attn.k
    elif family == "modernbert":
        module = att.attn
        w = att.attn.Wqkv.weight.detach().double().numpy()
        b = att.attn.Wqkv.bias
        b = np.zeros(w.shape[0]) if b is None else b.detach().double().numpy()
        third = w.shape[0] // 3
        return w[:third], b[:third], w[third : 2 * third], b[third : 2 * third], module
    elif family == "albert":
        module, q, k = att.attention, att.attention.query, att.attention.key
    else:
        module, q, k = att.attention.self, att.attention.self.query, att.attention.self.key
    as64 = lambda t: t.detach().double().numpy()  # noqa: E731
    return as64(q.weight), as64(q.bias), as64(k.weight), as64(k.bias), module


def scale_of(model, family: str, d: int) -> float:
    """The factor each family's code multiplies q·k by (read from its modeling file, written out here)."""
    if family == "deberta-v2":
        return 1.0 / math.sqrt(d * (1 + len(model.config.pos_att_type)))
    return 1.0 / math.sqrt(d)


def qk_norms(model) -> np.ndarray:
    """``[layers, heads]``: c·σ_max(W_Q^h W_K^hᵀ) by numpy's SVD of the full product."""
    family, heads = family_of(model), model.config.num_attention_heads
    layers = model.config.num_hidden_layers
    out = np.zeros((layers, heads))
    for l in range(layers):
        w_q, _, w_k, _, _ = projections(model, family, l)
        d = w_q.shape[0] // heads
        for h in range(heads):
            m = w_q[h * d : (h + 1) * d].T @ w_k[h * d : (h + 1) * d]  # [in, in]
            out[l, h] = np.linalg.svd(m, compute_uv=False)[0] * scale_of(model, family, d)
    return out


def _record_inputs(model, family: str):
    """Hooks that keep, per layer in call order, what the scores are computed from."""
    calls: dict[str, list] = {"q": [], "k": [], "module": []}
    handles = []
    seen = set()
    for l in range(model.config.num_hidden_layers):
        module = projections(model, family, l)[-1]
        if id(module) in seen:
            continue
        seen.add(id(module))
        handles.append(
            module.register_forward_pre_hook(lambda m, a, kw: calls["module"].append((a, kw)), with_kwargs=True)
        )
        if family not in ("deberta-v2", "modernbert"):
            q, k = (
                (module.q_lin, module.k_lin)
                if family == "distilbert"
                else (module.q, module.k)
                if family == "mpnet"
                else (module.query, module.key)
            )
            handles.append(q.register_forward_pre_hook(lambda m, a: calls["q"].append(a[0])))
            handles.append(k.register_forward_pre_hook(lambda m, a: calls["k"].append(a[0])))
    return calls, handles


def _np(t) -> np.ndarray:
    return t.detach().double().numpy()


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def logits_alone(model, ids: list[int], segments: list[int] | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """(max_logit, logit_std) ``[layers, heads]`` of one example alone, by loops in float64, and the magnitude of
    what entered them (max over pairs of ‖q_i‖‖k_j‖·c + |relative terms|: the scale of their float32 rounding)."""
    family = family_of(model)
    twin = copy.deepcopy(model).double().eval()
    heads, layers = twin.config.num_attention_heads, twin.config.num_hidden_layers
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    if segments is not None:
        batch["token_type_ids"] = torch.tensor([segments])
    calls, handles = _record_inputs(twin, family)
    try:
        with torch.no_grad():
            twin(**batch)
    finally:
        for handle in handles:
            handle.remove()
    n = len(ids)
    peak, spread, magnitude = np.zeros((layers, heads)), np.zeros((layers, heads)), 0.0
    for l in range(layers):
        w_q, b_q, w_k, b_k, module = projections(twin, family, l)
        d = w_q.shape[0] // heads
        c = scale_of(twin, family, d)
        args, kwargs = calls["module"][l]
        hidden = _np(args[0] if args else kwargs["hidden_states"])[0]
        x_q = hidden if family in ("deberta-v2", "modernbert") else _np(calls["q"][l])[0]
        x_k = hidden if family in ("deberta-v2", "modernbert") else _np(calls["k"][l])[0]
        q_all, k_all = x_q @ w_q.T + b_q, x_k @ w_k.T + b_k  # [n, heads * d]
        allowed = np.ones((n, n), dtype=bool)
        if family == "modernbert":
            cos, sin = (_np(t)[0] for t in kwargs["position_embeddings"])
            if twin.config.layer_types[l] == "sliding_attention":
                window = twin.config.sliding_window
                allowed = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= window
        relative = _relative(twin, family, module, args, kwargs, q_all, k_all, d, c)
        for h in range(heads):
            q, k = q_all[:, h * d : (h + 1) * d], k_all[:, h * d : (h + 1) * d]
            if family == "modernbert":
                q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
            scores = []
            for i in range(n):
                for j in range(n):
                    if allowed[i, j]:
                        scores.append(float(q[i] @ k[j]) * c + relative[h, i, j])
                        bound = np.linalg.norm(q[i]) * np.linalg.norm(k[j]) * c + abs(relative[h, i, j])
                        magnitude = max(magnitude, float(bound))
            values = np.array(scores)
            peak[l, h] = values.max()
            spread[l, h] = math.sqrt(((values - values.mean()) ** 2).mean())
    return peak, spread, magnitude


def _relative(model, family, module, args, kwargs, q_all, k_all, d: int, c: float) -> np.ndarray:
    """``[heads, n, n]``: the relative-position terms of every s_ij: MPNet's bias, DeBERTa's c2p and p2c."""
    heads, n = model.config.num_attention_heads, q_all.shape[0]
    out = np.zeros((heads, n, n))
    if family == "mpnet":
        bias = kwargs.get("position_bias", args[2] if len(args) > 2 else None)
        return out if bias is None else _np(bias)[0]
    if family != "deberta-v2" or not module.relative_attention:
        return out
    assert module.share_att_key, "the tiny DeBERTa shares its attention keys"
    rel = kwargs["relative_pos"]
    rel = _np(rel).reshape(rel.shape[-2], rel.shape[-1]).astype(int)
    span = module.pos_ebd_size
    emb = _np(kwargs["rel_embeddings"])[: 2 * span]
    w_q, b_q, w_k, b_k, _ = projections(model, "deberta-v2", _layer_of(model, module))
    pos_q, pos_k = emb @ w_q.T + b_q, emb @ w_k.T + b_k  # [2 span, heads * d]
    bucket = lambda r: min(max(r + span, 0), 2 * span - 1)  # noqa: E731
    for h in range(heads):
        sl = slice(h * d, (h + 1) * d)
        for i in range(n):
            for j in range(n):
                if "c2p" in module.pos_att_type:
                    out[h, i, j] += float(q_all[i, sl] @ pos_k[bucket(rel[i, j]), sl]) * c
                if "p2c" in module.pos_att_type:
                    out[h, i, j] += float(k_all[j, sl] @ pos_q[bucket(-rel[j, i]), sl]) * c
    return out


def _layer_of(model, module) -> int:
    for l, layer in enumerate(model.encoder.layer):
        if layer.attention.self is module:
            return l
    raise ValueError("module not in the model")
