"""Local task files: CoNLL-style token classification and SQuAD-style question answering, read offline."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["read_conll", "read_squad"]


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
