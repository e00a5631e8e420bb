"""How a head is disabled: the two modes and the one check of a mode's name (torch-free, so every layer can use it)."""

from __future__ import annotations

__all__ = ["MODES", "check_mode"]

#: "uniform": Kovaleva et al.'s uniform attention over the keys a head may see; "zero": Michel et al.'s zeroed context.
MODES: tuple[str, ...] = ("uniform", "zero")


def check_mode(mode: str, name: str = "mode") -> str:
    """``mode`` unchanged when it is one of :data:`MODES`; otherwise a ``ValueError`` that names the setting
    (``name``, e.g. ``"AblationOptions.mode"``) and both modes.

    Example:
        >>> check_mode("zero")
        'zero'
    """
    if mode not in MODES:
        raise ValueError(f"unknown {name} {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
    return mode
