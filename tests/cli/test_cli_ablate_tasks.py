"""``bertwatch ablate --task`` with local files: CoNLL token classification and SQuAD question answering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers as T

from bertwatch.cli import ablate as CLI
from bertwatch.data.files import read_conll, read_squad
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import tiny_tokenizer

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")

CONLL = """-DOCSTART- -X- -X- O

the DT B-NP O
movie NN I-NP B-PER
was VBD B-VP I-PER
good JJ B-ADJP O

a DT B-NP B-LOC
film NN I-NP I-LOC
.  . O O
"""


def _checkpoint(path: Path, cls, **extra) -> Path:
    tokenizer = tiny_tokenizer()
    model = bert_with_head(cls, tokenizer, **extra)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.fast
def test_read_conll_and_squad(tmp_path: Path) -> None:
    (tmp_path / "a.conll").write_text(CONLL)
    rows = read_conll(tmp_path / "a.conll")
    assert rows == [
        {"tokens": ["the", "movie", "was", "good"], "tags": ["O", "B-PER", "I-PER", "O"]},
        {"tokens": ["a", "film", "."], "tags": ["B-LOC", "I-LOC", "O"]},
    ]
    assert read_conll(tmp_path / "a.conll", limit=1) == rows[:1]
    (tmp_path / "bad.conll").write_text("lonely\n")
    with pytest.raises(ValueError, match="bad.conll:1"):
        read_conll(tmp_path / "bad.conll")
    squad = {
        "data": [
            {
                "title": "t",
                "paragraphs": [
                    {
                        "context": "the movie was good",
                        "qas": [{"id": "1", "question": "was it", "answers": [{"text": "good", "answer_start": 14}]}],
                    }
                ],
            }
        ]
    }
    (tmp_path / "s.json").write_text(json.dumps(squad))
    assert read_squad(tmp_path / "s.json") == [
        {
            "id": "1",
            "question": "was it",
            "context": "the movie was good",
            "answers": {"text": ["good"], "answer_start": [14]},
        }
    ]
    squad["data"][0]["paragraphs"][0]["qas"][0].update(answers=[], is_impossible=True)
    (tmp_path / "v2.json").write_text(json.dumps(squad))
    with pytest.raises(ValueError, match="unanswerable"):
        read_squad(tmp_path / "v2.json")


def test_cli_token_classification_from_a_conll_file(tmp_path: Path, capsys) -> None:
    ckpt = _checkpoint(
        tmp_path / "tagger",
        T.BertForTokenClassification,
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
    )
    (tmp_path / "dev.conll").write_text(CONLL * 3)
    out = tmp_path / "out"
    args = ["--model", str(ckpt), "--data", str(tmp_path / "dev.conll"), "--out", str(out), "--resamples", "30"]
    assert CLI.cli_ablate(["--task", "ner", *args, "--quiet", "--no-prune"]) == 0
    doc = json.loads((out / "ablation.json").read_text())
    assert doc["metric"] == "entity_f1" and doc["num_examples"] == 6
    assert doc["config"]["task_type"] == "token-classification"
    assert [m["name"] for m in doc["metrics"]] == ["entity_f1", "entity_precision", "entity_recall", "token_accuracy"]
    assert doc["task_type"] == "token-classification"
    printed = capsys.readouterr().out
    assert "[token-classification]: token classification · entity F1 (seqeval), entity precision" in printed
    assert CLI.cli_ablate(["--task", "ner", "--model", str(ckpt), "--out", str(out)]) == 2
    assert "--data" in capsys.readouterr().err
    assert CLI.cli_ablate(["--task", "qa", *args]) == 2  # a tagger is no QA model
    assert "question-answering head" in capsys.readouterr().err


def test_cli_question_answering_from_a_squad_file(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "reader", T.BertForQuestionAnswering)
    contexts = ["the movie was good and fun .", "a film with great actors , long plot .", "it was not very sad"]
    rows = []
    for i, context in enumerate(contexts * 2):
        answer = context.split()[1 + i % 3]
        rows.append(
            {
                "id": str(i),
                "question": "what was it",
                "answers": [{"text": answer, "answer_start": context.index(answer)}],
                "context": context,
            }
        )
    squad = {"data": [{"title": "x", "paragraphs": [{"context": r["context"], "qas": [r]} for r in rows]}]}
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    out = tmp_path / "out"
    code = CLI.cli_ablate(
        [
            "--model",
            str(ckpt),
            "--task",
            "question-answering",
            "--data",
            str(tmp_path / "dev.json"),
            "--out",
            str(out),
            "--resamples",
            "30",
            "--metric",
            "exact_match",
            "--max-answer-length",
            "3",
            "--no-prune",
            "--quiet",
        ]
    )
    assert code == 0
    doc = json.loads((out / "ablation.json").read_text())
    assert doc["metric"] == "exact_match" and doc["num_examples"] == 6
    assert doc["config"]["max_answer_length"] == 3
    assert set(doc["baseline_metrics"]) == {"exact_match", "squad_f1"}
    assert doc["task_type"] == "question-answering"  # the compared metric first, as --metric chose
    assert [m["label"] for m in doc["metrics"]] == ["exact match (SQuAD)", "token F1 (SQuAD)"]
    assert (
        "Task: <b>extractive question answering · exact match (SQuAD), token F1 (SQuAD)</b>"
        in (out / "report.html").read_text()
    )
