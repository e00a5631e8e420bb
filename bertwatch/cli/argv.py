"""The parser every command builds its flags on: no flag is taken for an abbreviation of another
(``--every-n-step`` is not ``--every-n-steps``), and an unknown flag is refused with the closest one
(``core.schema.closest``, the "did you mean" of the Python API too). The flags of a settings value's options
(``run``'s ``WatchSettings``, ``ablate``'s ``AblationSettings``, ``ship``'s ``ShipOptions``) come from their
declarations (:func:`add_options`) and are read back as the options given (:func:`given_options`), so no command
types an option's default or help a second time."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["add_options", "command_parser", "given_options", "unknown_command", "unknown_flags"]


class _Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without abbreviations, whose unknown flags get a suggestion."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unknown_flags(self, extras))
        return parsed


def command_parser(**kwargs: Any) -> argparse.ArgumentParser:
    """An ``argparse.ArgumentParser`` (``kwargs`` its own) with ``allow_abbrev=False`` and a "did you mean" for
    an unknown flag; every command of ``bertwatch`` builds its parser here."""
    return _Parser(allow_abbrev=False, **kwargs)


def unknown_flags(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """argparse's message for the arguments ``parser`` does not know, then for each unknown flag the closest of the
    parser's own flags: ``unrecognized arguments: --probe-examples 8 (did you mean --num-probe-examples?)``."""
    from bertwatch.core.schema import closest  # only on a refusal: `bertwatch --help` stays instant

    flags = [name for action in parser._actions for name in action.option_strings]
    guesses = {word: closest(word.split("=", 1)[0], flags) for word in extras if word.startswith("-")}
    meant = [f"{guess} for {word}" if len(guesses) > 1 else guess for word, guess in guesses.items() if guess]
    hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
    return f"unrecognized arguments: {' '.join(extras)}{hint}"


def unknown_command(name: str, commands: Sequence[str]) -> str:
    """The refusal of a command ``bertwatch`` does not have, with the closest one it has."""
    from bertwatch.core.schema import closest

    guess = closest(name, commands)
    return f"unknown command {name!r}" + (f" (did you mean {guess}?)" if guess else "")


# ------------------------------------------------------------------------------------------------ options as flags


def _dest(spelled: str, index: int) -> str:
    return f"setting__{spelled}__{index}"


def _shown(default: Any) -> str:
    """A default as the help shows it: ``none``, ``0.333`` (three significant digits), ``{}``."""
    if default is None:
        return "none"
    if isinstance(default, float):
        return f"{default:.3g}"
    return str(default)


def _int_or_none(text: str) -> int | None:
    return None if text.strip().lower() == "none" else int(text)


def _float_or_none(text: str) -> float | None:
    """A number; ``0`` or ``none`` is None."""
    return None if text.strip().lower() == "none" else (float(text) or None)


def _flag_arguments(flag: Any, help_text: str, default: Any) -> dict[str, Any]:
    """argparse keywords for one flag of an option (``core.schema.Flag``): the help is the flag's own, else the
    option's with its default (``%`` escaped, as argparse needs)."""
    help_text = (flag.help or help_text).replace("%", "%%")
    if flag.kind in ("true", "false"):
        return {"action": "store_true", "help": help_text}
    if flag.help is None and "default" not in help_text:
        help_text = f"{help_text} (default {_shown(default)})"
    if flag.kind == "yes_no":
        return {"action": argparse.BooleanOptionalAction, "help": help_text}
    kwargs: dict[str, Any] = {"help": help_text, "metavar": flag.metavar or flag.names[0][2:].upper()}
    types = {"int": int, "int_or_none": _int_or_none, "float": float, "float_or_none": _float_or_none}
    if flag.kind in types:
        kwargs["type"] = types[flag.kind]
        kwargs["metavar"] = flag.metavar or ("N" if flag.kind.startswith("int") else "X")
    elif flag.kind == "choice":
        kwargs.update(choices=flag.choices, metavar=None)
    return kwargs


def add_options(parser: Any, settings: type, prefix: str = "", hidden: bool = False) -> None:
    """One argument of ``parser`` (or of an argument group) per flag of each option of the settings value class
    ``settings`` (its fields made by ``core.schema.option``; an option without flags is set from Python only), help
    and default from the declaration. ``prefix`` tells apart the options of nested values (``"probing."``);
    ``hidden`` leaves them out of the help. An option not given stays out of the parsed namespace."""
    from bertwatch.core.schema import default_of

    for f in dataclasses.fields(settings):
        for index, flag in enumerate(f.metadata.get("flags", ())):
            arguments = _flag_arguments(flag, f.metadata["help"], default_of(f))
            if hidden:
                arguments["help"] = argparse.SUPPRESS
            parser.add_argument(*flag.names, dest=_dest(prefix + f.name, index), default=argparse.SUPPRESS, **arguments)


def _probe_texts(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    return [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines]


def _flag_value(kind: str, raw: Any) -> Any:
    """The option's value from what argparse stored for a flag of this kind."""
    if kind in ("true", "false"):
        return kind == "true"
    if kind == "names":
        return [s.strip() for s in raw.split(",") if s.strip()]
    if kind == "lines":
        return _probe_texts(raw)
    if kind == "json":
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {raw!r}")
        return value
    return raw


def given_options(args: argparse.Namespace, settings: type, prefix: str = "") -> dict[str, Any]:
    """The options of ``settings`` whose flags were given (:func:`add_options`), by field name, as values the
    settings value takes. Of two flags of one option (``--word-classes``, ``--word-classes-from``) the later one
    declared wins."""
    given: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        for index, flag in enumerate(f.metadata.get("flags", ())):
            dest = _dest(prefix + f.name, index)
            if hasattr(args, dest):
                given[f.name] = _flag_value(flag.kind, getattr(args, dest))
    return given
