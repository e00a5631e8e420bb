"""BERT-style encoder layers that never compute the heads one configuration disables.

The sweep's engine disables heads inside attention, after every head's query, key and value projections and scores
were computed. Evaluating one configuration at a time (each pruning step), :class:`SkippingLayer` stands in for a
layer instead: it projects and attends with the kept heads' rows of Q, K and V and the matching columns of the
output projection only (the gathered slices of :func:`bertwatch.heads.pruned_modeling.shrink`, here without
touching the model), and adds what bertwatch's modes define for the disabled heads without their scores:

* ``zero`` (Michel et al.): nothing; the output projection keeps its bias.
* ``uniform`` (Kovaleva et al.): the mean of the head's value vectors over the keys a query may attend to,
  Σ_j u_ij (x_j W_V + b_V) = (Σ_j u_ij x_j) W_V + (Σ_j u_ij) b_V with u_ij = allowed_ij / n_i. When every query
  row allows the same keys (a padding mask) that is one vector per example, so a disabled head costs one row.

With ``first_token`` (the last layer of a classifier whose head reads the first token only) the layer computes the
first query row alone: the other rows of the last layer reach no output. Outputs equal the masked model's to float
rounding (tests compare them with the masked forward of bertwatch's attention).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from bertwatch.core.modes import check_mode
from bertwatch.heads.stability.logits import allowed_keys

#: Where a BERT-style layer says it cross-attends or decodes: (submodule path, flag).
_DECODER_FLAGS = (
    ("attention", "is_cross_attention"),
    ("", "add_cross_attention"),
    ("", "is_decoder"),
    ("attention.self", "is_decoder"),
)


def supports(layer: nn.Module) -> bool:
    """Whether ``layer`` is a BERT-style self-attention encoder layer :class:`SkippingLayer` reproduces: Q/K/V
    projections in ``attention.self``, ``attention.output`` with dense/dropout/LayerNorm, ``feed_forward_chunk``,
    no cross-attention and no decoder cache."""
    try:
        own, out = layer.get_submodule("attention.self"), layer.get_submodule("attention.output")
        linears = [own.get_submodule(n) for n in ("query", "key", "value")] + [out.get_submodule("dense")]
        norm = out.get_submodule("LayerNorm")
    except AttributeError:  # not laid out as BERT's layer
        return False
    return (
        hasattr(layer, "feed_forward_chunk")
        and all(isinstance(linear, nn.Linear) for linear in linears)
        and hasattr(own, "attention_head_size")
        and hasattr(own, "scaling")
        and isinstance(norm, nn.LayerNorm)
        and hasattr(out, "dropout")
        # BERT's layers carry all four flags; a layer of another family laid out like BERT's may lack them
        and not any(getattr(layer.get_submodule(path), flag, False) for path, flag in _DECODER_FLAGS)
    )


def _rows(heads: list[int], size: int) -> torch.Tensor:
    return torch.tensor([h * size + i for h in heads for i in range(size)], dtype=torch.long)


class SkippingLayer(nn.Module):
    """One BERT-style layer with the heads where ``disabled`` (bool ``[heads]``) is true disabled in ``mode``,
    computed without them; see the module docstring. The weights are gathered once, at construction."""

    def __init__(self, layer: nn.Module, disabled: np.ndarray, mode: str, first_token: bool = False):
        super().__init__()
        own, out = layer.attention.self, layer.attention.output
        self.inner = layer
        self.mode = check_mode(mode)
        self.first_token = first_token
        self.size = int(own.attention_head_size)
        self.scaling = float(own.scaling)
        disabled = np.asarray(disabled, dtype=bool)
        kept = [h for h in range(disabled.size) if not disabled[h]]
        gone = [h for h in range(disabled.size) if disabled[h]]
        self.kept = len(kept)
        keep_rows, gone_rows = _rows(kept, self.size), _rows(gone, self.size)
        with torch.no_grad():
            q, k, v = (own.query, own.key, own.value)
            take = lambda lin: lin.weight.index_select(0, keep_rows.to(lin.weight.device))
            bias = lambda lin: lin.bias.index_select(0, keep_rows.to(lin.bias.device))
            self.q = (take(q), bias(q))
            self.kv = (torch.cat([take(k), take(v)]), torch.cat([bias(k), bias(v)]))
            self.o = out.dense.weight.index_select(1, keep_rows.to(out.dense.weight.device))
            self.o_bias = out.dense.bias
            self.uniform = None
            if self.mode == "uniform" and gone:
                index = gone_rows.to(v.weight.device)
                self.uniform = (
                    v.weight.index_select(0, index),
                    v.bias.index_select(0, index),
                    out.dense.weight.index_select(1, index),
                )

    def _attend(self, x: torch.Tensor, queries: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The kept heads' context ``[B, Tq, kept * size]`` for query rows ``queries`` ``[B, Tq, hidden]`` over the
        keys of ``x`` ``[B, T, hidden]``: bertwatch's eager attention, no intervention."""
        b, t, tq = x.shape[0], x.shape[1], queries.shape[1]
        query = F.linear(queries, *self.q).view(b, tq, self.kept, self.size).transpose(1, 2)
        key, value = F.linear(x, *self.kv).view(b, t, 2 * self.kept, self.size).transpose(1, 2).chunk(2, dim=1)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        if mask is not None:
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores + mask[:, :, :, :t]
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        return torch.matmul(probs, value).transpose(1, 2).reshape(b, tq, self.kept * self.size)

    def _uniform_part(self, x: torch.Tensor, mask: torch.Tensor | None, tq: int) -> torch.Tensor:
        """The disabled heads' uniform contexts through their output columns, ``[B, 1 or Tq, hidden]``."""
        weight, bias, out = self.uniform
        b, t = x.shape[0], x.shape[1]
        if mask is None:
            u = x.new_full((b, 1, t), 1.0 / t)
        else:
            allowed = allowed_keys(mask, x.new_empty((b, 1, mask.shape[-2], t)))[:, 0, :tq]
            if bool((allowed == allowed[:, :1]).all()):
                allowed = allowed[:, :1]
            u = allowed / allowed.sum(-1, keepdim=True).clamp_min(1)
        context = torch.matmul(u, x) @ weight.T + u.sum(-1, keepdim=True) * bias
        return context @ out.T

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args: Any, **kwargs: Any
    ):
        x = hidden_states
        rows = x[:, :1] if self.first_token else x
        mask = attention_mask
        if mask is not None and self.first_token and mask.shape[-2] > 1:
            mask = mask[:, :, :1]
        if self.kept:
            attended = F.linear(self._attend(x, rows, mask), self.o, self.o_bias)
        else:
            attended = self.o_bias.expand(*rows.shape[:-1], -1)
        if self.uniform is not None:
            attended = attended + self._uniform_part(x, mask, rows.shape[1])
        output = self.inner.attention.output
        attended = output.LayerNorm(output.dropout(attended) + rows)
        return self.inner.feed_forward_chunk(attended)
