"""Per-head attention statistics of docs/statistics.md: pure tensor functions, maps + token roles in, grids out.

Shapes: `attn` is `[batch, layers, heads, T, T]` (query, key), padded; only the real (non-pad) tokens of each
example count, i.e. every map is cropped to its n real tokens before a statistic is taken. Rows of pad queries
and columns of pad keys may hold any finite values and are ignored. A per-example statistic is
`[batch, layers, heads]` (float32, on the device of `attn`; NaN where undefined, e.g. for an example without
real tokens); `aggregate` turns it into a `[layers, heads]` grid. Logarithms are natural.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from bertwatch.core.rules import PATTERN_CLASSES
from bertwatch.core.stat_names import DRIFT_NAMES, STAT_NAMES
from bertwatch.heads.aggregate import StatsAccumulator, aggregate
from bertwatch.heads.maps.patterns import behaviour_label_lists, pattern_classes
from bertwatch.heads.maps.row_reductions import ENTROPY_SMOOTHING, RowReductions
from bertwatch.heads.roles import TokenRoles

__all__ = [
    "STAT_NAMES",
    "DRIFT_NAMES",
    "compute_stats",
    "aggregate",
    "StatsAccumulator",
    "behaviour_label_lists",
    "pattern_classes",
    "PATTERN_CLASSES",
]


_PASSES: dict[str, tuple[str, ...]] = {
    "cls_mass": ("query",),
    "sep_mass": ("query",),
    "punct_mass": ("query",),
    "sep_to_sep": ("query",),
    "sep_mass_kovaleva": ("query",),
    "self": (),
    "prev": (),
    "next": (),
    "entropy": ("entropy",),
    "cls_entropy": ("query",),
    "intra_segment_mass": ("intra",),
    "drift_cosine": ("cosine",),
    "drift_js": ("js",),
}


class _Stats(RowReductions):
    """The statistics of one batch, finished from the row reductions."""

    def __init__(
        self,
        attn: Tensor,
        roles: TokenRoles,
        reference: Tensor | Sequence[Tensor] | None = None,
        compat_length: int | None = None,
    ) -> None:
        super().__init__(attn, roles, reference)
        self.compat_length = compat_length
        self.num_sep = self.sep.sum(-1).float()
        self.rows: dict[str, Tensor] = {}

    def compute(self, names: Sequence[str]) -> dict[str, Tensor]:
        """`{name: [batch, layers, heads]}` for STAT_NAMES / DRIFT_NAMES entries, after one pass over the maps."""
        unknown = [name for name in names if name not in _PASSES]
        if unknown:
            raise ValueError(f"unknown statistic {unknown[0]!r}; known: {STAT_NAMES + DRIFT_NAMES}")
        if self.ref is None and self.cropped is None and any(name in DRIFT_NAMES for name in names):
            raise ValueError(f"{[n for n in names if n in DRIFT_NAMES]} need a reference attention tensor")
        self.rows = self.reduce_rows({p for name in names for p in _PASSES[name]})
        return {name: getattr(self, "_" + name)() for name in names}

    def per_example(self, value: Tensor) -> Tensor:
        """`[batch]` -> `[batch, 1, 1]` for broadcasting against `[batch, layers, heads]`."""
        return value.view(-1, 1, 1)

    def sum_over_real_queries(self, per_row: Tensor) -> Tensor:
        """Σ_{i real} x[i]: `[B, ..., T]` -> `[B, ...]` (pad rows dropped, even if not finite)."""
        mask = self.real.view(self.real.shape[0], *([1] * (per_row.dim() - 2)), -1)
        return torch.where(mask, per_row, 0.0).sum(-1)

    def mean_over_real_queries(self, per_row: Tensor) -> Tensor:
        """(1/n) Σ_{i real} x[i]: `[B, L, H, T]` -> `[B, L, H]`."""
        return self.sum_over_real_queries(per_row) / self.per_example(self.n)

    def mass_to(self, mask: Tensor) -> Tensor:
        """(1/n) Σ_{i real} Σ_{j in mask} A[i, j]: `[batch, layers, heads]`."""
        column_sums = self.rows["query"][..., 0, :]
        return (column_sums * mask.float()[:, None, None, :]).sum(-1) / self.per_example(self.n)

    def diagonal_mass(self, offset: int) -> Tensor:
        """(1/n) Σ_i A[i, i + offset] over real queries i whose key i + offset is real: `[batch, layers, heads]`."""
        length = self.a.shape[-1]
        if abs(offset) >= length:
            return torch.zeros(self.a.shape[:3], device=self.a.device)
        diag = torch.diagonal(self.a, offset, dim1=-2, dim2=-1).float()
        lo, hi = max(0, -offset), length - max(0, offset)
        valid = self.real[:, lo:hi] & self.real[:, lo + offset : hi + offset]
        return torch.where(valid[:, None, None, :], diag, 0.0).sum(-1) / self.per_example(self.n)

    def _cls_mass(self) -> Tensor:
        return self.mass_to(self.cls)

    def _sep_mass(self) -> Tensor:
        return self.mass_to(self.sep)

    def _punct_mass(self) -> Tensor:
        return self.mass_to(self.punct)

    def _sep_to_sep(self) -> Tensor:
        total = (self.rows["query"][..., 1, :] * self.sep.float()[:, None, None, :]).sum(-1)
        count = self.per_example(self.num_sep)
        return torch.where(count > 0, total / count.clamp_min(1.0), math.nan)

    def _sep_mass_kovaleva(self) -> Tensor:
        column_mass = self.rows["query"][..., 0, :] / self.n.view(-1, 1, 1, 1)
        best = column_mass.masked_fill(~self.sep[:, None, None, :], -math.inf).amax(-1)
        return torch.where(self.per_example(self.num_sep) > 0, best, math.nan)

    def _self(self) -> Tensor:
        return self.diagonal_mass(0)

    def _prev(self) -> Tensor:
        return self.diagonal_mass(-1)

    def _next(self) -> Tensor:
        return self.diagonal_mass(1)

    def _entropy(self) -> Tensor:
        return self.mean_over_real_queries(self.rows["entropy"])

    def _cls_entropy(self) -> Tensor:
        row = self.rows["query"][..., 2, :]
        fill = self.smoothing_fill(ENTROPY_SMOOTHING)
        p = torch.addcmul(fill, row, self.key_mask, value=ENTROPY_SMOOTHING)
        value = -torch.special.xlogy(p, p).sum(-1)
        return torch.where(self.per_example(self.has_cls), value, math.nan)

    def _intra_segment_mass(self) -> Tensor:
        if self.segment is None:
            return torch.full(self.a.shape[:3], math.nan, device=self.a.device)
        big = torch.iinfo(torch.long).max
        lowest = torch.where(self.content, self.segment, big).amin(-1)
        highest = torch.where(self.content, self.segment, -big).amax(-1)
        total = torch.where(self.content[:, None, None, :], self.rows["intra"], 0.0).sum(-1)
        count = self.per_example(self.content.sum(-1).float())
        return torch.where(self.per_example(highest > lowest), total / count.clamp_min(1.0), math.nan)

    def _drift_cosine(self) -> Tensor:
        dot, norm_cur, norm_old = self.sum_over_real_queries(self.rows["cosine"]).unbind(-1)
        if self.compat_length is not None:
            if bool((self.n > self.compat_length).any()):
                raise ValueError(
                    f"compat_length={self.compat_length} is shorter than an example ({int(self.n.max())} real tokens)"
                )
            pad_rows = self.per_example((self.compat_length - self.n) / self.n)
            dot, norm_cur, norm_old = dot + pad_rows, norm_cur + pad_rows, norm_old + pad_rows
        return dot / (norm_cur * norm_old).sqrt()

    def _drift_js(self) -> Tensor:
        return self.mean_over_real_queries(self.rows["js"]).clamp_min(0.0)


def compute_stats(
    attn: Tensor,
    roles: TokenRoles,
    names: Iterable[str] | None = None,
    reference: Tensor | Sequence[Tensor] | None = None,
    *,
    compat_length: int | None = None,
) -> dict[str, Tensor]:
    """Statistics `{name: [batch, layers, heads]}` of `attn` `[batch, layers, heads, T, T]`, in one pass over the maps.

    Each example's values use only its real tokens (`roles`), so they do not depend on its batch or padding.
    Definitions: docs/statistics.md.

    Args:
        attn: attention probabilities `[batch, layers, heads, query, key]`, padded (e.g. `capture(...).attentions`).
        roles: the batch's token roles (`token_roles(input_ids, attention_mask, tokenizer)`): real tokens,
            [CLS], [SEP], punctuation, segments.
        names: statistics to compute (STAT_NAMES, DRIFT_NAMES entries); default STAT_NAMES, plus DRIFT_NAMES when
            `reference` is given.
        reference: the reference model's maps on the same batch, padded like `attn`, or one map per example
            cropped to its real tokens `[layers, heads, n_b, n_b]` (what the drift reference caches; never padded back
            whole).
        compat_length: `drift_cosine` as Kovaleva's notebook computed it: maps padded to N tokens with the pad
            query rows kept. A pad query row of an eager BERT is uniform over the real keys (pad keys are masked,
            pad queries are not), so each of the N − n pad rows is taken as 1/n on every real key for both models.

    Returns:
        `{name: [batch, layers, heads]}` tensors; NaN where a statistic is undefined for an example (e.g.
        `sep_to_sep` without [SEP]).

    Raises:
        ValueError: `attn` not `[batch, layers, heads, T, T]`, roles of another shape, an unknown name, or a
            drift statistic without `reference`.

    Example:
        >>> import torch, transformers
        >>> from bertwatch import compute_stats, token_roles
        >>> words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", "cat", "sat"]
        >>> tokenizer = transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)})
        >>> batch = tokenizer(["the cat sat .", "the cat"], padding=True, return_tensors="pt")
        >>> roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer)
        >>> attn = batch["attention_mask"][:, None, None, None, :].float().expand(2, 3, 4, 6, 6)
        >>> attn = attn / attn.sum(-1, keepdim=True)  # [batch, layers, heads, T, T]: every head uniform on real keys
        >>> stats = compute_stats(attn, roles, ["cls_mass", "entropy"])
        >>> stats["cls_mass"].shape
        torch.Size([2, 3, 4])
        >>> [round(float(x), 4) for x in stats["cls_mass"][:, 0, 0]]  # 1/n: 6 and 4 real tokens
        [0.1667, 0.25]
    """
    if names is None:
        names = STAT_NAMES + (DRIFT_NAMES if reference is not None else ())
    return _Stats(attn, roles, reference, compat_length).compute(list(names))
