"""The probe pass's units of work: rows of one probe batch run together, cut to their longest row.

Planned once per run (the probe set never changes), on the host, from the probe set's token roles on the CPU;
their inputs and roles are put on the model's device then, so that a pass copies nothing from the host. A unit
holds at most ``UNIT_MAPS_BYTES`` of float32 maps (``rows × layers × heads × width²``), so the pass's memory is
bounded by one unit whatever the length of the probe texts and their labels (a row longer than that bound is a
unit alone). On the CPU a batch's rows are grouped by length first (``heads.gradients.length_groups``: a forward there
costs about its padded tokens); elsewhere they are sorted by length and split only by the memory bound. The model's loss
refuses a unit of unlabelled rows, so such a unit takes a labelled row from a unit with two or more, within the
bound (``_anchored``). Cutting a unit to its longest row
is exact where ``length_groups.widths`` says so (each row's real tokens first, nothing labelled past them);
otherwise a unit keeps the batch's width, and a multiple-choice batch (whose rows are choices) stays whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from bertwatch.heads.gradients.length_groups import FORWARD_COST, crop_rows, labelled_rows, plan_groups, splits, widths
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.task_heads import head_kind
from bertwatch.probe.probe_set import ProbeSet

__all__ = ["UNIT_MAPS_BYTES", "ProbeUnit", "plan_batch", "plan_units"]

#: The most float32 map bytes (rows × layers × heads × width² × 4) one unit of the probe pass holds.
UNIT_MAPS_BYTES = 512 * 2**20


@dataclass(frozen=True, eq=False)
class ProbeUnit:
    """Rows of probe batch ``batch`` that the pass runs together.

    ``rows``: their probe rows (indices over the whole probe set; encoder rows, so choices for multiple choice),
    in the unit's order; ``inputs``: the collated rows cut to ``width`` tokens, label fields included, on the
    device; ``roles``: their token roles ``[rows, width]`` on the device; ``lengths``: each row's real-token count;
    ``positions``: each row's real positions on the device where they are not its first ``length`` positions
    (None where they are: a row is then cut by slicing).
    """

    batch: int
    rows: tuple[int, ...]
    inputs: dict[str, Tensor]
    roles: TokenRoles
    lengths: tuple[int, ...]
    positions: tuple[Tensor | None, ...]

    @property
    def width(self) -> int:
        return int(self.roles.real.shape[-1])

    def crop(self, maps: Tensor) -> list[Tensor]:
        """Each row's maps ``[rows, ..., width, width]`` cut to its real tokens, ``[..., n, n]`` per row (views
        where the real tokens come first), read from nothing on the host."""
        out = []
        for k, (n, where) in enumerate(zip(self.lengths, self.positions, strict=True)):
            row = maps[k]
            out.append(row[..., :n, :n] if where is None else row.index_select(-2, where).index_select(-1, where))
        return out

    def select(self, keep: Sequence[int]) -> ProbeUnit:
        """The unit of its rows at places ``keep`` (a multiple-choice unit is left whole), cut to their longest row
        where its rows' real tokens come first; on the device, by slices (no index copied from the host)."""
        ids = self.inputs["input_ids"]
        keep = list(keep)
        if keep == list(range(len(self.rows))) or ids.dim() != 2:
            return self
        width = max((self.lengths[k] for k in keep), default=1)
        if any(self.positions[k] is not None for k in keep):
            width = self.width
        size = int(ids.shape[0])

        def take(value: Tensor) -> Tensor:
            if not isinstance(value, Tensor) or value.dim() == 0 or value.shape[0] != size:
                return value
            picked = torch.cat([value[k : k + 1] for k in keep])
            return picked[:, :width] if value.dim() >= 2 and value.shape[1] == self.width else picked

        roles = TokenRoles(*(None if r is None else take(r) for r in _fields(self.roles)))
        return ProbeUnit(self.batch, tuple(self.rows[k] for k in keep), {key: take(v) for key, v in
                         self.inputs.items()}, roles, tuple(self.lengths[k] for k in keep),
                         tuple(self.positions[k] for k in keep))  # fmt: skip


def _fields(roles: TokenRoles) -> tuple[Tensor | None, ...]:
    return roles.real, roles.cls, roles.sep, roles.punct, roles.segment


def plan_units(
    probe: ProbeSet, model: torch.nn.Module, device: torch.device, layers: int, heads: int
) -> tuple[ProbeUnit, ...]:
    """The units of ``probe`` for ``model`` (``layers`` × ``heads``) on ``device`` (module doc), batch by batch."""
    kind = head_kind(model)
    units = []
    for k, batch in enumerate(probe.batches):
        first = probe.first_row(k)
        roles = probe.roles[k]
        for rows, width in plan_batch(batch, roles.real, kind, device, layers * heads):
            units.append(_unit(k, first, batch, roles, rows, width, kind, device))
    return tuple(units)


def plan_batch(
    batch: dict[str, Tensor], real: Tensor, kind: str | None, device: torch.device, maps_per_row: int
) -> list[tuple[list[int], int]]:
    """A probe batch's units as ``(rows of the batch, width)``: length groups (CPU) or rows sorted by length, each
    split so that its maps (``maps_per_row`` maps of ``width²`` a row) stay within ``UNIT_MAPS_BYTES``, a unit of
    unlabelled rows given a labelled row (``_anchored``); the batch whole where a split would not be exact
    (multiple choice). ``real``: the batch's real tokens; ``kind``: the model's head (``task_heads.head_kind``)."""
    ids = batch["input_ids"]
    size, length = int(real.shape[0]), int(real.shape[-1])
    whole = [(list(range(size)), length)]
    if ids.dim() != 2:
        return whole
    lengths = widths(batch, real, kind)
    if lengths is None:
        groups, cut = [list(range(size))], [length] * size
    else:
        split = splits(device) and len(lengths) > 1
        groups = plan_groups(lengths, FORWARD_COST) if split else [sorted(range(size), key=lambda r: lengths[r])]
        cut = lengths
    units = []
    for group in groups:
        units.extend(_bounded(group, cut, maps_per_row))
    labelled = labelled_rows(batch, size)
    if any(not any(labelled[r] for r in rows) for rows, _ in units):
        # the model's loss refuses a unit of unlabelled rows: give it one of the labelled rows, within the bound
        units = _anchored([rows for rows, _ in units], labelled, cut, maps_per_row)
    return units


def _bounded(rows: list[int], lengths: Sequence[int], maps_per_row: int) -> list[tuple[list[int], int]]:
    """``rows`` (shortest first) in consecutive runs whose float32 maps at their longest row's width stay within
    ``UNIT_MAPS_BYTES`` (a row over it alone)."""
    out: list[tuple[list[int], int]] = []
    current: list[int] = []
    for r in rows:
        width = max([lengths[x] for x in current] + [lengths[r]])
        if current and (len(current) + 1) * maps_per_row * width * width * 4 > UNIT_MAPS_BYTES:
            out.append((current, max(lengths[x] for x in current)))
            current = []
        current.append(r)
    if current:
        out.append((current, max(lengths[x] for x in current)))
    return out


def _fits(rows: Sequence[int], lengths: Sequence[int], maps_per_row: int) -> bool:
    """Whether ``rows``' float32 maps at their longest row's width stay within ``UNIT_MAPS_BYTES`` (one row always
    does: a row over the bound is a unit alone)."""
    width = max(lengths[r] for r in rows)
    return len(rows) <= 1 or len(rows) * maps_per_row * width * width * 4 <= UNIT_MAPS_BYTES


def _anchored(
    units: list[list[int]], labelled: Sequence[bool], lengths: Sequence[int], maps_per_row: int
) -> list[tuple[list[int], int]]:
    """``units`` (each within ``UNIT_MAPS_BYTES``) with a labelled row in each where the batch has enough of them,
    every unit still within the bound: a unit without one takes the shortest labelled row of a unit that has two
    or more, and gives back its own longest rows until it fits again; each row given back joins the first unit with
    a labelled row that it fits in, or new units of its own (which take a labelled row in turn). Units are ordered
    by their shortest row, rows shortest first (ties by row).

    A unit is left without a labelled row only where no unit has one to spare (a batch of unlabelled rows, or fewer
    labelled rows than the bound needs units): the bound holds whatever the labels, and the loss check refuses that
    unit as it refused such a batch whole.

    Example (rows of 1, 1, 2, 2 tokens, two rows a unit, rows 2 and 3 labelled): ``[[0, 1], [2, 3]]`` becomes
    ``[[0, 2], [1, 3]]``.
    """
    units = [sorted(rows, key=lambda r: (lengths[r], r)) for rows in units]
    alone: list[list[int]] = []  # units whose shortest row cannot share a unit with any spare labelled row
    while True:
        bare = next((u for u in units if not any(labelled[r] for r in u) and all(u is not a for a in alone)), None)
        spare = [r for rows in units if sum(labelled[x] for x in rows) > 1 for r in rows if labelled[r]]
        if bare is None or not spare:
            break
        row = min(spare, key=lambda r: (lengths[r], r))
        if not _fits([bare[0], row], lengths, maps_per_row):
            alone.append(bare)
            continue
        next(rows for rows in units if row in rows).remove(row)
        bare.append(row)
        bare.sort(key=lambda r: (lengths[r], r))
        spilled: list[int] = []
        while not _fits(bare, lengths, maps_per_row):
            spilled.append([r for r in bare if r != row][-1])
            bare.remove(spilled[-1])
        homeless = [r for r in spilled[::-1] if not _placed(r, units, labelled, lengths, maps_per_row)]
        units.extend(rows for rows, _ in _bounded(homeless, lengths, maps_per_row))
    units.sort(key=lambda rows: (lengths[rows[0]], rows[0]))
    return [(rows, max(lengths[r] for r in rows)) for rows in units]


def _placed(
    row: int, units: list[list[int]], labelled: Sequence[bool], lengths: Sequence[int], maps_per_row: int
) -> bool:
    """Whether ``row`` found a place in the first of ``units`` that holds a labelled row and still fits with it
    (then it is added there, rows kept shortest first)."""
    for rows in units:
        if any(labelled[r] for r in rows) and _fits([*rows, row], lengths, maps_per_row):
            rows.append(row)
            rows.sort(key=lambda r: (lengths[r], r))
            return True
    return False


def _unit(
    k: int,
    first: int,
    batch: dict[str, Tensor],
    roles: TokenRoles,
    rows: list[int],
    width: int,
    kind: str | None,
    device: torch.device,
) -> ProbeUnit:
    """One unit: batch ``k``'s ``rows`` cut to ``width``, on ``device``."""
    ids = batch["input_ids"]
    if ids.dim() != 2:  # multiple choice: the whole batch, its encoder rows the choices
        inputs, unit_roles = dict(batch), roles
        rows = list(range(int(roles.real.shape[0])))
    else:
        index = torch.tensor(rows, dtype=torch.long)
        inputs = crop_rows(batch, index, width, kind)
        unit_roles = TokenRoles(*(None if r is None else r.index_select(0, index)[:, :width] for r in _fields(roles)))
    real = unit_roles.real.bool()
    lengths = [int(n) for n in real.sum(-1)]
    positions = [
        None if bool(real[b, :n].all()) else real[b].nonzero().squeeze(-1).to(device) for b, n in enumerate(lengths)
    ]
    return ProbeUnit(
        batch=k,
        rows=tuple(first + r for r in rows),
        inputs={key: v.to(device) for key, v in inputs.items()},
        roles=unit_roles.to(device),
        lengths=tuple(lengths),
        positions=tuple(positions),
    )
