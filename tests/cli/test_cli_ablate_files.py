"""``bertwatch ablate --task`` for every task type with a local file: the readers (good and malformed files) and
the command end to end, its baseline checked against a plain evaluation written here (one example at a time)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.cli import ablate as CLI
from bertwatch.data.files import read_labelled_texts, read_lines, read_multilabel, read_multiple_choice
from tests.support.models import bert_with_head
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


# ------------------------------------------------------------------------------------------ readers


@pytest.mark.fast
def test_read_multiple_choice_jsonl_and_swag_csv(tmp_path: Path) -> None:
    good = tmp_path / "mc.jsonl"
    good.write_text(
        '{"question": "she opened the door", "choices": ["and left", "and ate it"], "label": 0}\n'
        "\n"
        '{"context": "a film", "question": "was it", "endings": ["good", "bad"], "label": "bad"}\n'
    )
    assert read_multiple_choice(good) == [
        {"question": "she opened the door", "choices": ["and left", "and ate it"], "label": 0},
        {"question": "a film was it", "choices": ["good", "bad"], "label": 1},
    ]
    assert len(read_multiple_choice(good, limit=1)) == 1
    swag = tmp_path / "val.csv"
    swag.write_text(
        "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,label\n"
        'v1,0,x,"She sits, smiling.",She,gold,laughs.,cries.,sleeps.,2\n'
    )
    assert read_multiple_choice(swag) == [
        {"question": "She sits, smiling.", "choices": ["She laughs.", "She cries.", "She sleeps."], "label": 2}
    ]
    bad = {
        '{"question": "q", "choices": ["a", "b"], "label": 2}\n': r"mc\.jsonl:1: label 2 is not the index \(0\.\.1\)",
        '{"question": "q", "choices": ["a", "b"], "label": 0}\n{"question": "q", "choices": ["a"], "label": 0}\n': (
            r"mc\.jsonl:2: expected 'choices', a list of at least two texts"
        ),
        '{"question": "q", "choices": ["a", "b"], "label": 0}\n{"question": "q", "choices": ["a", "b", "c"], '
        '"label": 0}\n': r"mc\.jsonl:2: 3 choices, but the first question has 2",
        '{"question": "q", "choices": ["a", "b"]}\n': r"mc\.jsonl:1: no 'label'",
        '{"question": "q", "choices": ["a", "b"], "label": 0}\n{"question": "q",\n': r"mc\.jsonl:2: not a JSON object",
        '"a question"\n': r"mc\.jsonl:1: expected a JSON object .* got str",
        '[{"question": "q", "choices": ["a", "b"], "label": 0}, 3]': r"mc\.jsonl: item 1: expected a JSON object",
        "\n\n": r"holds no questions",
    }
    for text, message in bad.items():
        good.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_multiple_choice(good)
    swag.write_text("sent1,sent2,ending0,label\nx,y,z,0\n")
    with pytest.raises(ValueError, match=r"val\.csv:1: a SWAG CSV needs .*ending1"):
        read_multiple_choice(swag)
    swag.write_text("sent1,sent2,ending0,ending1,label\nx,y,z,w,0\nx,y,z\n")
    with pytest.raises(ValueError, match=r"val\.csv:3: expected 5 comma-separated cells"):
        read_multiple_choice(swag)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_multiple_choice(tmp_path / "missing.jsonl")


@pytest.mark.fast
def test_read_multilabel_jsonl_and_tsv(tmp_path: Path) -> None:
    jsonl = tmp_path / "ml.jsonl"
    jsonl.write_text('{"text": "a b", "labels": ["finance", 2]}\n{"text": "c", "text_pair": "d", "labels": []}\n')
    assert read_multilabel(jsonl, LABELS) == [
        {"text": "a b", "text_pair": None, "label": [0, 1, 1]},
        {"text": "c", "text_pair": "d", "label": [0, 0, 0]},
    ]
    tsv = tmp_path / "ml.tsv"
    tsv.write_text('text\tlabels\n"quoted" text\tsports, weather\nnone apply\t\n')
    assert read_multilabel(tsv, LABELS) == [
        {"text": '"quoted" text', "text_pair": None, "label": [1, 0, 1]},
        {"text": "none apply", "text_pair": None, "label": [0, 0, 0]},
    ]
    tsv.write_text("a\tsports\nb\tpolitics\n")
    with pytest.raises(ValueError, match=r"ml\.tsv:2: label 'politics' is neither a class index 0\.\.2 nor one of"):
        read_multilabel(tsv, LABELS)
    tsv.write_text("a\tb\tc\tsports\n")
    with pytest.raises(ValueError, match=r"ml\.tsv:1: expected 'text<TAB>label' .* got 4 tab-separated cells"):
        read_multilabel(tsv, LABELS)
    jsonl.write_text('{"text": "a", "labels": "sports"}\n{"text": "a", "labels": 7}\n')
    with pytest.raises(ValueError, match=r"ml\.jsonl:2: expected 'labels', a list"):
        read_multilabel(jsonl, LABELS)
    jsonl.write_text('{"sentence1": "a", "labels": []}\n')
    with pytest.raises(ValueError, match=r"ml\.jsonl:1: no 'text' string"):
        read_multilabel(jsonl, LABELS)
    with pytest.raises(ValueError, match="label names"):
        read_multilabel(jsonl, ())


@pytest.mark.fast
def test_read_labelled_texts_and_lines(tmp_path: Path) -> None:
    tsv = tmp_path / "dev.tsv"
    tsv.write_text("a film\tpositive\nits plot\tthe actors\t0\n")
    assert read_labelled_texts(tsv, ("negative", "positive")) == [
        {"text": "a film", "text_pair": None, "label": 1},
        {"text": "its plot", "text_pair": "the actors", "label": 0},
    ]
    tsv.write_text("a\t3.5\nb\t-1e-2\n")
    assert [r["label"] for r in read_labelled_texts(tsv, regression=True)] == [3.5, -0.01]
    tsv.write_text("a\t3.5\nb\tnan\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:2: label 'nan' is not a finite number"):
        read_labelled_texts(tsv, regression=True)
    tsv.write_text("a\t1\nb\t\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:2: no label"):
        read_labelled_texts(tsv, ("no", "yes"))
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 1.5}\n')
    with pytest.raises(ValueError, match=r"dev\.jsonl:2: label 1\.5 is neither a class index 0\.\.1"):
        read_labelled_texts(jsonl, ("no", "yes"))
    jsonl.write_text('{"text": "a", "label": true}\n')
    with pytest.raises(ValueError, match=r"dev\.jsonl:1: label True"):
        read_labelled_texts(jsonl, ("no", "yes"))
    text = tmp_path / "corpus.txt"
    text.write_text("the movie was good .\n\n  a film\twith tabs  \n")
    assert read_lines(text) == [{"text": "the movie was good ."}, {"text": "a film\twith tabs"}]
    assert read_lines(text, limit=1) == [{"text": "the movie was good ."}]
    text.write_text("\n \n")
    with pytest.raises(ValueError, match="holds no lines of text"):
        read_lines(text)


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
