"""The option names of earlier versions, and the one function that folds them into their new place.

``probe_seed=1`` is now ``probing=ProbeOptions(seed=1)``: :func:`fold_old_names` moves each flat name of an earlier
version into its nested value, after a ``FutureWarning`` that gives the new spelling at the user's line.
``WatchSettings`` calls it as it is built, so every way in (``WatchSettings(...)``, ``settings.replace(...)``, the
callbacks, ``watch()``) reads an old name there and nowhere else; each says where the user's line is. A retired option (``strict``, ``offload_stats``) is dropped with a warning that says why.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from typing import Any

from bertwatch.core.alerts import AlertSettings
from bertwatch.options.groups import GROUPS, ExpertOptions

__all__ = ["OLD_NAMES", "RENAMED", "fold_old_names", "spelling"]

_GROUP_CLASS = {name: cls for name, cls, _ in GROUPS}

#: The flat names of earlier versions: old name -> its new place ``"group.field"`` (None: no longer an option).
OLD_NAMES: dict[str, str | None] = {
    **{f"probe_{n}": f"probing.{n}" for n in ("seed", "batch_size", "max_length")},
    **{n: f"probing.{n}" for n in ("tokenizer", "data_collator", "reference_model", "cache_reference")},
    **{n: f"probing.{n}" for n in ("compat_length", "at_start", "on_evaluate", "at_end")},
    **{  # outlier_multiple is newer than the flat names
        f"alert_{f.name}": f"alerts.{f.name}" for f in dataclasses.fields(AlertSettings) if f.name != "outlier_multiple"
    },
    "ablation_mode": "ablation.mode",
    "ablation_kwargs": "ablation.kwargs",
    **{f.name: f"expert.{f.name}" for f in dataclasses.fields(ExpertOptions)},
    "strict": None,
    "offload_stats": None,
}
#: Why each retired option (``OLD_NAMES`` None) is ignored.
_RETIRED = {
    "strict": "an error inside bertwatch costs one warning and training goes on",
    "offload_stats": "the statistics run on the training thread, as fast as a worker thread on a CPU and faster "
    "than a side CUDA stream on a GPU (docs/performance.md)",
}


def spelling(group: str, field: str, value: Any = ...) -> str:
    """``probing=ProbeOptions(seed=1)``: how a nested option is written (``...`` for an object's value)."""
    plain = value is None or isinstance(value, (bool, int, float, str, os.PathLike))
    shown = repr(os.fspath(value) if isinstance(value, os.PathLike) else value) if plain else "..."
    return f"{group}={_GROUP_CLASS[group].__name__}({field}={shown})"


#: Each old name's new spelling, for the errors that meet one where it is not taken.
RENAMED: dict[str, str] = {old: spelling(*new.split(".")) for old, new in OLD_NAMES.items() if new}


def fold_old_names(options: Mapping[str, Any], stacklevel: int) -> dict[str, Any]:
    """``options`` (``WatchSettings``' keywords) with each old flat name folded into its nested value (the one in
    ``options``, else the default), after a ``FutureWarning`` that gives the new spelling, raised at ``stacklevel``
    as for ``warnings.warn`` called where this is called (the user's line); a retired option is dropped with its
    warning.

    Raises:
        TypeError / ValueError: the old name's value is refused by its new place's check; the message gives both
            spellings.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     folded = fold_old_names({"probe_seed": 1}, stacklevel=1)
        >>> folded["probing"].seed
        1
        >>> str(caught[0].message)
        'probe_seed= is deprecated: use probing=ProbeOptions(seed=1)'
    """
    options = dict(options)
    for old in [name for name in options if name in OLD_NAMES]:
        value, new = options.pop(old), OLD_NAMES[old]
        if new is None:
            warnings.warn(f"{old}= is deprecated and ignored: {_RETIRED[old]}", FutureWarning, stacklevel + 1)
            continue
        group, field = new.split(".")
        spelled = spelling(group, field, value)
        warnings.warn(f"{old}= is deprecated: use {spelled}", FutureWarning, stacklevel + 1)
        nested = options.get(group, _GROUP_CLASS[group]())
        if not isinstance(nested, _GROUP_CLASS[group]):
            continue  # the nested value's own check names the problem
        try:
            options[group] = dataclasses.replace(nested, **{field: value})
        except (TypeError, ValueError) as err:
            raise type(err)(f"{old}={value!r:.40} (now {spelled}): {err}") from None
    return options
