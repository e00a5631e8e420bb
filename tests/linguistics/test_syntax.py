"""Syntax heads: CoNLL-U reading, word alignment, Clark's head accuracy and offset baseline vs plain loops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from bertwatch.cli.probe_syntax import cli_probe_syntax
from bertwatch.heads.capture import capture
from bertwatch.linguistics.syntax import (
    DIRECTIONS,
    OFFSETS,
    HeadAccuracy,
    attention_batches,
    encode,
    parse_conllu,
    predict_heads,
    read_conllu,
    relation,
    syntax_figure,
)
from tests.support.models import tiny_model
from tests.support.treebank import CONLLU, tiny_tokenizer

REPO = Path(__file__).resolve().parents[2]


def _data_dir() -> Path:
    return Path(os.environ.get("BERTWATCH_DATA") or REPO.parent / "shared" / "data")


def _random_word_maps(sentences, layers=3, heads=4, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    maps = []
    for s in sentences:
        w = len(s) + 2
        maps.append(rng.dirichlet(np.ones(w), size=(layers, heads, w)).astype(np.float32))
    return maps


def _argmax_first(values) -> int:
    best, arg = -np.inf, 0
    for j, v in enumerate(values):
        if v > best:
            best, arg = v, j
    return arg


def _plain_scores(maps, sentences, subtypes=False):
    """Per relation: count, correct[2][L][H] by loops over heads, directions and words, and offset hits."""
    out: dict[str, dict] = {}
    for m, s in zip(maps, sentences):
        layers, heads, w, _ = m.shape
        n = w - 2
        for i in range(n):
            gold = s.heads[i] - 1
            rels = ["all", s.deprels[i] if subtypes else s.deprels[i].split(":")[0]]
            for rel in rels:
                entry = out.setdefault(
                    rel, {"count": 0, "correct": np.zeros((2, layers, heads)), "offsets": np.zeros(len(OFFSETS))}
                )
                entry["count"] += 1
                for k, off in enumerate(OFFSETS):
                    if 0 <= i + off < n and i + off == gold:
                        entry["offsets"][k] += 1
                for l in range(layers):
                    for h in range(heads):
                        a = m[l, h, 1 : n + 1, 1 : n + 1].copy()
                        for t in range(n):
                            a[t, t] = 0.0
                        if _argmax_first(a[i, :]) == gold:
                            entry["correct"][0, l, h] += 1
                        if _argmax_first(a[:, i]) == gold:
                            entry["correct"][1, l, h] += 1
    return out


def test_reader_skips_multiword_ranges_and_empty_nodes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    sentences = read_conllu(path)
    assert [s.sent_id for s in sentences] == ["s1", "s2", "s3"]
    assert sentences[1].words == ("The", "cat", "'s", "dog", "did", "n't", "chase", "them", ".")
    assert sentences[1].heads == (2, 4, 2, 7, 7, 7, 0, 7, 7)
    assert len(sentences[2]) == 11 and "chased" not in sentences[2].words[6:]
    assert sentences[2].punct == tuple(w in {",", "."} for w in sentences[2].words)
    assert sentences[1].feats[5] == {"Polarity": "Neg"}
    assert [len(s) for s in read_conllu(path, limit=2)] == [6, 9]
    with pytest.raises(FileNotFoundError, match="CoNLL-U"):
        read_conllu(tmp_path / "missing.conllu")


def test_relation_base_and_subtypes() -> None:
    assert relation("nmod:poss") == "nmod"
    assert relation("nmod:poss", subtypes=True) == "nmod:poss"
    assert relation("det") == "det"


def test_encode_aligns_words_and_counts_skips() -> None:
    tokenizer = tiny_tokenizer()
    sentences = parse_conllu(CONLLU)
    encoded, skipped = encode(tokenizer, sentences, max_length=512)
    assert skipped == {"too_long": 0, "unaligned": 0}
    first = encoded[0]
    assert tokenizer.convert_ids_to_tokens(list(first.input_ids)) == [
        "[CLS]",
        "the",
        "dog",
        "##s",
        "chase",
        "##d",
        "a",
        "cat",
        ".",
        "[SEP]",
    ]
    assert first.groups == ((0,), (1,), (2, 3), (4, 5), (6,), (7,), (8,), (9,))
    assert [e.index for e in encoded] == [0, 1, 2]

    encoded, skipped = encode(tokenizer, sentences, max_length=12)
    assert skipped["too_long"] == 2 and [e.index for e in encoded] == [0]

    odd = parse_conllu(CONLLU.replace("\tthem\tthey", "\t\u200b\tthey"))
    encoded, skipped = encode(tokenizer, odd, max_length=512)
    assert skipped["unaligned"] == 1 and [e.index for e in encoded] == [0, 2]


def test_batched_word_maps_match_single_examples_by_loops() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model("bert")
    encoded, _ = encode(tokenizer, parse_conllu(CONLLU), 512)
    seen = 0
    for batch in attention_batches(model, tokenizer, encoded, batch_size=2, progress=False):
        for b, item in enumerate(batch.items):
            with torch.no_grad(), capture(model) as cap:
                model(input_ids=torch.tensor([item.input_ids]))
            single = cap.attentions[0].numpy()
            groups = item.groups
            expected = np.zeros(single.shape[:2] + (len(groups), len(groups)))
            for wi, gi in enumerate(groups):
                for wj, gj in enumerate(groups):
                    expected[:, :, wi, wj] = np.mean([single[:, :, p, gj].sum(-1) for p in gi], axis=0)
            np.testing.assert_allclose(batch.word_map(b).numpy(), expected, atol=1e-5)
            first = batch.word_map(b, "first").numpy()
            np.testing.assert_allclose(first[:, :, 2, 1], single[:, :, groups[2][0], groups[1]].sum(-1), atol=1e-5)
            seen += 1
    assert seen == 3


def test_predict_heads_matches_loops_and_breaks_ties_to_the_first_word() -> None:
    sentences = parse_conllu(CONLLU)
    maps = _random_word_maps(sentences)
    for m in maps:
        pred = predict_heads(m)
        n = m.shape[-1] - 2
        for l in range(m.shape[0]):
            for h in range(m.shape[1]):
                a = m[l, h, 1:-1, 1:-1].copy()
                np.fill_diagonal(a, 0)
                for i in range(n):
                    assert pred[0, l, h, i] == _argmax_first(a[i])
                    assert pred[1, l, h, i] == _argmax_first(a[:, i])
    only_specials = np.zeros((1, 1, 5, 5), np.float32)
    only_specials[..., 0] = 1.0
    assert predict_heads(only_specials)[0, 0, 0].tolist() == [0, 0, 0]


@pytest.mark.parametrize("subtypes", [False, True])
def test_head_accuracy_and_baseline_match_plain_loops(subtypes: bool) -> None:
    sentences = parse_conllu(CONLLU)
    maps = _random_word_maps(sentences, seed=3)
    acc = HeadAccuracy(3, 4, subtypes=subtypes)
    for m, s in zip(maps, sentences):
        acc.add(torch.from_numpy(m), s)
    result = acc.result()
    plain = _plain_scores(maps, sentences, subtypes)
    assert set(result) == set(plain)
    assert list(result)[0] == "all" and result["all"]["count"] == 26
    assert ("nmod:poss" in result) == subtypes and ("nsubj" in result)
    for rel, entry in plain.items():
        got = result[rel]
        rates = entry["correct"] / entry["count"]
        assert got["count"] == entry["count"]
        np.testing.assert_allclose(np.array([got["accuracy"][d] for d in DIRECTIONS]), rates, atol=1e-5)
        d, l, h = np.unravel_index(np.argmax(rates), rates.shape)
        assert (DIRECTIONS[d], l, h) == (got["direction"], got["best_layer"], got["best_head"])
        assert got["best_accuracy"] == pytest.approx(rates.max())
        assert got["baseline_accuracy"] == pytest.approx(entry["offsets"].max() / entry["count"])
        assert got["baseline_offset"] == OFFSETS[int(np.argmax(entry["offsets"]))]
    assert result["root"]["best_accuracy"] == 0.0
    assert result["det"]["baseline_offset"] == 1 and result["det"]["baseline_accuracy"] == 1.0


def test_head_accuracy_finds_a_planted_head() -> None:
    sentences = parse_conllu(CONLLU)
    maps = _random_word_maps(sentences, seed=5)
    for m, s in zip(maps, sentences):
        for i, head in enumerate(s.heads):
            if s.deprels[i] == "det":
                m[2, 1, i + 1, head] = 50.0
    acc = HeadAccuracy(3, 4)
    for m, s in zip(maps, sentences):
        acc.add(m, s)
    det = acc.result()["det"]
    assert (det["best_layer"], det["best_head"], det["direction"], det["best_accuracy"]) == (2, 1, "dep->head", 1.0)
    with pytest.raises(ValueError, match="does not fit"):
        acc.add(maps[0], sentences[1])


def test_syntax_figure_writes_png(tmp_path: Path) -> None:
    sentences = parse_conllu(CONLLU)
    acc = HeadAccuracy(3, 4)
    for m, s in zip(_random_word_maps(sentences), sentences):
        acc.add(m, s)
    path = syntax_figure(acc.result(), tmp_path / "syntax.png", min_count=2)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_probe_syntax_on_minilm_and_ud_dev(tmp_path: Path) -> None:
    dev = _data_dir() / "ud_english_ewt" / "en_ewt-ud-dev.conllu"
    assert dev.is_file(), f"UD English-EWT dev not found at {dev}; set BERTWATCH_DATA to the shared data folder"
    out = tmp_path / "out"
    code = cli_probe_syntax(
        [
            "--model",
            "minilm",
            "--conllu",
            str(dev),
            "--limit",
            "50",
            "--out",
            str(out),
            "--probe-train-limit",
            "50",
            "--cluster-limit",
            "20",
            "--min-count",
            "20",
            "--quiet",
        ]
    )
    assert code == 0
    result = json.loads((out / "syntax.json").read_text())
    assert (result["layers"], result["heads"], result["num_sentences"]) == (6, 12, 50)
    gold: dict[str, int] = {}
    for s in read_conllu(dev, 50):
        for r in s.deprels:
            gold[relation(r)] = gold.get(relation(r), 0) + 1
    relations = result["relations"]
    assert set(relations) == set(gold) | {"all"}
    assert relations["all"]["count"] == sum(gold.values())
    for name, r in relations.items():
        assert r["count"] == (sum(gold.values()) if name == "all" else gold[name])
        assert {"best_layer", "best_head", "best_accuracy", "direction", "baseline_accuracy"} <= set(r)
        assert 0 <= r["best_layer"] < 6 and 0 <= r["best_head"] < 12 and 0 <= r["best_accuracy"] <= 1
    assert relations["det"]["best_accuracy"] > relations["det"]["baseline_accuracy"] + 0.1
    assert relations["obj"]["best_accuracy"] > relations["obj"]["baseline_accuracy"] + 0.1

    probes = json.loads((out / "probes.json").read_text())
    assert probes["train_sentences"] == 50 and probes["dev_sentences"] == 50
    assert probes["uas"]["attention+embeddings"] > probes["uas"]["right-branching"]
    wordclass = json.loads((out / "wordclass.json").read_text())
    assert set(wordclass["classes"]) == {"noun", "verb", "pron", "subj", "obj", "neg"}
    assert wordclass["cls_targets_layer"] == 5
    for name in ("syntax.png", "wordclass.png", "cls_targets.png", "clustering.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "Syntactic heads" in (out / "linguistics.html").read_text()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out))
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {
        "bertwatch/heads/syntax_all",
        "bertwatch/heads/syntax_det",
        "bertwatch/heads/wordclass_noun",
        "bertwatch/heads/cls_target_sep",
        "bertwatch/clustering/js_mds",
    } <= tags
    grid = events.Tensors("bertwatch/heads/syntax_det")[0].tensor_proto
    assert [d.size for d in grid.tensor_shape.dim] == [6, 12]
