"""No silent skip: the UD word-class pass and ``bertwatch probe-syntax`` leave out sentences longer than their
length limit (never cut them) and sentences the tokenizer does not align to words; whenever one is left out, one
warning at setup says how many, why, the length, and which sentences were measured."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from bertwatch.callbacks import BertWatchWarning, WordClassProbe
from bertwatch.callbacks.word_classes import build_word_class_batches
from bertwatch.cli.probe_syntax import cli_probe_syntax
from tests.support.models import tiny_model
from tests.support.treebank import CONLLU, tiny_tokenizer

#: Word pieces of the treebank's sentences with [CLS] and [SEP] (tiny_tokenizer): 10, 14 and 15.
LENGTHS = (10, 14, 15)


def _treebank(tmp_path: Path, text: str = CONLLU) -> Path:
    path = tmp_path / "tiny.conllu"
    path.write_text(text, encoding="utf-8")
    return path


def _build(probe: WordClassProbe, max_length: int):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = build_word_class_batches(probe, tiny_tokenizer(), max_length)
    return data, [str(w.message) for w in caught if issubclass(w.category, BertWatchWarning)]


@pytest.mark.fast
def test_word_classes_warn_once_with_the_counts_and_the_length(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    from bertwatch.linguistics.syntax import parse_conllu

    assert tuple(len(tok(list(s.words), is_split_into_words=True)["input_ids"]) for s in parse_conllu(CONLLU)) == (
        LENGTHS
    )
    data, said = _build(WordClassProbe(_treebank(tmp_path)), max_length=12)
    assert data.sentences == 1 and data.skipped == {"too_long": 2, "unaligned": 0}
    assert len(said) == 1
    assert "skipped 2 of the first 3 sentences" in said[0] and "2 longer than 12 word pieces" in said[0]
    assert "the 1 sentences of at most 12 word pieces" in said[0] and "never cut" in said[0]
    assert "probing=ProbeOptions(max_length=...)" in said[0]


@pytest.mark.fast
def test_word_classes_say_unaligned_sentences(tmp_path: Path) -> None:
    odd = _treebank(tmp_path, CONLLU.replace("\tthem\tthey", "\t\u200b\tthey"))
    data, said = _build(WordClassProbe(odd), max_length=64)
    assert data.sentences == 2 and data.skipped == {"too_long": 0, "unaligned": 1}
    assert len(said) == 1 and "1 not aligned to words" in said[0] and "longer than" not in said[0]


@pytest.mark.fast
def test_word_classes_stay_quiet_when_nothing_is_left_out(tmp_path: Path) -> None:
    data, said = _build(WordClassProbe(_treebank(tmp_path)), max_length=64)
    assert data.sentences == 3 and not said
    data, said = _build(WordClassProbe(_treebank(tmp_path), num_sentences=2), max_length=14)
    assert data.sentences == 2 and not said, "a sentence after the ones used is not left out of anything"


def _saved_model(tmp_path: Path) -> Path:
    path = tmp_path / "model"
    tiny_model("bert").save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def test_probe_syntax_says_skipped_sentences_on_the_console(tmp_path: Path, capsys) -> None:
    args = ["--model", str(_saved_model(tmp_path)), "--conllu", str(_treebank(tmp_path)), "--out", str(tmp_path / "o")]
    args += ["--no-probes", "--no-wordclass", "--cluster-limit", "0", "--device", "cpu", "--quiet"]
    assert cli_probe_syntax([*args, "--max-length", "12"]) == 0
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("warning:")]
    assert re.search(r"skipped 2 of the first 3 sentences \(2 longer than 12 word pieces\)", line)
    assert "--max-length" in line
    assert cli_probe_syntax([*args, "--max-length", "64"]) == 0
    assert "warning:" not in capsys.readouterr().err
