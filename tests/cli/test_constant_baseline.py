"""``bertwatch ablate`` and ``bertwatch ship`` against the trivial baseline, end to end on a sentence-pair task: a
tiny BERT made to answer one class for every pair (its classifier's bias), on a set where that class is 70% of the
labels, is said first, in words and in JSON, to be no better than always giving that answer; a model whose
predictions match 90% of the labels is not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.cli import main
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import tiny_tokenizer, toy_texts

NAMES = ("different", "same")
COUNT = 80


def _predictions(model, tokenizer, rows) -> np.ndarray:
    with torch.inference_mode():
        found = [model(**tokenizer(r["text"], r["text_pair"], return_tensors="pt")).logits[0] for r in rows]
    return torch.stack(found).numpy()


def _case(root: Path, collapsed: bool) -> tuple[Path, Path, np.ndarray]:
    """A checkpoint, its pairs (JSON lines with class names) and their labels: collapsed answers 'same' for every
    pair on 70% 'same' labels; learned is right on 90% of pairs whose classes are about balanced."""
    tokenizer = tiny_tokenizer()
    model = bert_with_head(
        T.BertForSequenceClassification,
        tokenizer,
        seed=1,
        scale=0.3,
        num_labels=2,
        id2label=dict(enumerate(NAMES)),
        label2id={n: i for i, n in enumerate(NAMES)},
    ).eval()
    rows = toy_texts(COUNT, seed=3, pairs=True)
    rng = np.random.default_rng(0)
    if collapsed:
        with torch.no_grad():
            model.classifier.bias.copy_(torch.tensor([-1e3, 1e3]))
        labels = (rng.random(COUNT) < 0.7).astype(int)
    else:
        logits = _predictions(model, tokenizer, rows)
        with torch.no_grad():  # centre the logit difference so both classes are predicted about as often
            model.classifier.bias[1] -= float(np.median(logits[:, 1] - logits[:, 0]))
        predicted = _predictions(model, tokenizer, rows).argmax(-1)
        assert 0.3 < predicted.mean() < 0.7
        labels = np.where(rng.random(COUNT) < 0.9, predicted, 1 - predicted)
    folder = root / ("collapsed" if collapsed else "learned")
    model.save_pretrained(folder / "ckpt")
    tokenizer.save_pretrained(folder / "ckpt")
    data = folder / "dev.jsonl"
    data.write_text("".join(json.dumps({**r, "label": NAMES[y]}) + "\n" for r, y in zip(rows, labels)))
    return folder / "ckpt", data, labels


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[bool, tuple[Path, Path, np.ndarray]]:
    root = tmp_path_factory.mktemp("constant")
    return {collapsed: _case(root, collapsed) for collapsed in (True, False)}


def _ablate(ckpt: Path, data: Path, out: Path, capsys) -> tuple[list[str], dict]:
    argv = ["ablate", "--model", str(ckpt), "--task", "sequence-classification", "--data", str(data)]
    argv += [
        "--metric",
        "f1",
        "--out",
        str(out),
        "--resamples",
        "300",
        "--no-prune",
        "--no-keep-only",
        "--quiet",
        "--max-length",
        "64",
    ]
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines(), json.loads((out / "ablation.json").read_text())


def test_ablate_says_first_that_a_collapsed_model_is_no_better_than_the_constant(cases, tmp_path, capsys) -> None:
    ckpt, data, labels = cases[True]
    lines, doc = _ablate(ckpt, data, tmp_path / "out", capsys)
    p = labels.mean()
    assert lines[0].startswith("bertwatch ablate: this model is no better than always answering 'same' (F1 ")
    assert lines[0].endswith("(collapsed to one class): its ablation figures describe a model not worth shipping"), (
        lines[0]
    )
    labelled = f"labels: same {p:.1%}, different {1 - p:.1%}"
    assert lines[1] == f"bertwatch ablate: predicted: same 100.0%, different 0.0% (collapsed to one class); {labelled}"
    trivial = doc["trivial_baseline"]
    assert trivial["no_better_than_constant"] is True and trivial["collapsed_to_one_class"] is True
    assert trivial["constant_name"] == "same" and trivial["metric"] == "f1"
    assert trivial["value"] == pytest.approx(2 * p / (1 + p), rel=1e-12)  # always-positive F1
    assert trivial["values"][0] == pytest.approx(trivial["value"], rel=1e-12)
    assert trivial["sentence"] in lines[0]
    page = (tmp_path / "out" / "report.html").read_text()
    assert "this model is no better than always answering &#x27;same&#x27;" in page


def test_ablate_does_not_call_a_learned_model_no_better(cases, tmp_path, capsys) -> None:
    ckpt, data, labels = cases[False]
    lines, doc = _ablate(ckpt, data, tmp_path / "out", capsys)
    trivial = doc["trivial_baseline"]
    assert trivial["no_better_than_constant"] is False and trivial["collapsed_to_one_class"] is False
    assert trivial["ci_low"][0] > 0
    assert not any("no better than" in line for line in lines)
    assert lines[0].startswith("bertwatch ablate: sequence-classification [sequence-classification]")
    assert lines[1].startswith("  trivial baseline: better than always answering '")
    assert lines[2].startswith("  trivial baseline: predicted: ")


SHIP = ["--repeats", "1", "--resamples", "300", "--threads", "1", "--quiet", "--attribution-examples", "0"]


@pytest.mark.parametrize("collapsed", [True, False])
def test_ship_says_first_whether_the_model_beats_the_constant(cases, collapsed, tmp_path, capsys) -> None:
    ckpt, data, labels = cases[collapsed]
    out = tmp_path / "out"
    assert main(["ship", "--model", str(ckpt), "--data", str(data), "--out", str(out), *SHIP]) == 0
    lines = capsys.readouterr().out.splitlines()
    result = json.loads((out / "ship.json").read_text())
    assert result["no_better_than_constant"] is collapsed
    assert result["trivial_baseline"]["no_better_than_constant"] is collapsed
    majority = max(labels.mean(), 1 - labels.mean())
    assert result["trivial_baseline"]["value"] == pytest.approx(majority, rel=1e-12)  # accuracy: the majority share
    assert lines[0].startswith("bertwatch ship: exporting ")
    constant = result["trivial_baseline"]
    assert (
        f"; always answering '{constant['constant_name']}' scores accuracy {constant['value']:.3f} on them" in lines[0]
    )
    if collapsed:
        assert lines[1].startswith("bertwatch ship: this model is no better than always answering 'same' (accuracy ")
        assert lines[1].endswith("its ship figures describe a model not worth shipping")
        assert lines[2].startswith("bertwatch ship: predicted: same 100.0%, different 0.0% (collapsed to one class); ")
        assert all(row["vs_constant"]["no_better"] for row in result["variants"])
    else:
        assert not any("no better than" in line for line in lines)
        assert any(line.startswith("trivial baseline: better than always answering") for line in lines[:6])
        assert not result["variants"][0]["vs_constant"]["no_better"]
    header = next(line for line in lines if line.startswith("variant  "))
    assert f"vs always '{result['trivial_baseline']['constant_name']}' {majority:.4f} [95% CI]" in header
