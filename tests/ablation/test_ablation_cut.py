"""No silent cut in the ablation: evaluation texts longer than the length the sweep measures are cut to it, said
in one ``BertWatchWarning`` at setup (how many, to what length) on every task path, and recorded in ablation.json
(``config``: ``max_length``, ``cut_examples``); tokenized examples are never cut."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import transformers as T

from bertwatch.ablation import sweep as SW
from bertwatch.ablation.settings import AblationSettings
from bertwatch.ablation.task_types import sweep_examples
from bertwatch.callbacks import BertWatchWarning
from bertwatch.report.result import AblationResult
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import WORDS, tiny_tokenizer

LENGTH = 16
TAGS = ("O", "B-PER", "I-PER")


def _words(rng: np.random.Generator, count: int) -> list[str]:
    return [str(w) for w in rng.choice(WORDS, size=count)]


def _rows(kind: str, seed: int = 0) -> list[dict]:
    """Ten examples of a task's layout, of 1 to 30 words: some longer than ``LENGTH`` tokens, some not."""
    rng = np.random.default_rng(seed)
    sizes = [1, 30, 5, 14, 13, 20, 2, 9, 25, 3]
    if kind == "text":
        return [{"text": " ".join(_words(rng, n)), "label": i % 2} for i, n in enumerate(sizes)]
    if kind == "pair":
        return [
            {"sentence1": " ".join(_words(rng, n)), "sentence2": " ".join(_words(rng, 3)), "label": i % 2}
            for i, n in enumerate(sizes)
        ]
    if kind == "tokens":
        return [{"tokens": _words(rng, n), "tags": [str(t) for t in rng.choice(TAGS, size=n)]} for n in sizes]
    if kind == "choices":
        return [
            {"question": " ".join(_words(rng, n)), "choices": [" ".join(_words(rng, 2)) for _ in range(2)], "label": 0}
            for n in sizes
        ]
    return [{"text": " ".join(_words(rng, n))} for n in sizes]


def _whole_lengths(kind: str, rows: list[dict], tok) -> list[int]:
    """Each example's length untruncated (for multiple choice, its longest choice): the plain count's input."""
    if kind == "text" or kind == "mlm":
        return [len(tok(r["text"])["input_ids"]) for r in rows]
    if kind == "pair":
        return [len(tok(r["sentence1"], r["sentence2"])["input_ids"]) for r in rows]
    if kind == "tokens":
        return [len(tok(r["tokens"], is_split_into_words=True)["input_ids"]) for r in rows]
    return [max(len(tok(r["question"], c)["input_ids"]) for c in r["choices"]) for r in rows]


MODELS = {
    "text": (T.BertForSequenceClassification, None),
    "pair": (T.BertForSequenceClassification, None),
    "tokens": (T.BertForTokenClassification, "token-classification"),
    "choices": (T.BertForMultipleChoice, None),
    "mlm": (T.BertForMaskedLM, "mlm"),
}


def _examples(kind: str, rows: list[dict], max_length: int):
    tok = tiny_tokenizer()
    cls, task = MODELS[kind]
    extra = {"id2label": dict(enumerate(TAGS))} if kind == "tokens" else {}
    model = bert_with_head(cls, tok, 2, 4, seed=0, **extra).eval()
    settings = AblationSettings(max_length=max_length, task=task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = sweep_examples(model, rows, tok, settings)
    return found, [str(w.message) for w in caught if issubclass(w.category, BertWatchWarning)]


@pytest.mark.fast
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_task_path_counts_and_says_its_cut(kind: str) -> None:
    tok = tiny_tokenizer()
    rows = _rows(kind)
    longer = sum(n > LENGTH for n in _whole_lengths(kind, rows, tok))
    assert 0 < longer < len(rows)
    (_, _, features, _, _, cut), said = _examples(kind, rows, LENGTH)
    assert cut == longer
    assert len(said) == 1, said
    assert f"{longer} of {len(rows)} evaluation examples are longer than {LENGTH} tokens (max_length)" in said[0]
    assert "cut_examples" in said[0]
    ids = [f["input_ids"] for f in features]
    flat = [c for x in ids for c in (x if isinstance(x[0], list) else [x])]
    assert max(len(x) for x in flat) == LENGTH
    (_, _, _, _, _, cut), said = _examples(kind, rows, 64)
    assert cut == 0 and not said


@pytest.mark.fast
def test_an_example_of_exactly_the_length_is_not_cut() -> None:
    tok = tiny_tokenizer()
    rows = _rows("text")
    lengths = _whole_lengths("text", rows, tok)
    exact = sorted(lengths)[-4]
    assert sum(n > exact for n in lengths) == 3 and lengths.count(exact) == 1
    (_, _, _, _, _, cut), said = _examples("text", rows, exact)
    assert cut == 3 and "3 of 10" in said[0]


@pytest.mark.fast
def test_the_models_maximum_is_named_when_it_caps_the_length() -> None:
    rows = [{"text": " ".join(WORDS[i % len(WORDS)] for i in range(80)), "label": 0}, {"text": "good", "label": 1}]
    (_, _, _, _, _, cut), said = _examples("text", rows, 128)  # above the model's 64 positions
    assert cut == 1 and "1 of 2 evaluation examples are longer than 64 tokens (the model's maximum)" in said[0]
    assert "pass shorter examples" in said[0]


@pytest.mark.fast
def test_tokenized_examples_are_never_cut() -> None:
    tok = tiny_tokenizer()
    rows = [{**dict(tok(r["text"])), "label": r["label"]} for r in _rows("text")]
    (_, _, features, _, _, cut), said = _examples("text", rows, LENGTH)
    assert cut == 0 and not said and max(len(f["input_ids"]) for f in features) > LENGTH


def test_ablation_json_records_the_length_and_the_count(tmp_path) -> None:
    tok = tiny_tokenizer()
    rows = _rows("text")
    longer = sum(n > LENGTH for n in _whole_lengths("text", rows, tok))
    model = bert_with_head(T.BertForSequenceClassification, tok, 2, 4, seed=0).eval()
    with pytest.warns(BertWatchWarning, match=f"{longer} of 10 evaluation examples") as caught:
        SW.ablate(
            model, rows, tok, max_length=LENGTH, n_resamples=10, keep_only=False, out_dir=tmp_path, progress=False
        )
    assert sum(issubclass(w.category, BertWatchWarning) for w in caught) == 1
    doc = json.loads((tmp_path / "ablation.json").read_text())
    assert doc["config"]["max_length"] == LENGTH and doc["config"]["cut_examples"] == longer
    assert AblationResult.from_json(doc).config["cut_examples"] == longer
    del doc["config"]["cut_examples"]  # a file written before the count was recorded still loads
    assert AblationResult.from_json(doc).config["max_length"] == LENGTH
