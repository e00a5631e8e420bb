"""``bertwatch ablate --task`` for every task type with a local file (the readers: tests/data/test_files.py), end to
end: its baseline checked against a plain evaluation written here (one example at a time); CoNLL token
classification and SQuAD question answering."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.cli import ablate as CLI
from bertwatch.data.files import read_lines
from tests.support.models import bert_with_head
from tests.support.task_cases import CONLL_SAMPLE
from tests.support.tb_helpers import make_wsgi_app
from tests.support.tiny_trainer import WORDS, tiny_tokenizer
from tests.support.tolerance import assert_float32_close, pearson_scale

LABELS = ("sports", "finance", "weather")


def _checkpoint(path: Path, cls, **extra) -> Path:
    tokenizer = tiny_tokenizer()
    model = bert_with_head(cls, tokenizer, seed=1, scale=0.3, **extra)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _words(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(low, high))))


def _run(tmp_path: Path, ckpt: Path, task: str, data: Path, *extra: str) -> dict:
    out = tmp_path / f"out-{task}"
    argv = ["--model", str(ckpt), "--task", task, "--data", str(data), "--out", str(out), "--resamples", "20"]
    assert CLI.cli_ablate([*argv, "--no-prune", "--no-keep-only", "--quiet", "--max-length", "64", *extra]) == 0
    return json.loads((out / "ablation.json").read_text())


def _load(cls, ckpt: Path):
    return cls.from_pretrained(ckpt).eval(), T.AutoTokenizer.from_pretrained(ckpt)


# ------------------------------------------------------------------------------------------ the command


def test_cli_multiple_choice_end_to_end_with_report_and_plugin_route(tmp_path: Path, capsys) -> None:
    ckpt = _checkpoint(tmp_path / "mc", T.BertForMultipleChoice)
    rng = np.random.default_rng(0)
    rows = [
        {"question": _words(rng, 2, 6), "choices": [_words(rng, 1, 5) for _ in range(3)], "label": int(rng.integers(3))}
        for _ in range(12)
    ]
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = _run(tmp_path, ckpt, "multiple-choice", data)
    assert doc["task_type"] == "multiple-choice" and doc["metric"] == "accuracy" and doc["num_examples"] == 12
    assert [m["label"] for m in doc["metrics"]] == ["accuracy"]
    model, tokenizer = _load(T.BertForMultipleChoice, ckpt)
    correct = 0
    with torch.inference_mode():
        for row in rows:
            scores = []
            for choice in row["choices"]:  # one choice alone, [1, 1, T], unpadded: its single logit is its score
                encoded = tokenizer(row["question"], choice, return_tensors="pt")
                scores.append(float(model(**{k: v[None] for k, v in encoded.items()}).logits[0, 0]))
            correct += int(np.argmax(scores)) == row["label"]
    assert doc["baseline"] == pytest.approx(correct / len(rows))
    printed = capsys.readouterr().out
    assert "multiple-choice" in printed and "multiple choice · accuracy" in printed
    out = tmp_path / "out-multiple-choice"
    assert "Task: <b>multiple choice · accuracy</b>" in (out / "report.html").read_text()
    from werkzeug.test import Client

    app, _, _ = make_wsgi_app(out)
    runs = json.loads(Client(app).get("/data/plugin/bertwatch/tags").get_data())["runs"]
    (run,) = runs  # the run written into OUT
    route = json.loads(Client(app).get(f"/data/plugin/bertwatch/ablation?run={run}").get_data())
    assert route["taskType"] == "multiple-choice" and route["description"] == "multiple choice · accuracy"
    assert route["metrics"][0]["baseline"] == pytest.approx(doc["baseline"])


def test_cli_multi_label_from_a_tsv(tmp_path: Path) -> None:
    from sklearn.metrics import f1_score

    ckpt = _checkpoint(
        tmp_path / "ml",
        T.BertForSequenceClassification,
        num_labels=3,
        problem_type="multi_label_classification",
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    rng = np.random.default_rng(1)
    rows = [
        (_words(rng, 3, 8), sorted({str(x) for x in rng.choice(LABELS, size=int(rng.integers(0, 3)))}))
        for _ in range(14)
    ]
    data = tmp_path / "dev.tsv"
    data.write_text("text\tlabels\n" + "".join(f"{t}\t{','.join(names)}\n" for t, names in rows))
    doc = _run(tmp_path, ckpt, "multi-label", data)
    assert doc["task_type"] == "multi-label" and doc["metric"] == "micro_f1" and doc["num_examples"] == 14
    assert doc["metrics"][0]["label"] == "micro-F1"
    model, tokenizer = _load(T.BertForSequenceClassification, ckpt)
    with torch.inference_mode():
        predicted = [(model(**tokenizer(t, return_tensors="pt")).logits[0] > 0).int().tolist() for t, _ in rows]
    gold = [[int(n in names) for n in LABELS] for _, names in rows]
    assert doc["baseline"] == pytest.approx(f1_score(gold, predicted, average="micro"))


def test_cli_masked_lm_from_plain_text(tmp_path: Path) -> None:
    from bertwatch.ablation.settings import AblationSettings
    from bertwatch.ablation.sweep import prepare_sweep

    ckpt = _checkpoint(tmp_path / "mlm", T.BertForMaskedLM)
    rng = np.random.default_rng(2)
    data = tmp_path / "corpus.txt"
    data.write_text("".join(_words(rng, 4, 10) + "\n\n" for _ in range(10)))
    doc = _run(tmp_path, ckpt, "mlm", data, "--seed", "3")
    assert doc["task_type"] == "masked-lm" and doc["metric"] == "mlm_loss" and doc["num_examples"] == 10
    assert [m["label"] for m in doc["metrics"]] == ["masked-LM loss", "pseudo-perplexity"]
    model, tokenizer = _load(T.BertForMaskedLM, ckpt)
    settings = AblationSettings(task="mlm", seed=3, max_length=64, progress=False)
    features = prepare_sweep(model, read_lines(data), tokenizer, None, settings).data.features  # the seeded masks
    total, count = 0.0, 0
    with torch.inference_mode():
        for feature in features:
            logits = model(input_ids=torch.tensor([feature["input_ids"]])).logits[0].double()
            for position, label in enumerate(feature["labels"]):
                if label != -100:
                    total -= float(torch.log_softmax(logits[position], -1)[label])
                    count += 1
    assert count >= 10 and doc["baseline"] == pytest.approx(total / count, rel=1e-5)
    assert doc["baseline_metrics"]["pseudo_perplexity"] == pytest.approx(np.exp(total / count), rel=1e-5)


def test_cli_sequence_classification_and_regression_from_files(tmp_path: Path, capsys) -> None:
    from scipy.stats import pearsonr

    names = ("negative", "positive")
    ckpt = _checkpoint(
        tmp_path / "cls",
        T.BertForSequenceClassification,
        num_labels=2,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    rng = np.random.default_rng(4)
    rows = [{"text": _words(rng, 3, 9), "label": str(rng.choice(names))} for _ in range(14)]
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = _run(tmp_path, ckpt, "sequence-classification", data)
    assert doc["task_type"] == "sequence-classification" and doc["metric"] == "accuracy"
    model, tokenizer = _load(T.BertForSequenceClassification, ckpt)
    with torch.inference_mode():
        predicted = [int(model(**tokenizer(r["text"], return_tensors="pt")).logits[0].argmax()) for r in rows]
    assert doc["baseline"] == pytest.approx(np.mean([p == names.index(r["label"]) for p, r in zip(predicted, rows)]))

    ckpt = _checkpoint(tmp_path / "reg", T.BertForSequenceClassification, num_labels=1)
    scores = [float(rng.normal()) for _ in rows]
    data = tmp_path / "dev.tsv"
    data.write_text("".join(f"{r['text']}\t{s}\n" for r, s in zip(rows, scores)))
    doc = _run(tmp_path, ckpt, "regression", data)
    assert doc["task_type"] == "regression" and doc["metric"] == "pearson"
    assert doc["metrics"][0]["label"] == "Pearson r"
    trivial = doc["trivial_baseline"]  # a correlation has no constant answer: said, not printed as 0
    assert trivial["value"] is None and trivial["no_better_than_constant"] is False
    assert trivial["sentence"] == (
        "no constant answer to compare with: Pearson r is undefined for a constant prediction (it has no variance)"
    )
    model, tokenizer = _load(T.BertForSequenceClassification, ckpt)
    with torch.inference_mode():
        predicted = [float(model(**tokenizer(r["text"], return_tensors="pt")).logits[0, 0]) for r in rows]
    assert_float32_close(doc["baseline"], pearsonr(predicted, scores)[0], scale=pearson_scale(predicted))

    capsys.readouterr()
    base = ["--model", str(ckpt), "--out", str(tmp_path / "x")]
    assert CLI.cli_ablate(["--task", "multiple-choice", *base]) == 2
    assert "--data: pass JSON lines {question, choices: [...], label} or a SWAG CSV" in capsys.readouterr().err
    assert CLI.cli_ablate(["--task", "sst2", "--data", str(data), *base]) == 2
    assert "name its task type instead" in capsys.readouterr().err
    assert CLI.cli_ablate(["--task", "multilabel", "--data", str(data), *base]) == 2
    assert "unknown GLUE task 'multilabel'" in (err := capsys.readouterr().err) and "multi-label, token-class" in err
    data.write_text("only one cell\n")
    assert CLI.cli_ablate(["--task", "regression", "--data", str(data), *base]) == 2
    assert "dev.tsv:1: expected 'text<TAB>label'" in capsys.readouterr().err


TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _checkpoint_at_default_scale(path: Path, cls, **extra) -> Path:
    tokenizer = tiny_tokenizer()
    model = bert_with_head(cls, tokenizer, **extra)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_cli_token_classification_from_a_conll_file(tmp_path: Path, capsys) -> None:
    ckpt = _checkpoint_at_default_scale(
        tmp_path / "tagger",
        T.BertForTokenClassification,
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
    )
    (tmp_path / "dev.conll").write_text(CONLL_SAMPLE * 3)
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
    ckpt = _checkpoint_at_default_scale(tmp_path / "reader", T.BertForQuestionAnswering)
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
