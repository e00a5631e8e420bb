"""The arguments the commands share: ``--model`` (every command that loads a model), and the evaluation input of
the checkpoint commands (``bertwatch ablate``, ``bertwatch ship``): the flags ``--task``, ``--data``,
``--glue-dir``, ``--split`` and ``--limit``, and the examples they name."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "DATA_FILES",
    "MINILM_HELP",
    "add_eval_arguments",
    "add_model_argument",
    "read_examples",
    "task_type",
]

#: What ``--data`` holds for each task type (docs/ablation.md "Task types" shows each format).
DATA_FILES = {
    "sequence-classification": "JSON lines {text, text_pair?, label} or a TSV text[<TAB>pair]<TAB>label",
    "regression": "the same, with numeric labels",
    "multi-label": "JSON lines {text, labels: [names or indices]} or a TSV text<TAB>name,name",
    "token-classification (ner)": "a CoNLL file, token and tag per line",
    "question-answering (qa)": "a SQuAD JSON file",
    "multiple-choice": "JSON lines {question, choices: [...], label} or a SWAG CSV",
    "masked-lm (mlm)": "plain text, one example a line",
}


#: How a model argument says that ``minilm`` names the packaged model (``heads.loading.model_source``).
MINILM_HELP = "or 'minilm': the packaged all-MiniLM-L6-v2"


def add_model_argument(
    parser: argparse.ArgumentParser, what: str, *, required: bool = True, flag: str = "--model", packaged: bool = True
) -> None:
    """Add ``flag`` (``--model``): a model folder or a Hub name, ``what`` its help; ``minilm`` loads the packaged
    model wherever a model goes (``heads.loading.model_source``), and the help says so where it fits (``packaged``:
    not for a command that needs a fine-tuned task head)."""
    help_text = f"{what} ({MINILM_HELP})" if packaged else what
    parser.add_argument(flag, required=required, default=None, metavar="MODEL", help=help_text)


def add_eval_arguments(parser: argparse.ArgumentParser, task_help: str, *, task_required: bool = True) -> None:
    """Add ``--task`` (its help starting with ``task_help``), ``--data``, ``--glue-dir``, ``--split`` and ``--limit``."""
    parser.add_argument("--task", required=task_required, default=None, help=task_help)
    parser.add_argument("--data", default=None, help="the evaluation file of a task type (see --task)")
    parser.add_argument(
        "--glue-dir", default=None, help="local GLUE folder (default: $GLUE_DIR or $BERTWATCH_DATA/glue)"
    )
    parser.add_argument("--split", default="dev", help="split to evaluate on (default: dev)")
    parser.add_argument("--limit", type=int, default=None, help="use the first N examples (file order)")


def task_type(args: argparse.Namespace) -> str:
    """The task type ``--task`` names (a GLUE name: sequence classification); a task type needs ``--data``,
    checked here before the model loads."""
    from bertwatch.ablation.task_types import ALIASES, TASK_TYPES

    wanted = ALIASES.get(args.task.lower(), args.task.lower())
    if wanted in TASK_TYPES:
        if args.data is None:
            what = next(v for k, v in DATA_FILES.items() if k.split()[0] == wanted)
            raise ValueError(f"--task {args.task} reads its examples from --data: pass {what}")
        return wanted
    from bertwatch.data.glue import glue_task

    try:
        glue_task(args.task)
    except ValueError as error:
        raise ValueError(f"{error}; or a task type read from --data: {', '.join(TASK_TYPES)}") from error
    if args.data is not None:
        raise ValueError(
            f"--task {args.task} is a GLUE task, read from --glue-dir; to evaluate on --data {args.data}, name its "
            "task type instead (--task sequence-classification or regression)"
        )
    return "sequence-classification"


def read_examples(args: argparse.Namespace, kind: str, model: Any) -> list:
    """The examples of ``--task`` / ``--data`` for the task type ``kind`` (from :func:`task_type`)."""
    from bertwatch.data import files
    from bertwatch.data.glue import load_glue
    from bertwatch.heads.task_heads import label_names

    if args.data is None:
        return load_glue(args.task, split=args.split, glue_dir=args.glue_dir, limit=args.limit)
    readers = {
        "token-classification": lambda: files.read_conll(args.data, limit=args.limit),
        "question-answering": lambda: files.read_squad(args.data, limit=args.limit),
        "multiple-choice": lambda: files.read_multiple_choice(args.data, limit=args.limit),
        "masked-lm": lambda: files.read_lines(args.data, limit=args.limit),
        "multi-label": lambda: files.read_multilabel(args.data, list(label_names(model.config)), limit=args.limit),
        "regression": lambda: files.read_labelled_texts(args.data, regression=True, limit=args.limit),
        "sequence-classification": lambda: files.read_labelled_texts(
            args.data, list(label_names(model.config)), limit=args.limit
        ),
    }
    return readers[kind]()
