"""How a monitoring option is declared and checked: its field (default, help, flags, check) and the checks.

Every option of bertwatch (the fields of ``options.settings.WatchSettings``, of its nested values in
``options.groups``, and of ``core.alerts.AlertSettings`` and ``core.verdict.VerdictSettings``) is a dataclass field
made by :func:`option`; its metadata holds the help text, the command-line flags ``bertwatch run`` builds from it
and the check that ``Checked`` runs on it at construction. The declaration lives here, in the lowest layer, so that
the alert and verdict thresholds are declared beside the rules that read them, like every other option. Each check takes the option's name as a user spells it (``"every_n_steps"``,
``"ProbeOptions.batch_size"``) and the value, and returns the value to keep or raises a ``TypeError`` /
``ValueError`` that names the option and says what to pass. Values compare by value (plain data) or by identity
(any other object, such as a tokenizer or a model), since bertwatch cannot tell whether two objects would give the
same probe pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "Check",
    "Checked",
    "Flag",
    "callable_or_none",
    "check_options",
    "check_probe_texts",
    "check_stats",
    "closest",
    "default_of",
    "frozen_value",
    "instance_of",
    "number",
    "option",
    "option_of",
    "path_or_none",
    "sized_dataset",
    "switch",
    "text_or_none",
    "whole",
]

#: A check: ``check(name, value)`` returns the value to keep, or raises an error naming ``name``.
Check = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Flag:
    """One command-line flag of an option: its ``names`` and ``kind``, how a command (``bertwatch run``, ``ablate``,
    ``ship``, ``prune``: ``cli.argv.add_options``) reads it.

    Kinds: ``"int"``, ``"int_or_none"`` (a number or ``none``), ``"float"``, ``"float_or_none"`` (a number; ``0``
    or ``none``: None), ``"str"``, ``"choice"`` (one of ``choices``), ``"true"`` / ``"false"`` (a switch that sets
    the option to True / False), ``"yes_no"`` (``--flag`` sets True, ``--no-flag`` False), ``"names"``
    (comma-separated), ``"lines"`` (a file, one probe text per line, a tab before a second sentence), ``"json"`` (a
    JSON object). ``help`` replaces the option's own help for this flag (a ``"false"`` switch always has its own).
    """

    names: tuple[str, ...]
    kind: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    help: str | None = None


def option(default: Any, help: str, check: Check | None, *flags: Flag, factory: Callable[[], Any] | None = None) -> Any:
    """A settings field: its default, help text, check and flags (none: set from Python only)."""
    metadata = {"help": help, "flags": flags, "check": check}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def option_of(owner: type, name: str, *flags: Flag) -> Any:
    """A settings field that is the option ``name`` of the settings value ``owner`` under another value: the
    default, help and check declared there (declared once), with this value's own ``flags``.

    Example:
        >>> from bertwatch.core.alerts import AlertSettings
        >>> patience = option_of(AlertSettings, "patience")
        >>> patience.default, patience.metadata["flags"]
        (1, ())
    """
    declared = next(f for f in dataclasses.fields(owner) if f.name == name)
    metadata = {**declared.metadata, "flags": flags}
    if declared.default is dataclasses.MISSING:
        return field(default_factory=declared.default_factory, metadata=metadata)
    return field(default=declared.default, metadata=metadata)


def default_of(f: dataclasses.Field) -> Any:
    """A field's default (made by its factory, if it has one)."""
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


class _Same:
    """An object that counts as the same option only when it is the same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return object.__hash__(self.obj)


def frozen_value(value: Any) -> Any:
    """A hashable stand-in for ``value``: plain data and settings values by value, any other object by identity."""
    if value is None or isinstance(value, (str, bytes, numbers.Number)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Checked):
        return (type(value), value.frozen())
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(frozen_value(v) for v in value))
    if isinstance(value, dict):
        try:
            return ("map", frozenset((k, frozen_value(v)) for k, v in value.items()))
        except TypeError:
            return _Same(value)
    if dataclasses.is_dataclass(value):
        try:
            hash(value)
            return value
        except TypeError:
            return _Same(value)
    return _Same(value)


class Checked:
    """A frozen settings value whose fields were made with :func:`option`, built from keywords only: an unknown
    name is refused with the closest (:func:`check_options`), each field's check runs, and two values are equal when
    their fields are (objects by identity). A subclass is a ``@dataclass(frozen=True, eq=False, init=False)``; a
    rule across fields is declared, not coded: ``not_above = (("a", "b"),)`` refuses a value whose ``a`` exceeds its
    ``b`` (so the schema never calls back into the module that declares a value)."""

    #: Pairs ``(low, high)`` of field names: ``low`` must not exceed ``high``.
    not_above: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init__(self, **options: Any) -> None:
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        check_options(options, [f.name for f in fields], type(self).__name__)
        for f in fields:
            object.__setattr__(self, f.name, options[f.name] if f.name in options else default_of(f))
        self.__post_init__()

    def __post_init__(self) -> None:
        owner = type(self).option_prefix()
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, check(owner + f.name, getattr(self, f.name)))
        for low, high in self.not_above:
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"{type(self).__name__}.{low} must not exceed {high}")

    @classmethod
    def option_prefix(cls) -> str:
        """How the errors spell this value's options: ``"ProbeOptions."`` before a field's name."""
        return f"{cls.__name__}."

    def frozen(self) -> tuple:
        """The fields' values as one hashable tuple (``frozen_value``): what equality and the hash compare."""
        return tuple(frozen_value(getattr(self, f.name)) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.frozen() == other.frozen()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.frozen())


def closest(word: str, candidates: Collection[str]) -> str | None:
    """The one of ``candidates`` a misspelt ``word`` most likely meant (``difflib``'s closest match), or None: the
    "did you mean" of every refused name, in Python and on the command line.

    Example:
        >>> closest("every_n_step", ["stats", "every_n_steps"])
        'every_n_steps'
    """
    found = difflib.get_close_matches(word, list(candidates), n=1)
    return found[0] if found else None


def check_options(options: Collection[str], valid: Sequence[str], owner: str = "WatchSettings") -> None:
    """Refuse option names not in ``valid`` with a ``TypeError`` that suggests the closest and lists them all.

    Example:
        >>> check_options(["every_n_step"], ["stats", "every_n_steps"])
        Traceback (most recent call last):
        TypeError: WatchSettings: unknown option 'every_n_step' (did you mean 'every_n_steps'?); valid: ...
    """
    unknown = [name for name in options if name not in valid]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = closest(name, valid)
        parts.append(f"'{name}'" + (f" (did you mean '{close}'?)" if close else ""))
    raise TypeError(
        f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(parts)}; valid: {', '.join(valid)}"
    )


# ------------------------------------------------------------------------------------------------ the checks


def switch(optional: bool = False) -> Check:
    """True or False (numpy's booleans and the numbers 0 and 1 too); also None when ``optional``."""

    def check(name: str, value: Any) -> bool | None:
        if value is None and optional:
            return None
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, numbers.Integral) and value in (0, 1):
            return bool(value)
        allowed = " (or None: automatic)" if optional else ""
        raise TypeError(f"{name} must be True or False{allowed}, not {value!r}")

    return check


def whole(lowest: int | None = None, optional: bool = False, meaning: str = "") -> Check:
    """A whole number (``20.0`` is 20) of at least ``lowest``; also None when ``optional``. ``meaning`` is added
    to the range error (what 0 or None mean)."""

    def check(name: str, value: Any) -> int | None:
        if value is None and optional:
            return None
        is_whole = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not is_whole:
            allowed = " or None" if optional else ""
            raise TypeError(f"{name} must be a whole number{allowed}, not {value!r}")
        if lowest is not None and value < lowest:
            raise ValueError(f"{name} must be >= {lowest}{meaning}, got {value}")
        return int(value)

    return check


def number(
    above: float | None = 0.0,
    *,
    below: float | None = None,
    at_most: float | None = None,
    at_least: float | None = None,
    optional: bool = False,
    meaning: str = "",
) -> Check:
    """A finite number (kept as a float) greater than ``above`` (or at least ``at_least``), and below ``below`` or at
    most ``at_most`` when given; also None when ``optional``. ``meaning`` is added to the range error.

    Example:
        >>> number(0.0, below=1.0)("AlertSettings.sink_fraction", 1.5)
        Traceback (most recent call last):
        ValueError: AlertSettings.sink_fraction must be a number in (0, 1), got 1.5
    """
    low = f"[{at_least:g}" if at_least is not None else "(-inf" if above is None else f"({above:g}"
    if below is not None:
        shown = f"a number in {low}, {below:g})"
    elif at_most is not None:
        shown = f"a number in {low}, {at_most:g}]"
    elif at_least is not None or above is not None:
        shown = f"a finite number >= {at_least:g}" if at_least is not None else f"a finite number > {above:g}"
    else:
        shown = "a finite number"

    def check(name: str, value: Any) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number{' or None' if optional else ''}, not {value!r}")
        real = float(value)
        inside = (below is None or real < below) and (at_most is None or real <= at_most)
        inside = inside and (real >= at_least if at_least is not None else above is None or real > above)
        if not math.isfinite(real) or not inside:
            raise ValueError(f"{name} must be {shown}{meaning}, got {value!r}")
        return real

    return check


def callable_or_none(what: str) -> Check:
    """None or a callable; ``what`` describes the callable the error asks for."""

    def check(name: str, value: Any) -> Any:
        if value is None or callable(value):
            return value
        raise TypeError(f"{name} must be {what} (or None), not {type(value).__name__} {value!r}")

    return check


def text_or_none(name: str, value: Any) -> str | None:
    """None or a non-empty string."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string or None, not {type(value).__name__} {value!r:.60}")
    if not value:
        raise ValueError(f"{name} must not be empty: give a name, or None for the default")
    return value


def path_or_none(name: str, value: Any) -> str | os.PathLike | None:
    """None or a non-empty path (a string or ``os.PathLike``)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (a string or pathlib.Path) or None, not {type(value).__name__}")
    if not os.fspath(value):
        raise ValueError(f"{name} must not be empty: give a folder, or None for the default")
    return value


def instance_of(kind: type, example: str) -> Check:
    """An instance of ``kind``; ``example`` shows one in the error."""

    def check(name: str, value: Any) -> Any:
        if isinstance(value, kind):
            return value
        raise TypeError(f"{name} must be a {kind.__name__}, e.g. {name}={example}, not {type(value).__name__}")

    return check


def sized_dataset(name: str, value: Any) -> Any:
    """None or a dataset: something with a length whose examples are read by index (not a string or a dict)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be one dataset, not a mapping of them (a DatasetDict?): pass one split, "
            f"e.g. {name}=dataset['validation']"
        )
    if isinstance(value, (str, bytes, numbers.Number)) or not (
        hasattr(value, "__len__") and hasattr(value, "__getitem__")
    ):
        raise TypeError(
            f"{name} must be a dataset with a length and examples by index (a datasets.Dataset, a list of "
            f"tokenized examples), not {type(value).__name__} {value!r:.60}"
        )
    return value


def _text_problem(item: Any) -> str | None:
    """Why ``item`` is not a probe text (a string, a (text, text_pair) tuple, a dict with a 'text'), or None."""
    if isinstance(item, str):
        return None
    if isinstance(item, tuple):
        if len(item) in (1, 2) and all(isinstance(t, str) for t in item):
            return None
        return "a tuple must be (text, text_pair), two strings"
    if isinstance(item, list):
        return 'a sentence pair is a tuple (text, text_pair), e.g. ("a premise", "a hypothesis"), not a list'
    if isinstance(item, Mapping):
        if isinstance(item.get("text"), str) and isinstance(item.get("text_pair", ""), str):
            return None
        return "a dict needs a 'text' string (and optionally a 'text_pair' string and a 'label')"
    return "a probe text is a string, a (text, text_pair) tuple or a dict with 'text'"


def check_probe_texts(name: str, value: Any) -> tuple[Any, ...] | None:
    """None or a non-empty list of probe texts, kept as a tuple; a single string (which would be read as a list
    of characters) is refused with what to pass."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f'{name} must be a list of texts, e.g. ["a good film"]; got the string {value!r:.60}')
    if isinstance(value, Mapping) or not isinstance(value, Sequence):
        raise TypeError(
            f'{name} must be a list of texts, e.g. ["a good film", ("a premise", "a hypothesis")], not '
            f"{type(value).__name__}"
        )
    if len(value) == 0:
        raise ValueError(f"{name} must hold at least one text (or be None to probe the evaluation set)")
    for index, item in enumerate(value):
        problem = _text_problem(item)
        if problem is not None:
            raise TypeError(f"{name}[{index}] is {type(item).__name__} {item!r:.60}: {problem}")
    return tuple(value)


def check_stats(valid: Sequence[str]) -> Check:
    """None or a non-empty list of statistic names from ``valid``, kept as a tuple; an unknown name gets the
    closest valid one and the list of them all."""

    def check(name: str, value: Any) -> tuple[str, ...] | None:
        if value is None:
            return None
        if isinstance(value, (str, bytes)):
            raise TypeError(f"{name} must be a list of statistic names, e.g. ['entropy'], not the string {value!r}")
        if isinstance(value, Mapping) or not isinstance(value, (Sequence, Collection)):
            raise TypeError(f"{name} must be a list of statistic names, not {type(value).__name__}")
        names = tuple(value)
        if not names:
            raise ValueError(f"{name} must name at least one statistic (or be None for the callback's own)")
        for item in names:
            if not isinstance(item, str):
                raise TypeError(f"{name} holds {type(item).__name__} {item!r}: statistic names are strings")
            if item not in valid:
                close = closest(item, valid)
                hint = f" (did you mean '{close}'?)" if close else ""
                raise ValueError(
                    f"{name}: unknown bertwatch statistic '{item}'{hint}; valid (`bertwatch stats` explains them): "
                    f"{', '.join(valid)}"
                )
        return names

    return check
