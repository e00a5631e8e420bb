"""The row reductions behind ``bertwatch.heads.maps.stats``: every per-query-row reduction the statistics need (sums,
logs, drift against a reference), taken in one blocked pass over a batch of maps.

Shapes: ``attn`` ``[batch, layers, heads, T, T]`` (query, key), padded; results are per query row,
``[batch, layers, heads, T]`` (``[batch, layers, heads, 3, T]`` for "query" and "cosine"); pad rows hold finite values
the statistics ignore. The pass reads ``attn`` (and the reference) once, in blocks of at most ``_CPU_BLOCK`` elements
on CPU (``_DEVICE_BLOCK`` elsewhere: its scratch buffers stay within a few hundred MiB on a GPU), with cache-sized
scratch reused across blocks: a fresh full-size temporary costs more in page faults than the arithmetic, and a block
still in cache is cheap to pass over several times. On CPU an example whose real tokens are a prefix is cut to its n
real tokens first, so a short example in a long batch costs (n / T)² of a full one; finding the cut reads the token
roles on the host, which elsewhere (``heads.host.reads_free``) would stall the device, so there examples share
masked blocks and nothing is read back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from bertwatch.heads.host import reads_free
from bertwatch.heads.roles import TokenRoles

__all__ = ["ENTROPY_SMOOTHING", "JS_SMOOTHING", "PASSES", "RowReductions"]

ENTROPY_SMOOTHING = 0.9999
JS_SMOOTHING = 0.999

PASSES = ("query", "entropy", "intra", "cosine", "js")

_CPU_BLOCK = 1 << 19
_DEVICE_BLOCK = 1 << 24
_LN2 = math.log(2.0)
_SCRATCH = {"query": 0, "entropy": 2, "intra": 1, "cosine": 1, "js": 3}


class _Layout(NamedTuple):
    """Where one example's tokens are, for the blocks of one example on CPU."""

    prefix: int | None  # the real-token count when the real tokens are a prefix (the block is then cut to it)
    sep: Tensor  # [SEP] positions
    cls: int | None  # the first [CLS] position
    segments: list[tuple[int, int]] | None  # each segment's run of non-special tokens, when every run is unbroken


class RowReductions:
    """One batch of maps with its token roles (and optionally the reference maps), reduced block by block.

    ``reference``: padded like ``attn``, or one map per example cropped to its real tokens ``[L, H, n_b, n_b]``
    (never padded back whole).
    """

    def __init__(self, attn: Tensor, roles: TokenRoles, reference: Tensor | Sequence[Tensor] | None = None) -> None:
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
        self.cls = roles.cls.to(device).bool() & self.real
        self.sep = roles.sep.to(device).bool() & self.real
        self.punct = roles.punct.to(device).bool() & self.real
        self.segment = None if roles.segment is None else roles.segment.to(device)
        self.content = self.real & ~self.cls & ~self.sep
        self.realf = self.real.float()
        self.n = self.realf.sum(-1)
        self.has_cls = self.cls.any(-1)
        self.key_mask = self.realf[:, None, None, :]
        self.context: dict[str, Tensor] = {}
        self.layout: list[_Layout] | None = None

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

    def smoothing_fill(self, smoothing: float) -> Tensor:
        """(1−s)/n on real keys and 1 on pad keys (ln 1 = 0 drops them): `[B, 1, 1, T]`."""
        return ((1.0 - smoothing) / self.n).view(-1, 1, 1, 1) * self.key_mask + (1.0 - self.key_mask)

    def reduce_rows(self, passes: set[str]) -> dict[str, Tensor]:
        """Per-row results of each pass in ``PASSES``: `[B, L, H, T]` (`[B, L, H, 3, T]` for "query", "cosine").

        Each block is read once and converted to float32 there, so half-precision maps are never copied whole.
        """
        if not passes:
            return {}
        a = self.a.reshape(self.a.shape[0], -1, *self.a.shape[-2:])
        batch, maps, length = a.shape[0], a.shape[1], a.shape[-1]
        plan = self._plan(batch, maps, length)
        size = max(((rows.stop - rows.start) * step * n * n for rows, n, step in plan), default=0)
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
        out = {p: torch.zeros(batch, maps, *shapes.get(p, (length,)), device=self.a.device) for p in passes}
        self.context = self._context_rows(passes)
        order = [(p, kernels[p]) for p in PASSES if p in passes]  # "js" last: it smooths the reference in place
        for rows, n, map_step in plan:
            dests = [(kernel, out[p][rows][..., :n]) for p, kernel in order]
            for m0 in range(0, maps, map_step):
                cols = slice(m0, m0 + map_step)
                block = a[rows, cols, :n, :n].float()
                old = self.reference_block(rows, cols, block, ref_scratch) if wants_reference else None
                bufs = [buf[: block.numel()].view(block.shape) for buf in scratch]
                for kernel, dest in dests:
                    kernel(rows, block, old, bufs, dest[:, cols])
        self._finish_rows(out)
        return {p: value.view(*self.a.shape[:3], *value.shape[2:]) for p, value in out.items()}

    @property
    def _log2(self) -> bool:
        """Whether entropy's logarithm is taken in base 2 by NumPy (on CPU: twice torch's speed there)."""
        return reads_free(self.a.device)

    def _finish_rows(self, out: dict[str, Tensor]) -> None:
        """The factors every block's rows share, applied once to the whole result instead of block by block:
        entropy's −1 (and ln 2 where the logarithm was taken in base 2), JS's ½, the cosine's squared norms."""
        if "entropy" in out:
            out["entropy"].mul_(-_LN2 if self._log2 else -1.0)
        if "js" in out:
            out["js"].mul_(0.5)
        if "cosine" in out:
            out["cosine"][..., 1:, :].square_()

    def _plan(self, batch: int, maps: int, length: int) -> list[tuple[slice, int, int]]:
        """The blocks: (examples, key/query length kept, maps per block). Maps of one example first, in even
        blocks, so a cropped reference is one copy per block; on CPU one example per block, cut to its real
        tokens when they are a prefix (elsewhere several examples a block, masked: no host read)."""
        host = reads_free(self.a.device)
        limit = _CPU_BLOCK if host else _DEVICE_BLOCK

        def map_step(n: int) -> int:
            per_block = max(1, limit // (n * n))
            return -(-maps // -(-maps // per_block))

        if not host:
            step = min(batch, max(1, (limit // (length * length)) // maps))
            return [(slice(b, b + step), length, map_step(length)) for b in range(0, batch, step)]
        self.layout = self._example_layout()
        plan = []
        for b, layout in enumerate(self.layout):
            n = layout.prefix if layout.prefix else length
            plan.append((slice(b, b + 1), n, map_step(n)))
        return plan

    def _context_rows(self, passes: set[str]) -> dict[str, Tensor]:
        """Per-example tensors for the kernels: query weights `[B, 1, 3, T]`, smoothing fills `[B, 1, 1, T]`,
        same-segment key masks `[B, 1, T, T]`."""
        context = {"entropy": self.smoothing_fill(ENTROPY_SMOOTHING), "js": self.smoothing_fill(JS_SMOOTHING)}
        if "query" in passes:
            positions = torch.arange(self.a.shape[-1], device=self.a.device)
            first_cls = (positions == self.cls.float().argmax(-1)[:, None]).float()  # one-hot, nothing read back
            weights = torch.stack([self.realf, self.sep.float(), first_cls * self.has_cls[:, None]], dim=1)
            context["weights"] = weights[:, None]
        if "intra" in passes and self.segment is not None:
            seg, content = self.segment, self.content
            same = content[:, :, None] & content[:, None, :] & (seg[:, :, None] == seg[:, None, :])
            context["same"] = same.float()[:, None]
        return context

    def _example_layout(self) -> list[_Layout]:
        """Where each example's tokens are, so kernels can take slices instead of masks."""
        layout = []
        for b in range(self.a.shape[0]):
            n = int(self.n[b])
            prefix = n if n and bool(self.real[b, :n].all()) else None
            cls = int(self.cls[b].float().argmax()) if bool(self.has_cls[b]) else None
            layout.append(_Layout(prefix, self.sep[b].nonzero().squeeze(-1), cls, self._segment_runs(b)))
        return layout

    def _segment_runs(self, b: int) -> list[tuple[int, int]] | None:
        """The [start, stop) run of each segment's non-special tokens in example b, or None when a run is broken."""
        if self.segment is None:
            return None
        runs = []
        for value in self.segment[b][self.content[b]].unique().tolist():
            where = (self.content[b] & (self.segment[b] == value)).nonzero().squeeze(-1).tolist()
            if where[-1] - where[0] + 1 != len(where):
                return None
            runs.append((where[0], where[-1] + 1))
        return runs

    def cut(self, rows: slice) -> bool:
        """Whether the block is one example cut to its real tokens (no pad key: key masks can be skipped)."""
        return self.layout is not None and self.layout[rows.start].prefix is not None

    def reference_block(self, rows: slice, cols: slice, like: Tensor, scratch: Tensor) -> Tensor:
        """The reference's maps of a block with its pad keys zeroed, float32, shaped like ``like`` ``[b, c, t, t]``,
        in ``scratch``. A cropped reference is copied in example by example (pad query rows keep older finite
        values, which every statistic ignores), so the padded reference is never built whole."""
        block = scratch[: like.numel()].view(like.shape)
        if self.ref is not None:
            ref = self.ref.reshape(*self.ref.shape[:1], -1, *self.ref.shape[-2:])[rows, cols]
            t = like.shape[-1]
            return torch.mul(ref[..., :t, :t], self.key_mask[rows, ..., :t], out=block)
        for k, b in enumerate(range(rows.start, rows.start + like.shape[0])):
            maps, idx = self.cropped[b][cols], self.positions[b]
            if self.cut(rows):
                block[k].copy_(maps)
            elif self.prefix[b]:
                block[k, :, : len(idx), : len(idx)].copy_(maps)
                block[k, :, :, len(idx) :].zero_()
            else:
                block[k, :, idx[:, None], idx[None, :]] = maps.to(block.dtype)
                block[k].masked_fill_(~self.real[b], 0.0)
        return block

    def smoothed(self, rows: slice, block: Tensor, fill: Tensor, smoothing: float, out: Tensor) -> Tensor:
        """s·A + (1−s)/n on real keys and 1 on pad keys (``fill`` from :meth:`smoothing_fill`), in ``out``."""
        fill = fill[..., : block.shape[-1]]
        if self.cut(rows):
            return torch.add(fill, block, alpha=smoothing, out=out)
        return torch.addcmul(fill, block, self.key_mask[rows], value=smoothing, out=out)

    def _query_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Sum over real queries, sum over [SEP] queries, first [CLS] row, of a block `[b, c, t, t]`: `[b, c, 3, t]`.
        For one example cut to its real tokens these are plain row sums and a row copy."""
        if not self.cut(rows):
            dest.copy_(torch.matmul(self.context["weights"][rows], block))
            return
        layout = self.layout[rows.start]
        torch.sum(block, -2, out=dest[:, :, 0])
        torch.sum(block.index_select(2, layout.sep), -2, out=dest[:, :, 1])
        if layout.cls is not None:
            dest[:, :, 2].copy_(block[:, :, layout.cls])

    def _entropy_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Σ_{j real} A' log A', A' = 0.9999·A + 0.0001/n: `[b, c, t]` (the entropy once :meth:`_finish_rows` has
        negated it). On CPU the logarithm is NumPy's float32 log2 on the block's memory (within 2 ulp, twice as fast
        as torch's ln there; ln 2 is applied to the row sums), elsewhere torch's ln."""
        p = self.smoothed(rows, block, self.context["entropy"][rows], ENTROPY_SMOOTHING, bufs[0])
        if self._log2:
            np.log2(p.numpy(), out=bufs[1].numpy())
            torch.sum(bufs[1].mul_(p), -1, out=dest)
            return
        torch.sum(torch.log(p, out=bufs[1]).mul_(p), -1, out=dest)

    def _intra_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Σ_j A[i, j] over non-special keys of the query's own segment: `[b, c, t]` (zero for other queries)."""
        runs = None if self.layout is None else self.layout[rows.start].segments
        if runs is not None or "same" not in self.context:
            for start, stop in runs or ():
                torch.sum(block[:, :, start:stop, start:stop], -1, out=dest[:, :, start:stop])
            return
        same = self.context["same"][rows, ..., : block.shape[-2], : block.shape[-1]]
        torch.sum(torch.mul(block, same, out=bufs[0]), -1, out=dest)

    def _cosine_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """Σ_{j real} A·R, ‖A‖ and ‖R‖ per row (``old``: pad keys already zeroed): `[b, c, 3, t]`; the norms are
        squared once in :meth:`_finish_rows`."""
        masked = block if self.cut(rows) else torch.mul(block, self.key_mask[rows], out=bufs[0])
        torch.linalg.vector_norm(masked, dim=-1, out=dest[..., 1, :])
        torch.linalg.vector_norm(old, dim=-1, out=dest[..., 2, :])
        torch.sum(torch.mul(masked, old, out=bufs[0]), -1, out=dest[..., 0, :])

    def _js_rows(self, rows: slice, block: Tensor, old: Tensor | None, bufs: list[Tensor], dest: Tensor) -> None:
        """2·JS(A'[i], R'[i]) = Σ_j P ln(P/M) + Q ln(Q/M), M = (P + Q)/2, over real keys: `[b, c, t]` (halved in
        :meth:`_finish_rows`).
        With d = (Q − P)/(P + Q) in (−1, 1), P/M = 1 − d and Q/M = 1 + d: one division serves both logarithms,
        taken as log1p(∓d) (faster than ln, and d keeps its digits where P ≈ Q; d = 0 exactly where P = Q)."""
        fill = self.context["js"][rows, ..., : block.shape[-1]]
        p = self.smoothed(rows, block, fill, JS_SMOOTHING, bufs[0])
        q = torch.add(fill, old, alpha=JS_SMOOTHING, out=old)
        d = torch.sub(q, p, out=bufs[1]).div_(torch.add(p, q, out=bufs[2]))
        terms = torch.neg(d, out=bufs[2]).log1p_().mul_(p)
        terms.addcmul_(d.log1p_(), q)
        torch.sum(terms, -1, out=dest)
