"""GLUE tasks and plain text files, read offline from the standard GLUE layout or from the Hub when online.

The GLUE TSV files are parsed with quoting off (several tasks contain stray quotes that a CSV parser would
silently eat), MRPC's UTF-8 BOM is dropped, and CoLA's header-less layout is handled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GlueTask", "GLUE_TASKS", "glue_task", "load_glue", "default_glue_dir", "read_texts"]


@dataclass(frozen=True)
class GlueTask:
    """What bertwatch needs to know about one GLUE task."""

    name: str
    folder: str
    num_labels: int
    is_regression: bool
    pair: bool
    columns: tuple[str, ...]
    label_column: str
    label_names: tuple[str, ...] = ()
    header: bool = True


GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in (
        GlueTask("cola", "CoLA", 2, False, False, ("sentence",), "label", header=False),
        GlueTask("sst2", "SST-2", 2, False, False, ("sentence",), "label"),
        GlueTask("mrpc", "MRPC", 2, False, True, ("#1 String", "#2 String"), "Quality"),
        GlueTask("qqp", "QQP", 2, False, True, ("question1", "question2"), "is_duplicate"),
        GlueTask("stsb", "STS-B", 1, True, True, ("sentence1", "sentence2"), "score"),
        GlueTask(
            "mnli",
            "MNLI",
            3,
            False,
            True,
            ("sentence1", "sentence2"),
            "gold_label",
            ("entailment", "neutral", "contradiction"),
        ),
        GlueTask("qnli", "QNLI", 2, False, True, ("question", "sentence"), "label", ("entailment", "not_entailment")),
        GlueTask("rte", "RTE", 2, False, True, ("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
        GlueTask("wnli", "WNLI", 2, False, True, ("sentence1", "sentence2"), "label"),
    )
}

_COLA_COLUMNS = ("source", "label", "orig_label", "sentence")


def glue_task(name: str) -> GlueTask:
    """Look a task up by any common spelling ("SST-2", "sst2", "sts-b", "MNLI-m")."""
    key = name.lower().replace("-", "").replace("_", "")
    key = {"mnlim": "mnli", "mnlimm": "mnli"}.get(key, key)
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; choose one of {', '.join(sorted(GLUE_TASKS))}")
    return GLUE_TASKS[key]


def default_glue_dir() -> Path | None:
    """The local GLUE folder from $GLUE_DIR, or $BERTWATCH_DATA/glue, if either exists."""
    for candidate in (os.environ.get("GLUE_DIR"), _join(os.environ.get("BERTWATCH_DATA"), "glue")):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def _join(base: str | None, name: str) -> str | None:
    return str(Path(base) / name) if base else None


def _split_file(task: GlueTask, glue_dir: Path, split: str) -> Path:
    folder = glue_dir / task.folder
    if not folder.is_dir() and (glue_dir / "glue" / task.folder).is_dir():
        folder = glue_dir / "glue" / task.folder
    name = {"validation": "dev"}.get(split, split)
    if task.name == "mnli" and name == "dev":
        name = "dev_matched"
    path = folder / f"{name}.tsv"
    if not path.is_file():
        raise FileNotFoundError(
            f"no {task.folder} {split} file at {path}; pass the folder that holds {task.folder}/ "
            "(the layout of GLUE's download_glue_data.py)"
        )
    return path


def _read_tsv(task: GlueTask, path: Path, limit: int | None) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    if task.header:
        header, rows = lines[0].split("\t"), lines[1:]
    else:
        header, rows = list(_COLA_COLUMNS), lines
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in (*task.columns, task.label_column) if c not in index]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing}; is it the {task.folder} file?")
    examples: list[dict[str, Any]] = []
    for number, line in enumerate(rows, start=2 if task.header else 1):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) < len(header):
            raise ValueError(f"{path}:{number}: expected {len(header)} tab-separated fields, found {len(cells)}")
        texts = [cells[index[c]].strip() for c in task.columns]
        examples.append(
            {
                "text": texts[0],
                "text_pair": texts[1] if task.pair else None,
                "label": _label(task, cells[index[task.label_column]].strip()),
            }
        )
        if limit is not None and len(examples) >= limit:
            break
    return examples


def _label(task: GlueTask, raw: str) -> int | float:
    if task.is_regression:
        return float(raw)
    if task.label_names:
        return task.label_names.index(raw)
    return int(raw)


def _from_hub(task: GlueTask, split: str, limit: int | None) -> list[dict[str, Any]]:
    from datasets import load_dataset

    hub_split = {"dev": "validation"}.get(split, split)
    if task.name == "mnli" and hub_split == "validation":
        hub_split = "validation_matched"
    dataset = load_dataset("nyu-mll/glue", task.name, split=hub_split)
    fields = [c for c in dataset.column_names if c not in ("label", "idx")]
    examples = []
    for row in dataset:
        examples.append(
            {
                "text": row[fields[0]],
                "text_pair": row[fields[1]] if task.pair else None,
                "label": float(row["label"]) if task.is_regression else int(row["label"]),
            }
        )
        if limit is not None and len(examples) >= limit:
            break
    return examples


def load_glue(
    task: str, split: str = "dev", glue_dir: str | os.PathLike | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """Examples of a GLUE split in file order, as ``{"text", "text_pair", "label"}`` dicts.

    Reads ``glue_dir`` (or ``default_glue_dir()``) when given; otherwise downloads from the Hugging Face Hub,
    and says how to use local files if that fails. ``limit`` keeps the first N examples.
    """
    spec = glue_task(task)
    folder = Path(glue_dir) if glue_dir is not None else default_glue_dir()
    if folder is not None:
        if not folder.is_dir():
            raise FileNotFoundError(f"GLUE folder {folder} does not exist")
        return _read_tsv(spec, _split_file(spec, folder, split), limit)
    try:
        return _from_hub(spec, split, limit)
    except Exception as error:
        raise RuntimeError(
            f"could not download GLUE {spec.name} from the Hugging Face Hub ({error}); "
            "pass a local GLUE folder with --glue-dir or set GLUE_DIR / BERTWATCH_DATA"
        ) from error


def read_texts(path: str | os.PathLike) -> list[tuple[str, str | None]]:
    """One example per non-empty line; a tab separates the two sentences of a pair."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"text file {file} does not exist")
    texts: list[tuple[str, str | None]] = []
    for line in file.read_text(encoding="utf-8-sig").splitlines():
        if not line.strip():
            continue
        first, _, second = line.partition("\t")
        texts.append((first.strip(), second.strip() or None))
    if not texts:
        raise ValueError(f"text file {file} holds no examples (one per line; a tab separates a pair)")
    return texts
