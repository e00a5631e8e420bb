"""The readers of the evaluation files of each task type (``bertwatch ablate --data``): good files as the rows they
hold, malformed ones refused with the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertwatch.data.files import (
    read_conll,
    read_labelled_texts,
    read_lines,
    read_multilabel,
    read_multiple_choice,
    read_squad,
)
from tests.support.task_cases import CONLL_SAMPLE

LABELS = ("sports", "finance", "weather")


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


@pytest.mark.fast
def test_read_conll_and_squad(tmp_path: Path) -> None:
    (tmp_path / "a.conll").write_text(CONLL_SAMPLE)
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
