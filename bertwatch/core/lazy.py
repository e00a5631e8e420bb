"""Public names a package loads on first use, so that importing the package stays cheap (no torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, modules: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` is imported from ``modules[name]`` on first use and kept in
    ``namespace`` (the package's ``globals()``), so later look-ups never come back here.

    Example:
        >>> __getattr__ = lazy_names("pkg", {"dumps": "json"}, {})
        >>> __getattr__("dumps")([1])
        '[1]'
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
