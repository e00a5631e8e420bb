"""``bertwatch run [OPTIONS] script.py [ARGS...]``: run an unchanged training script with bertwatch on every Trainer.

The script runs in this process as ``__main__`` with its own ``sys.argv`` (``script.py ARGS...``) and its own
directory first on ``sys.path``, as ``python script.py ARGS...`` would; its exit status is returned. Every
``transformers.Trainer`` it builds (subclasses included) gets ``bertwatch.watch`` with the options' settings.
``bertwatch run [OPTIONS] -m package.module [ARGS...]`` runs a module as ``python -m package.module`` would (the
working directory first on ``sys.path``). Also ``python -m bertwatch run ...``, so ``torchrun ... -m bertwatch run
script.py`` works.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.util
import io
import os
import runpy
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from bertwatch.cli.argv import add_options, command_parser, given_options

__all__ = ["cli_run", "run_module", "run_script", "run_parser", "settings_from_options"]


def run_parser(show_all: bool = False) -> argparse.ArgumentParser:
    """The parser of ``bertwatch run``: every flag of every option parses; its help (``--help``) shows the front
    options a run sets, and ``--help-all`` (``show_all``) every option, in the groups of the nested values."""
    parser = command_parser(
        prog="bertwatch run",
        description="Run a training script unchanged, with bertwatch attached to every transformers Trainer it "
        "creates. Options go before the script; everything after the script (or after --) is the script's own.",
        usage="bertwatch run [OPTIONS] [--] script.py [ARGS...]\n       bertwatch run [OPTIONS] -m MODULE [ARGS...]",
        epilog=None if show_all else _more_options(),
    )
    parser.add_argument("--help-all", action=_HelpAll, nargs=0, help="show every option, the advanced ones too")
    parser.add_argument("script", nargs="?", help="the Python training script")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE does")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    _add_settings(parser, show_all)
    return parser


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every option, then exit."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        run_parser(show_all=True).print_help()
        parser.exit()


def _more_options() -> str:
    """The short help's last line: how many options ``--help-all`` adds, in which groups."""
    from bertwatch.options.settings import GROUPS, option_specs

    hidden = sum(len(s.flags) for s in option_specs() if s.group is not None)
    titles = ", ".join(title for _, _, title in GROUPS)
    return f"{hidden} more options ({titles}): bertwatch run --help-all"


def _add_settings(parser: argparse.ArgumentParser, show_all: bool) -> None:
    """One argument per flag of every option (``cli.argv.add_options``; objects have none: Python only), in groups:
    the front options first, then one group per nested value (in the help only when ``show_all``)."""
    from bertwatch.options.settings import GROUPS, WatchSettings

    add_options(
        parser.add_argument_group("bertwatch options (in Python: the keywords of bertwatch.watch)"), WatchSettings
    )
    for group, cls, title in GROUPS:
        section = parser.add_argument_group(f"{title} (Python: {group}={cls.__name__}(...))")
        add_options(section, cls, prefix=f"{group}.", hidden=not show_all)


def settings_from_options(opts: argparse.Namespace) -> dict[str, Any]:
    """The options given, as ``BertWatchCallback`` keyword arguments (the callback's defaults for the rest): front
    options by name, nested ones as their value (``probing=ProbeOptions(seed=1)``). Of two flags of one option
    (``--word-classes``, ``--word-classes-from``) the later one declared wins."""
    from bertwatch.options.settings import GROUPS, WatchSettings

    front = given_options(opts, WatchSettings)
    nested = {group: given_options(opts, cls, prefix=f"{group}.") for group, cls, _ in GROUPS}
    if front.get("stats") == []:
        del front["stats"]
    return {**front, **{group: cls(**nested[group]) for group, cls, _ in GROUPS if nested[group]}}


def _exit_status(code: Any) -> int:
    """What ``python script.py`` exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run_as_main(path: str) -> None:
    """Execute the file at ``path`` as the ``__main__`` module, as ``python path`` does: ``__file__`` absolute,
    ``sys.argv`` left as set (``runpy.run_path`` would put ``path`` in ``sys.argv[0]``), classes picklable."""
    with io.open_code(path) as handle:
        code = compile(handle.read(), path, "exec")
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=path, __builtins__=builtins, __spec__=None, __loader__=None, __cached__=None)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _from_script(trace: Any, script: str) -> Any:
    """The traceback from the script's own first frame on, as ``python script.py`` would print it."""
    target, start = os.path.abspath(script), trace
    while start is not None and os.path.abspath(start.tb_frame.f_code.co_filename) != target:
        start = start.tb_next
    return start if start is not None else trace


def _said_if_unwatched(attached: list[Any], file: str, status: int) -> int:
    """``status``, the script's own exit status, after one line on stderr when the script built no ``Trainer``:
    nothing was watched, and how to watch it (on the main process of a distributed run only)."""
    if not attached and os.environ.get("RANK", "0") == "0":
        print(
            f"bertwatch: {os.path.basename(file)} built no transformers Trainer in this process, so nothing was "
            "watched.\nbertwatch: to watch a run, build a Trainer in the script (bertwatch run watches every one it "
            "builds) or call bertwatch.watch(trainer) where one is built; a loop without a Trainer can use "
            "bertwatch's Python API (examples/plain_pytorch_loop.py)",
            file=sys.stderr,
        )
    return status


def _as_python_would(run: Callable[[], None], file: str, argv: list[str], path0: str, settings: dict[str, Any]) -> int:
    """``run()`` inside :func:`~bertwatch.callbacks.attach.watching_trainers` (``settings``: ``BertWatchCallback``
    keyword arguments) with ``sys.argv`` and ``sys.path[0]`` set as Python sets them for ``file``; its exit status.
    An uncaught exception is reported as Python would (through ``sys.excepthook``, from ``file``'s first frame on)
    and gives 1, except bertwatch's refusal of a model it does not watch: its message alone, and 2. ``sys.argv`` and
    ``sys.path`` are restored."""
    from bertwatch.callbacks.attach import watching_trainers
    from bertwatch.heads.unwrap import UnsupportedModelError

    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = argv
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    attached: list[Any] = []
    try:
        with watching_trainers(**settings) as attached:
            run()
        return _said_if_unwatched(attached, file, 0)
    except SystemExit as stop:
        return _said_if_unwatched(attached, file, _exit_status(stop.code))
    except KeyboardInterrupt:
        raise
    except UnsupportedModelError as error:  # bertwatch's refusal says what to do: a traceback would bury it
        print(f"bertwatch run: error: {error}", file=sys.stderr)
        return 2
    except BaseException:
        kind, value, trace = sys.exc_info()
        trace = _from_script(trace, file)
        sys.excepthook(kind, value.with_traceback(trace) if value is not None else value, trace)
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
        else:
            sys.path.remove(path0)


def run_script(script: str, script_args: Sequence[str], settings: dict[str, Any]) -> int:
    """Run ``script`` as ``__main__`` with ``sys.argv = [script, *script_args]`` and bertwatch watching every Trainer
    (``settings``: ``BertWatchCallback`` keyword arguments); returns its exit status, as ``python script.py``."""
    if not os.path.isfile(script):
        raise FileNotFoundError(f"no such script: {script}")
    path = os.path.abspath(script)
    return _as_python_would(lambda: _run_as_main(path), script, [script, *script_args], os.path.dirname(path), settings)


def run_module(module: str, module_args: Sequence[str], settings: dict[str, Any]) -> int:
    """Run ``module`` as ``__main__``, as ``python -m module ARGS...`` does (``sys.argv[0]`` its file, the working
    directory first on ``sys.path``), with bertwatch watching every Trainer; returns its exit status."""
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    finally:
        sys.path.pop(0)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"no module named {module} (looked in the working directory and on sys.path)")

    def run() -> None:
        runpy.run_module(module, run_name="__main__", alter_sys=True)

    return _as_python_would(run, spec.origin, [module, *module_args], os.getcwd(), settings)


def _split_module(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], str, list[str]] | None:
    """``(bertwatch's options, MODULE, the module's arguments)`` for ``[OPTIONS] -m MODULE [ARGS...]``; None when the
    script (or ``--``) comes first. The module's arguments are its own, even those that look like bertwatch's."""
    valued = {flag for action in parser._actions if action.nargs != 0 for flag in action.option_strings}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-m"):
            module = token[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
            if not module:
                parser.error("-m needs a module name")
            return argv[:i], module, argv[i + 1 + (token == "-m") :]
        if token == "--" or not token.startswith("-"):
            return None
        i += 2 if token in valued else 1
    return None


def _checked_settings(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> dict[str, Any]:
    """The options' settings, checked as ``BertWatchCallback`` checks them, before the script runs: a value it
    refuses is a usage error (exit status 2) that says what to pass."""
    from bertwatch.callbacks import BertWatchCallback

    try:
        settings = settings_from_options(opts)
        BertWatchCallback(**settings)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    return settings


def cli_run(argv: Sequence[str]) -> int:
    parser = run_parser()
    split = _split_module(parser, list(argv))
    if split is not None:
        options, module, module_args = split
        return run_module(module, module_args, _checked_settings(parser, parser.parse_args(options)))
    opts = parser.parse_args(list(argv))  # argparse ends bertwatch's options at the script or at "--"
    if not opts.script:
        parser.error("name the training script (or -m MODULE)")
    return run_script(opts.script, opts.script_args, _checked_settings(parser, opts))
