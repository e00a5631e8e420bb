"""Local task files, read offline: CoNLL-style token classification, SQuAD-style question answering, multiple
choice (JSON lines or SWAG's CSV), texts with labels or label lists (JSON lines or TSV) and plain text for masked
LM. A malformed line is refused with its file, line number and what was expected."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "read_conll",
    "read_labelled_texts",
    "read_lines",
    "read_multilabel",
    "read_multiple_choice",
    "read_squad",
]


def read_conll(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """Sentences of a CoNLL-style file as ``{"tokens": [...], "tags": [...]}``: one token a line, its first
    whitespace-separated column the token and its last the tag (so CoNLL-2003's four columns work), a blank line
    between sentences, ``-DOCSTART-`` lines skipped. ``limit`` keeps the first N sentences."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"CoNLL file {file} does not exist")
    sentences: list[dict[str, Any]] = []
    tokens: list[str] = []
    tags: list[str] = []

    def close() -> None:
        if tokens:
            sentences.append({"tokens": list(tokens), "tags": list(tags)})
        tokens.clear()
        tags.clear()

    for number, line in enumerate(file.read_text(encoding="utf-8-sig").splitlines(), start=1):
        cells = line.split()
        if not cells:
            close()
            if limit is not None and len(sentences) >= limit:
                return sentences
            continue
        if cells[0] == "-DOCSTART-":
            continue
        if len(cells) < 2:
            raise ValueError(f"{file}:{number}: expected a token and its tag separated by whitespace, got {line!r}")
        tokens.append(cells[0])
        tags.append(cells[-1])
    close()
    if not sentences:
        raise ValueError(f"CoNLL file {file} holds no sentences (token and tag per line, blank line between)")
    return sentences[:limit] if limit is not None else sentences


def _flat(item: dict[str, Any], context: str) -> dict[str, Any]:
    answers = item.get("answers", [])
    if isinstance(answers, dict):
        texts, starts = list(answers.get("text", [])), list(answers.get("answer_start", []))
    else:
        texts, starts = [a["text"] for a in answers], [int(a["answer_start"]) for a in answers]
    if not texts or item.get("is_impossible"):
        raise ValueError(
            f"question {item.get('id', '?')!r} has no answer (SQuAD v2): the sweep scores extractive answers "
            "only; drop unanswerable questions"
        )
    return {
        "id": item.get("id"),
        "question": item["question"],
        "context": context,
        "answers": {"text": texts, "answer_start": starts},
    }


def read_squad(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """Questions of a SQuAD-style JSON file (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``) or a
    JSON list / JSON-lines file of flat rows (``question``, ``context``, ``answers``), as flat rows with
    ``answers: {"text": [...], "answer_start": [...]}``. ``limit`` keeps the first N questions."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"SQuAD file {file} does not exist")
    text = file.read_text(encoding="utf-8-sig")
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            raise ValueError(f"{file} is neither SQuAD JSON nor JSON lines ({error})") from error
    rows: list[dict[str, Any]] = []
    if isinstance(doc, dict) and "data" in doc:
        for article in doc["data"]:
            for paragraph in article["paragraphs"]:
                rows.extend(_flat(q, paragraph["context"]) for q in paragraph["qas"])
    elif isinstance(doc, list):
        rows = [_flat(row, row["context"]) for row in doc]
    else:
        raise ValueError(f"{file} is neither SQuAD JSON ({{'data': [...]}}) nor a list of question rows")
    if not rows:
        raise ValueError(f"SQuAD file {file} holds no questions")
    return rows[:limit] if limit is not None else rows


def _existing(path: str | os.PathLike, what: str) -> Path:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{what} file {file} does not exist")
    return file


def _json_rows(file: Path, example: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, row)`` of a JSON-lines file (one object a line, blank lines skipped) or of a JSON list."""
    text = file.read_text(encoding="utf-8-sig")
    if text.lstrip().startswith("["):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{file}:{error.lineno}: not valid JSON ({error.msg})") from error
        rows = [(f"{file}: item {i}", row) for i, row in enumerate(doc)]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"{file}:{number}", json.loads(line)))
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"{file}:{number}: not a JSON object ({error.msg}); expected one object a line, like {example}"
                ) from error
    for where, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object like {example}, got {type(row).__name__}")
        yield where, row


def _first(row: dict[str, Any], keys: Sequence[str]) -> Any:
    return next((row[k] for k in keys if row.get(k) is not None), None)


def _limited(rows: list[dict[str, Any]], file: Path, limit: int | None, what: str) -> list[dict[str, Any]]:
    if not rows:
        raise ValueError(f"{file} holds no {what}")
    return rows[:limit] if limit is not None else rows


# ------------------------------------------------------------------------------------------ multiple choice

MC_EXAMPLE = '{"question": "She opened the door and", "choices": ["walked in.", "ate the door."], "label": 0}'


def _as_index(value: Any) -> int:
    """An integer label (an int, an integral float or digits), else -1."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else -1
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return -1


def _choice_label(value: Any, choices: Sequence[str], where: str) -> int:
    """The right choice's index: an int (or digits), or the text of one of the choices."""
    index = _as_index(value)
    if index < 0 and isinstance(value, str) and value in choices:
        index = list(choices).index(value)
    if not 0 <= index < len(choices):
        raise ValueError(
            f"{where}: label {value!r} is not the index (0..{len(choices) - 1}) or the text of one of the choices"
        )
    return index


def _swag_rows(file: Path) -> list[dict[str, Any]]:
    """SWAG's CSV: ``sent1`` is the stem, each choice ``sent2`` + `` `` + ``ending{k}``, ``label`` the right k."""
    with file.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        endings = sorted((c for c in columns if c.startswith("ending") and c[6:].isdigit()), key=lambda c: int(c[6:]))
        missing = [c for c in ("sent1", "sent2", "label") if c not in columns]
        if missing or len(endings) < 2:
            raise ValueError(
                f"{file}:1: a SWAG CSV needs the columns sent1, sent2, ending0, ending1, ... and label; "
                f"missing {missing + ([] if len(endings) >= 2 else ['ending0', 'ending1'])}"
            )
        rows = []
        for row in reader:
            where = f"{file}:{reader.line_num}"
            if any(row.get(c) is None for c in ("sent1", "sent2", "label", *endings)):
                raise ValueError(f"{where}: expected {len(columns)} comma-separated cells, got fewer")
            choices = [f"{row['sent2']} {row[e]}".strip() for e in endings]
            rows.append(
                {"question": row["sent1"], "choices": choices, "label": _choice_label(row["label"], choices, where)}
            )
    return rows


def read_multiple_choice(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """Multiple-choice questions as ``{"question", "choices", "label"}`` (the stem, the choice texts, the right
    choice's index). JSON lines (or a JSON list): ``question`` and/or ``context`` (joined by a space when both),
    ``choices`` (or ``endings``/``options``), ``label`` (an index, or the right choice's text). A ``.csv`` file is
    read as SWAG's layout. Every question must have the same number of choices (at least two)."""
    file = _existing(path, "multiple-choice")
    if file.suffix.lower() == ".csv":
        rows = _swag_rows(file)
    else:
        rows = []
        for where, row in _json_rows(file, MC_EXAMPLE):
            stem = " ".join(str(row[k]) for k in ("context", "question") if row.get(k) is not None)
            choices = _first(row, ("choices", "endings", "options"))
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
                raise ValueError(f"{where}: expected 'choices', a list of at least two texts, like {MC_EXAMPLE}")
            label = _first(row, ("label", "labels"))
            if label is None:
                raise ValueError(f"{where}: no 'label' (the index of the right choice), like {MC_EXAMPLE}")
            rows.append({"question": stem, "choices": choices, "label": _choice_label(label, choices, where)})
            if len(choices) != len(rows[0]["choices"]):
                raise ValueError(
                    f"{where}: {len(choices)} choices, but the first question has {len(rows[0]['choices'])}; every "
                    "question needs the same number"
                )
    return _limited(rows, file, limit, "questions")


# ------------------------------------------------------------------------------------------ texts with labels

TEXT_EXAMPLE = '{"text": "a gripping film", "label": 1}'
MULTILABEL_EXAMPLE = '{"text": "stocks fell as rain hit the harvest", "labels": ["finance", "weather"]}'


def _text_rows(file: Path, example: str) -> Iterator[tuple[str, str, str | None, Any]]:
    """``(where, text, text_pair, raw label)`` of a JSON-lines file, or of a TSV (``.tsv``/``.txt``: text, an
    optional second text and the label, tab-separated, quoting off; a first line ending in ``label``/``labels``
    is a header)."""
    if file.suffix.lower() in (".tsv", ".txt", ".tab"):
        lines = file.read_text(encoding="utf-8-sig").splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            cells = line.split("\t")
            if number == 1 and cells[-1].strip().lower() in ("label", "labels"):
                continue
            if len(cells) not in (2, 3):
                raise ValueError(
                    f"{file}:{number}: expected 'text<TAB>label' or 'text<TAB>text_pair<TAB>label', "
                    f"got {len(cells)} tab-separated cells"
                )
            yield f"{file}:{number}", cells[0], (cells[1] if len(cells) == 3 else None), cells[-1].strip()
        return
    for where, row in _json_rows(file, example):
        text = _first(row, ("text", "sentence"))
        if not isinstance(text, str):
            raise ValueError(f"{where}: no 'text' string, like {example}")
        pair = _first(row, ("text_pair", "sentence2"))
        yield where, text, (None if pair is None else str(pair)), _first(row, ("label", "labels"))


def _label_id(value: Any, names: Sequence[str], where: str) -> int:
    """A class index, or the index of the class named ``value``."""
    index = {str(n): i for i, n in enumerate(names)}
    number = index[value.strip()] if isinstance(value, str) and value.strip() in index else _as_index(value)
    if not 0 <= number < len(names):
        raise ValueError(
            f"{where}: label {value!r} is neither a class index 0..{len(names) - 1} nor one of {list(names)}"
        )
    return number


def read_labelled_texts(
    path: str | os.PathLike,
    label_names: Sequence[str] = (),
    regression: bool = False,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Texts with one label each, as ``{"text", "text_pair", "label"}``: JSON lines (``text``, optional
    ``text_pair``, ``label``) or a TSV (``text[<TAB>text_pair]<TAB>label``). A label is a class index or one of
    ``label_names`` (the model's ``id2label``), or with ``regression`` a number."""
    file = _existing(path, "labelled text")
    rows = []
    for where, text, pair, raw in _text_rows(file, TEXT_EXAMPLE):
        if raw is None or raw == "":
            raise ValueError(f"{where}: no label, like {TEXT_EXAMPLE}")
        if regression:
            try:
                label: Any = float(raw)
            except (TypeError, ValueError):
                label = math.nan
            if not math.isfinite(label) or isinstance(raw, bool):
                raise ValueError(f"{where}: label {raw!r} is not a finite number (the task is regression)")
        elif label_names:
            label = _label_id(raw, label_names, where)
        else:
            label = _label_id(raw, [str(i) for i in range(max(0, _as_index(raw)) + 1)], where)
        rows.append({"text": text, "text_pair": pair, "label": label})
    return _limited(rows, file, limit, "examples")


def read_multilabel(
    path: str | os.PathLike, label_names: Sequence[str], limit: int | None = None
) -> list[dict[str, Any]]:
    """Texts with any number of labels, as ``{"text", "text_pair", "label"}`` with ``label`` a 0/1 list over
    ``label_names`` (the model's ``id2label``). JSON lines: ``labels`` a list of label names or indices (empty:
    none applies). TSV: ``text[<TAB>text_pair]<TAB>labels``, the labels comma-separated (empty: none)."""
    if not label_names:
        raise ValueError("reading multi-label examples needs the model's label names (config.id2label)")
    file = _existing(path, "multi-label")
    rows = []
    for where, text, pair, raw in _text_rows(file, MULTILABEL_EXAMPLE):
        if isinstance(raw, str):
            raw = [part for part in (p.strip() for p in raw.split(",")) if part]
        if not isinstance(raw, list):
            raise ValueError(f"{where}: expected 'labels', a list of label names or indices, like {MULTILABEL_EXAMPLE}")
        hot = [0] * len(label_names)
        for value in raw:
            hot[_label_id(value, label_names, where)] = 1
        rows.append({"text": text, "text_pair": pair, "label": hot})
    return _limited(rows, file, limit, "examples")


# ------------------------------------------------------------------------------------------ plain text


def read_lines(path: str | os.PathLike, limit: int | None = None) -> list[dict[str, Any]]:
    """One example a non-blank line, as ``{"text": line}`` (masked-LM evaluation text); ``limit``: the first N."""
    file = _existing(path, "text")
    rows = [{"text": line.strip()} for line in file.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    return _limited(rows, file, limit, "lines of text (one example a line)")
