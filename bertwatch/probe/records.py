"""What rides on a probe pass and what it hands back besides the statistics' grids: values, written elsewhere.

A ``Rider`` sees every unit's maps of a pass and returns a ``RiderOutput``: ``{name: [layers, heads]}`` grids and
records (a named-values series point, lines of text, a 2-D map of the heads), then starts over for the next pass.
The probe pass collects them, the callbacks' publisher writes them; the riders themselves (word classes, head
clusters) are the callbacks'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from torch import Tensor

from bertwatch.heads.roles import TokenRoles

__all__ = ["HeadEmbedding", "NamedValues", "Rider", "RiderOutput", "StepText"]


@dataclass(frozen=True)
class NamedValues:
    """A named-values series point: ``values`` under the plugin's ``tag``, described by ``description``."""

    tag: str
    values: Mapping[str, float]
    description: str


@dataclass(frozen=True)
class StepText:
    """Lines of text of one step under the plugin's ``bertwatch/text/{name}``, kept at every step (a tag's
    description is kept from its first write only), with ``content`` (JSON values) in the tag's metadata."""

    name: str
    lines: tuple[str, ...]
    description: str
    content: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HeadEmbedding:
    """A 2-D map of the heads (``coords`` ``[layers * heads, 2]``) logged as the embedding ``name``."""

    name: str
    coords: np.ndarray
    layers: int
    heads: int


@dataclass(frozen=True)
class RiderOutput:
    """What a rider of one probe pass returns: ``{name: [layers, heads]}`` grids and other records.

    ``on_probe_set``: the grids were measured on the probe set (they are written with its length info), not on
    sentences of the rider's own.
    """

    grids: Mapping[str, np.ndarray] = field(default_factory=dict)
    records: tuple[NamedValues | StepText | HeadEmbedding, ...] = ()
    on_probe_set: bool = True


@runtime_checkable
class Rider(Protocol):
    """What rides on probe passes: sees a pass's batches' maps and returns a ``RiderOutput`` at its end."""

    def consume(self, rows: Sequence[int], attn: Tensor, roles: TokenRoles) -> None:
        """See a unit's maps ``[rows, layers, heads, T, T]``, of the probe rows ``rows`` (in that order)."""
        ...

    def finish(self) -> RiderOutput:
        """What the rider found in the pass, as values (nothing is written here); the next pass starts afresh."""
        ...
