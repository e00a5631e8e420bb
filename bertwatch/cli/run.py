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

__all__ = ["cli_run", "run_module", "run_script"]


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertwatch run",
        description="Run a training script unchanged, with bertwatch attached to every transformers Trainer it "
        "creates. Options go before the script; everything after the script (or after --) is the script's own.",
        usage="bertwatch run [OPTIONS] [--] script.py [ARGS...]  |  bertwatch run [OPTIONS] -m MODULE [ARGS...]",
    )
    parser.add_argument("script", nargs="?", help="the Python training script")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE does")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    parser.add_argument(
        "--every-n-steps",
        "--probe-every",
        type=int,
        default=None,
        dest="every_n_steps",
        help="measure every N optimiser steps (default 50; 0: only at start, evaluation and end)",
    )
    parser.add_argument("--stats", default=None, help="comma-separated statistics (default: all but IG)")
    parser.add_argument("--num-probe-examples", type=int, default=None, help="probe examples (default 32)")
    parser.add_argument(
        "--probe-texts", default=None, help="a file with one probe text per line (a tab separates a sentence pair)"
    )
    parser.add_argument("--num-maps", type=int, default=None, help="probe examples whose maps are kept (default 4)")
    parser.add_argument("--logdir", default=None, help="TensorBoard run directory (default: the Trainer's run)")
    parser.add_argument(
        "--ablate",
        "--ablate-on-end",
        action="store_true",
        dest="ablate",
        help="run the head/layer ablation sweep on the eval set when training ends",
    )
    parser.add_argument(
        "--ablation-mode", choices=("uniform", "zero"), default=None, help="how a head is disabled (default uniform)"
    )
    parser.add_argument(
        "--word-classes",
        action="store_true",
        help="log attention to pronouns, subjects, objects and negation from closed word lists on the probe tokens",
    )
    parser.add_argument(
        "--word-classes-from",
        default=None,
        metavar="CONLLU",
        help="log attention to UD word classes (nouns, verbs, subjects, objects...) of this treebank's sentences, "
        "e.g. UD English-EWT dev",
    )
    parser.add_argument(
        "--head-clusters", action="store_true", help="log the heads' JS distance map (MDS) at every probe step"
    )
    parser.add_argument(
        "--no-trackers", action="store_true", help="do not send the layer means to the Trainer's report_to trackers"
    )
    return parser


def _probe_texts(path: str) -> list[Any]:
    with open(path, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    return [tuple(line.split("\t", 1)) if "\t" in line else line for line in lines]


def _settings(opts: argparse.Namespace) -> dict[str, Any]:
    """The options given, as ``BertWatchCallback`` keyword arguments (the callback's defaults for the rest)."""
    settings: dict[str, Any] = {}
    if opts.every_n_steps is not None:
        settings["every_n_steps"] = opts.every_n_steps
    if opts.stats:
        settings["stats"] = [s.strip() for s in opts.stats.split(",") if s.strip()]
    if opts.num_probe_examples is not None:
        settings["num_probe_examples"] = opts.num_probe_examples
    if opts.probe_texts:
        settings["probe_texts"] = _probe_texts(opts.probe_texts)
    if opts.num_maps is not None:
        settings["num_maps"] = opts.num_maps
    if opts.logdir:
        settings["logging_dir"] = opts.logdir
    if opts.ablate:
        settings["ablate_on_end"] = True
    if opts.ablation_mode:
        settings["ablation_mode"] = opts.ablation_mode
    if opts.no_trackers:
        settings["log_to_trackers"] = False
    if opts.word_classes_from:
        settings["word_classes"] = opts.word_classes_from
    elif opts.word_classes:
        settings["word_classes"] = True
    if opts.head_clusters:
        settings["head_clusters"] = True
    return settings


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


def _as_python_would(run: Callable[[], None], file: str, argv: list[str], path0: str, settings: dict[str, Any]) -> int:
    """``run()`` inside :func:`~bertwatch.callbacks.attach.watching_trainers` (``settings``: ``BertWatchCallback``
    keyword arguments) with ``sys.argv`` and ``sys.path[0]`` set as Python sets them for ``file``; its exit status.
    An uncaught exception is reported as Python would (through ``sys.excepthook``, from ``file``'s first frame on)
    and gives 1; ``sys.argv`` and ``sys.path`` are restored."""
    from bertwatch.callbacks.attach import watching_trainers

    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = argv
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    try:
        with watching_trainers(**settings):
            run()
        return 0
    except SystemExit as stop:
        return _exit_status(stop.code)
    except KeyboardInterrupt:
        raise
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


def cli_run(argv: Sequence[str]) -> int:
    parser = _run_parser()
    split = _split_module(parser, list(argv))
    if split is not None:
        options, module, module_args = split
        return run_module(module, module_args, _settings(parser.parse_args(options)))
    opts = parser.parse_args(list(argv))  # argparse ends bertwatch's options at the script or at "--"
    if not opts.script:
        parser.error("name the training script (or -m MODULE)")
    return run_script(opts.script, opts.script_args, _settings(opts))
