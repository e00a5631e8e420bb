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
from bertwatch.heads.aggregate import StatsAccumulator, aggregate
from bertwatch.heads.patterns import behaviour_labels, pattern_classes
from bertwatch.heads.roles import TokenRoles

__all__ = [
    "STAT_NAMES",
    "DRIFT_NAMES",
    "compute_stats",
    "aggregate",
    "StatsAccumulator",
    "cls_mass",
    "sep_mass",
    "punct_mass",
    "sep_to_sep",
    "sep_mass_kovaleva",
    "self_mass",
    "prev_mass",
    "next_mass",
    "entropy",
    "cls_entropy",
    "intra_segment_mass",
    "drift_cosine",
    "drift_js",
    "behaviour_labels",
    "pattern_classes",
    "PATTERN_CLASSES",
]

STAT_NAMES: tuple[str, ...] = (
    "cls_mass",
    "sep_mass",
    "punct_mass",
    "sep_to_sep",
    "sep_mass_kovaleva",
    "self",
    "prev",
    "next",
    "entropy",
    "cls_entropy",
    "intra_segment_mass",
)
DRIFT_NAMES: tuple[str, ...] = ("drift_cosine", "drift_js")

ENTROPY_SMOOTHING = 0.9999
JS_SMOOTHING = 0.999


_CPU_BLOCK = 1 << 18
_DEVICE_BLOCK = 1 << 26

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
_SCRATCH = {"query": 0, "entropy": 2, "intra": 1, "cosine": 1, "js": 4}


class _MapSweep:
    """One batch of maps with its roles; every full-size reduction is done in a single blocked sweep.

    The sweep reads `attn` (and the reference) once, in blocks of at most `_CPU_BLOCK` elements on CPU, with
    cache-sized scratch reused across blocks: a fresh full-size temporary costs more in page faults than the
    arithmetic, and a block still in cache is cheap to pass over several times.
    """

    def __init__(
        self,
        attn: Tensor,
        roles: TokenRoles,
        reference: Tensor | Sequence[Tensor] | None = None,
        compat_length: int | None = None,
    ) -> None:
        if attn.dim() != 5 or attn.shape[-1] != attn.shape[-2]:
            raise ValueError(f"attn must be [batch, layers, heads, T, T], got {tuple(attn.shape)}")
        batch, length = attn.shape[0], attn.shape[-1]
        if tuple(roles.real.shape) != (batch, length):
            raise ValueError(f"roles are {tuple(roles.real.shape)}, attention needs ({batch}, {length})")
        self.a = attn if attn.is_floating_point() else attn.float()
        device = self.a.device
        self.ref: Tensor | None = None
        self.cropped: list[Tensor] | None = None
        self.real = roles.real.to(device).bool()
        if isinstance(reference, Tensor):
            if tuple(reference.shape) != tuple(attn.shape):
                raise ValueError(f"reference is {tuple(reference.shape)}, attention is {tuple(attn.shape)}")
            self.ref = reference.to(device)
        elif reference is not None:
            self.cropped = self._check_cropped(list(reference))
        self.compat_length = compat_length
        self.cls = roles.cls.to(device).bool() & self.real
        self.sep = roles.sep.to(device).bool() & self.real
        self.punct = roles.punct.to(device).bool() & self.real
        self.segment = None if roles.segment is None else roles.segment.to(device)
        self.content = self.real & ~self.cls & ~self.sep
        self.realf = self.real.float()
        self.n = self.realf.sum(-1)
        self.has_cls = self.cls.any(-1)
        self.num_sep = self.sep.sum(-1).float()
        self.key_mask = self.realf[:, None, None, :]
        self.rows: dict[str, Tensor] = {}
        self.context: dict[str, Tensor] = {}
        self.shape = tuple(attn.shape)

    def _check_cropped(self, maps: list[Tensor]) -> list[Tensor]:
        """Per-example reference maps cropped to the real tokens, ``[L, H, n_b, n_b]``, as ``[L·H, n_b, n_b]``."""
        if len(maps) != self.a.shape[0]:
            raise ValueError(f"reference has {len(maps)} cropped examples, attention has {self.a.shape[0]}")
        out = []
        for b, m in enumerate(maps):
            n = int(self.real[b].sum())
            if tuple(m.shape) != (*self.a.shape[1:3], n, n):
                raise ValueError(f"cropped reference {b} is {tuple(m.shape)}, its example has {n} real tokens")
            out.append(m.to(self.a.device).reshape(-1, n, n))
        self.positions = [r.nonzero().squeeze(-1) for r in self.real]
        self.prefix = [bool(self.real[b, : len(p)].all()) for b, p in enumerate(self.positions)]
        return out

    def reference_block(self, rows: slice, cols: slice, like: Tensor, scratch: Tensor) -> Tensor:
        """The reference's maps of a block with its pad keys zeroed, float32, shaped like ``like`` ``[b, c, T, T]``,
        in ``scratch``. A cropped reference is copied in example by example (pad query rows keep older finite
        values, which every statistic ignores), so the padded reference is never built whole."""
        block = scratch[: like.numel()].view(like.shape)
        if self.ref is not None:
            ref = self.ref.reshape(*self.ref.shape[:1], -1, *self.ref.shape[-2:])[rows, cols]
            return torch.mul(ref, self.key_mask[rows], out=block)
        for k, b in enumerate(range(rows.start, rows.start + like.shape[0])):
            maps, idx = self.cropped[b][cols], self.positions[b]
            n = len(idx)
            if self.prefix[b]:
                block[k, :, :n, :n].copy_(maps)
                block[k, :, :, n:].zero_()
            else:
                block[k, :, idx[:, None], idx[None, :]] = maps.to(block.dtype)
                block[k].masked_fill_(~self.real[b], 0.0)
        return block

    def compute(self, names: Sequence[str]) -> dict[str, Tensor]:
        """`{name: [batch, layers, heads]}` for STAT_NAMES / DRIFT_NAMES entries, after one sweep."""
        unknown = [name for name in names if name not in _PASSES]
        if unknown:
            raise ValueError(f"unknown statistic {unknown[0]!r}; known: {STAT_NAMES + DRIFT_NAMES}")
        if self.ref is None and self.cropped is None and any(name in DRIFT_NAMES for name in names):
            raise ValueError(f"{[n for n in names if n in DRIFT_NAMES]} need a reference attention tensor")
        self.rows = self.sweep({p for name in names for p in _PASSES[name]})
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

    def smoothing_fill(self, smoothing: float) -> Tensor:
        """(1−s)/n on real keys and 1 on pad keys (ln 1 = 0 drops them): `[B, 1, 1, T]`."""
        return ((1.0 - smoothing) / self.n).view(-1, 1, 1, 1) * self.key_mask + (1.0 - self.key_mask)

    def sweep(self, passes: set[str]) -> dict[str, Tensor]:
        """Per-row results of each pass (`[B, L, H, T]`; `[B, L, H, 3, T]` for "query" and "cosine").

        Each block is read once and converted to float32 there, so half-precision maps are never copied whole.
        """
        if not passes:
            return {}
        a = self.a.reshape(self.a.shape[0], -1, *self.a.shape[-2:])
        batch, maps, length = a.shape[0], a.shape[1], a.shape[-1]
        limit = _CPU_BLOCK if self.a.device.type == "cpu" else _DEVICE_BLOCK
        per_block = max(1, limit // (length * length))
        map_step = -(-maps // -(-maps // per_block))  # maps of one example first, in even blocks: a cropped
        batch_step = min(batch, max(1, per_block // maps))  # reference is then one copy per block
        size = batch_step * map_step * length * length
        scratch = [torch.empty(size, device=self.a.device) for _ in range(max(_SCRATCH[p] for p in passes))]
        wants_reference = bool(passes & {"cosine", "js"})
        ref_scratch = torch.zeros(size, device=self.a.device) if wants_reference else None
        kernels = {
            "query": self._query_rows,
            "entropy": self._entropy_rows,
            "intra": self._intra_rows,
            "cosine": self._cosine_rows,
            "js": self._js_rows,
        }
        shapes = {"query": (3, length), "cosine": (3, length)}
        out = {p: torch.empty(batch, maps, *shapes.get(p, (length,)), device=self.a.device) for p in passes}
        self.context = self._sweep_context(passes)
        self.layout = self._example_layout() if batch_step == 1 and self.a.device.type == "cpu" else None
        for b0 in range(0, batch, batch_step):
            rows = slice(b0, b0 + batch_step)
            for m0 in range(0, maps, map_step):
                cols = slice(m0, m0 + map_step)
                block = a[rows, cols].float()
                old = self.reference_block(rows, cols, block, ref_scratch) if wants_reference else None
                bufs = [buf[: block.numel()].view(block.shape) for buf in scratch]
                for p in passes:
                    kernels[p](rows, block, old, bufs, out[p][rows, cols])
        return {p: value.view(*self.shape[:3], *value.shape[2:]) for p, value in out.items()}

    def _sweep_context(self, passes: set[str]) -> dict[str, Tensor]:
        """Per-example tensors for the kernels: query weights `[B, 1, 3, T]`, smoothing fills `[B, 1, 1, T]`,
        same-segment key masks `[B, 1, T, T]`."""
        context = {"entropy": self.smoothing_fill(ENTROPY_SMOOTHING), "js": self.smoothing_fill(JS_SMOOTHING)}
        if "query" in passes:
            first_cls = torch.nn.functional.one_hot(self.cls.float().argmax(-1), self.a.shape[-1]).float()
            weights = torch.stack([self.realf, self.sep.float(), first_cls * self.has_cls[:, None]], dim=1)
            context["weights"] = weights[:, None]
        if "intra" in passes and self.segment is not None:
            seg, content = self.segment, self.content
            same = content[:, :, None] & content[:, None, :] & (seg[:, :, None] == seg[:, None, :])
            context["same"] = same.float()[:, None]
        return context

    def _example_layout(self) -> list[tuple[int | None, Tensor, int | None, bool]]:
        """Per example (for blocks of one example on CPU): the real-token count when the real tokens are a prefix
        (else None), the [SEP] positions, the first [CLS] position (None without one), and whether no key is pad."""
        length = self.a.shape[-1]
        layout = []
        for b in range(self.a.shape[0]):
            n = int(self.n[b])
            prefix = n if bool(self.real[b, :n].all()) else None
            cls = int(self.cls[b].float().argmax()) if bool(self.has_cls[b]) else None
            layout.append((prefix, self.sep[b].nonzero().squeeze(-1), cls, n == length))
        return layout

    def _query_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Sum over real queries, sum over [SEP] queries, first [CLS] row, of a block `[b, c, T, T]`: `[b, c, 3, T]`.
        For one example whose real tokens are a prefix these are plain row sums and a row copy."""
        prefix = None if self.layout is None else self.layout[rows.start][0]
        if prefix is None:
            dest.copy_(torch.matmul(self.context["weights"][rows], block))
            return
        _, sep, cls, _ = self.layout[rows.start]
        torch.sum(block[:, :, :prefix], -2, out=dest[:, :, 0])
        torch.sum(block.index_select(2, sep), -2, out=dest[:, :, 1])
        if cls is None:
            dest[:, :, 2].zero_()
        else:
            dest[:, :, 2].copy_(block[:, :, cls])

    def full_keys(self, rows: slice) -> bool:
        """Whether the block is one example without pad keys (its key mask is all ones and can be skipped)."""
        return self.layout is not None and self.layout[rows.start][3]

    def _entropy_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """−Σ_{j real} A' ln A', A' = 0.9999·A + 0.0001/n: `[b, c, T]`."""
        fill = self.context["entropy"][rows]
        p = torch.addcmul(fill, block, self.key_mask[rows], value=ENTROPY_SMOOTHING, out=bufs[0])
        torch.sum(torch.log(p, out=bufs[1]).mul_(p), -1, out=dest).neg_()

    def _intra_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Σ_j A[i, j] over non-special keys of the query's own segment: `[b, c, T]`."""
        if "same" not in self.context:
            dest.zero_()
            return
        torch.sum(torch.mul(block, self.context["same"][rows], out=bufs[0]), -1, out=dest)

    def _cosine_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Σ_{j real} A·R, A·A and R·R per row (``old``: pad keys already zeroed): `[b, c, 3, T]`."""
        masked = block if self.full_keys(rows) else torch.mul(block, self.key_mask[rows], out=bufs[0])
        torch.linalg.vector_norm(masked, dim=-1, out=dest[..., 1, :]).square_()
        torch.linalg.vector_norm(old, dim=-1, out=dest[..., 2, :]).square_()
        torch.sum(torch.mul(masked, old, out=bufs[0]), -1, out=dest[..., 0, :])

    def _js_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """JS(A'[i], R'[i]) = ½ Σ_j P ln(P/M) + Q ln(Q/M), M = (P + Q)/2, over real keys: `[b, c, T]`."""
        keys, fill = self.key_mask[rows], self.context["js"][rows]
        p = torch.addcmul(fill, block, keys, value=JS_SMOOTHING, out=bufs[0])
        q = torch.add(fill, old, alpha=JS_SMOOTHING, out=bufs[1])
        m = torch.lerp(p, q, 0.5, out=bufs[2])
        terms = torch.div(p, m, out=bufs[3]).log_().mul_(p)
        terms.addcmul_(torch.div(q, m, out=bufs[0]).log_(), q)
        torch.sum(terms, -1, out=dest).mul_(0.5)

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
    """Statistics `{name: [batch, layers, heads]}` of `attn` `[batch, layers, heads, T, T]`, in one sweep.

    `names` defaults to STAT_NAMES, plus DRIFT_NAMES when `reference` (the reference model's maps on the
    same batch) is given: padded like `attn`, or as one map per example cropped to its real tokens
    `[layers, heads, n_b, n_b]` (what the monitor caches; never padded back whole). `compat_length` goes to
    `drift_cosine`.
    """
    if names is None:
        names = STAT_NAMES + (DRIFT_NAMES if reference is not None else ())
    return _MapSweep(attn, roles, reference, compat_length).compute(list(names))


def cls_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """(1/n) Σ_i A[i, CLS], Clark Fig 2: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["cls_mass"])["cls_mass"]


def sep_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """(1/n) Σ_i Σ_{j∈SEP} A[i, j], summed over all [SEP]s, Clark Fig 2: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["sep_mass"])["sep_mass"]


def punct_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """(1/n) Σ_i Σ_{j∈{".", ","}} A[i, j], Clark Fig 2: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["punct_mass"])["punct_mass"]


def sep_to_sep(attn: Tensor, roles: TokenRoles) -> Tensor:
    """(1/#SEP) Σ_{i∈SEP} Σ_{j∈SEP} A[i, j], NaN without [SEP]: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["sep_to_sep"])["sep_to_sep"]


def sep_mass_kovaleva(attn: Tensor, roles: TokenRoles) -> Tensor:
    """max over [SEP] positions j of (1/n) Σ_i A[i, j], Kovaleva Fig 6, NaN without [SEP]: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["sep_mass_kovaleva"])["sep_mass_kovaleva"]


def self_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """Statistic "self": (1/n) Σ_i A[i, i]: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["self"])["self"]


def prev_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """Statistic "prev": (1/n) Σ_i A[i, i−1], attention to the previous token: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["prev"])["prev"]


def next_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """Statistic "next": (1/n) Σ_i A[i, i+1], attention to the following token: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["next"])["next"]


def entropy(attn: Tensor, roles: TokenRoles) -> Tensor:
    """(1/n) Σ_i −Σ_j A' ln A', A' = 0.9999·A + 0.0001/n (nats), Clark Fig 4: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["entropy"])["entropy"]


def cls_entropy(attn: Tensor, roles: TokenRoles) -> Tensor:
    """Smoothed entropy of the (first) [CLS] query row, NaN without [CLS]: `[batch, layers, heads]`."""
    return compute_stats(attn, roles, ["cls_entropy"])["cls_entropy"]


def intra_segment_mass(attn: Tensor, roles: TokenRoles) -> Tensor:
    """Mean over non-special real queries of their mass on non-special keys of their own segment.

    The "block" evidence of Kovaleva's classes; NaN unless the example has two or more segments among its
    non-special tokens (or when `roles.segment` is None): `[batch, layers, heads]`.
    """
    return compute_stats(attn, roles, ["intra_segment_mass"])["intra_segment_mass"]


def drift_cosine(attn: Tensor, ref: Tensor, roles: TokenRoles, compat_length: int | None = None) -> Tensor:
    """Cosine similarity of each head's flattened cropped map with the reference's (1 = unchanged): `[B, L, H]`.

    `compat_length=N` reproduces Kovaleva's notebook: maps padded to N with the pad query rows kept. A pad
    query row of an eager BERT is uniform over the real keys (pad keys are masked, pad queries are not), so
    each of the N − n pad rows is taken as 1/n on every real key for both models, whatever `attn` holds there.
    """
    return compute_stats(attn, roles, ["drift_cosine"], ref, compat_length=compat_length)["drift_cosine"]


def drift_js(attn: Tensor, ref: Tensor, roles: TokenRoles) -> Tensor:
    """(1/n) Σ_i JS(A'[i], R'[i]) with A' = 0.999·A + 0.001/n (nats), per head against the reference: `[B, L, H]`."""
    return compute_stats(attn, roles, ["drift_js"], ref)["drift_js"]
