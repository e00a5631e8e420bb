"""The HTML pieces every section of the report is written with: escaped text, numbers, embedded PNGs, tables."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["b64", "escape", "head_name", "image", "number", "table"]


def b64(png: bytes) -> str:
    """PNG bytes as base64 text for a ``data:`` URL."""
    return base64.b64encode(png).decode("ascii")


def escape(value: Any) -> str:
    """``str(value)`` with ``<``, ``>``, ``&`` and quotes escaped."""
    return html.escape(str(value), quote=True)


def head_name(layer: int, head: int) -> str:
    """How bertwatch writes a head everywhere, numbered from 0.

    Example:
        >>> head_name(2, 7)
        'L2 H7'
    """
    return f"L{int(layer)} H{int(head)}"


def number(value: Any, digits: int = 4) -> str:
    """An integer as is, a float with ``digits`` decimals, "–" for None, NaN and infinities."""
    if value is None:
        return "–"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    if not math.isfinite(value):
        return "–"
    return f"{value:.{digits}f}"


def image(png_b64: str, alt: str, css: str = "") -> str:
    """An ``<img>`` of base64 PNG text (``css``: its class)."""
    klass = f' class="{escape(css)}"' if css else ""
    return f'<img{klass} alt="{escape(alt)}" src="data:image/png;base64,{png_b64}">'


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 0) -> str:
    """A table of escaped cells, the first ``left`` columns aligned left."""
    head = "".join(f'<th class="{"l" if i < left else ""}">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{escape(c)}</td>' for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
