"""The parser every command builds its flags on: no flag is taken for an abbreviation of another
(``--every-n-step`` is not ``--every-n-steps``), and an unknown flag is refused with the closest one
(``core.schema.closest``, the "did you mean" of the Python API too)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["command_parser", "unknown_command", "unknown_flags"]


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
    parser's own flags (not those of an action whose class says ``suggested = False``: a deprecated spelling):
    ``unrecognized arguments: --probe-examples 8 (did you mean --num-probe-examples?)``."""
    from bertwatch.core.schema import closest  # only on a refusal: `bertwatch --help` stays instant

    # argparse's own actions have no `suggested`; a deprecated flag's action (cli/run.py's _OldFlag) says False
    flags = [name for action in parser._actions if getattr(action, "suggested", True) for name in action.option_strings]
    guesses = {word: closest(word.split("=", 1)[0], flags) for word in extras if word.startswith("-")}
    meant = [f"{guess} for {word}" if len(guesses) > 1 else guess for word, guess in guesses.items() if guess]
    hint = f" (did you mean {', '.join(meant)}?)" if meant else ""
    return f"unrecognized arguments: {' '.join(extras)}{hint}"


def unknown_command(name: str, commands: Sequence[str]) -> str:
    """The refusal of a command ``bertwatch`` does not have, with the closest one it has."""
    from bertwatch.core.schema import closest

    guess = closest(name, commands)
    return f"unknown command {name!r}" + (f" (did you mean {guess}?)" if guess else "")
