"""Kovaleva's word-class attention and [CLS] targets against plain loops; UD and spaCy-style class flags."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertwatch.heads.capture import capture
from bertwatch.heads.roles import token_roles
from bertwatch.linguistics.syntax import encode, parse_conllu
from bertwatch.linguistics.wordclass import (
    WORD_CLASSES,
    class_attention,
    cls_targets,
    cls_targets_figure,
    spacy_word_classes,
    token_masks,
    ud_word_classes,
    wordclass_figure,
)
from tests.support.models import tiny_model
from tests.support.treebank import CONLLU, tiny_tokenizer


def test_word_classes_follow_kovaleva_sets() -> None:
    s1, s2, s3 = parse_conllu(CONLLU)
    c1 = ud_word_classes(s1)
    assert set(c1) == set(WORD_CLASSES)
    assert c1["noun"] == [False, True, False, False, True, False]
    assert c1["verb"] == [False, False, True, False, False, False]
    assert c1["subj"] == [False, True, False, False, False, False]
    assert c1["obj"] == [False, False, False, False, True, False]
    c2 = ud_word_classes(s2)
    assert c2["verb"] == [False, False, False, False, True, False, True, False, False]  # did (VBD), chase (VB)
    assert c2["pron"] == [False] * 7 + [True, False]
    assert c2["neg"] == [False] * 5 + [True, False, False, False]
    c3 = ud_word_classes(s3)
    assert c3["subj"] == [False, True, False, False, False, True] + [False] * 5  # nsubj:pass, obl:agent
    assert c3["neg"][7] and sum(c3["neg"]) == 1


def test_word_classes_fall_back_to_upos_without_ptb_tags() -> None:
    s1 = parse_conllu(CONLLU.replace("\tNNS\t", "\t_\t").replace("\tVBD\t", "\t_\t"))[0]
    assert ud_word_classes(s1)["noun"][1] and ud_word_classes(s1)["verb"][2]


def test_spacy_word_classes_with_duck_typed_tokens() -> None:
    doc = [
        SimpleNamespace(text=t, tag_=tag, pos_=pos, dep_=dep)
        for t, tag, pos, dep in [
            ("She", "PRP", "PRON", "nsubj"),
            ("did", "VBD", "AUX", "aux"),
            ("not", "RB", "PART", "neg"),
            ("see", "VB", "VERB", "ROOT"),
            ("dogs", "NNS", "NOUN", "dobj"),
            ("by", "IN", "ADP", "agent"),
        ]
    ]
    classes = spacy_word_classes(doc)
    assert classes["pron"] == [True, False, False, False, False, False]
    assert classes["verb"] == [False, True, False, True, False, False]
    assert classes["neg"] == [False, False, True, False, False, False]
    assert classes["subj"] == [True, False, False, False, False, True]
    assert classes["obj"] == [False, False, False, False, True, False]


def test_token_masks_mark_every_piece_of_a_word() -> None:
    word_ids = [[None, 0, 1, 1, 2, None], [None, 0, 0, None]]
    classes = [{"noun": [False, True, False]}, {"noun": [True]}]
    masks = token_masks(classes, word_ids, 7)
    assert masks["noun"].tolist() == [
        [False, False, True, True, False, False, False],
        [False, True, True, False, False, False, False],
    ]


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    b, l, h, t = 3, 2, 3, 7
    attn = rng.dirichlet(np.ones(t), size=(b, l, h, t)).astype(np.float32)
    real = np.ones((b, t), bool)
    real[1, 5:] = False
    real[2, 4:] = False
    attn[1, :, :, 5:] = 123.0  # junk in pad rows must not matter
    masks = {
        "a": np.array([[0, 1, 0, 1, 0, 0, 0], [0, 0, 1, 0, 0, 1, 1], [1, 0, 0, 0, 0, 0, 0]], bool),
        "empty": np.array([[0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0]], bool),
    }
    return attn, real, masks


@pytest.mark.parametrize("reduce", ["max", "sum"])
def test_class_attention_matches_loops(reduce: str) -> None:
    attn, real, masks = _batch()
    got = class_attention(
        torch.from_numpy(attn),
        torch.from_numpy(real),
        {k: torch.from_numpy(v) for k, v in masks.items()},
        reduce=reduce,
    )
    b_, l_, h_, t_ = attn.shape[:4]
    for name, mask in masks.items():
        assert got[name].shape == (b_, l_, h_)
        for b in range(b_):
            n = int(real[b].sum())
            targets = [j for j in range(n) if mask[b, j]]
            for l in range(l_):
                for h in range(h_):
                    value = got[name][b, l, h].item()
                    if not targets:
                        assert math.isnan(value)
                        continue
                    col = [sum(attn[b, l, h, i, j] for i in range(n)) / n for j in range(n)]
                    expected = max(col[j] for j in targets) if reduce == "max" else sum(col[j] for j in targets)
                    assert value == pytest.approx(expected, abs=1e-6)


def test_cls_targets_match_loops_and_need_cls() -> None:
    attn, real, masks = _batch(1)
    cls = np.zeros_like(real)
    cls[0, 0] = True
    cls[1, 2] = True
    got = cls_targets(torch.from_numpy(attn), torch.from_numpy(cls), {k: torch.from_numpy(v) for k, v in masks.items()})
    for name, mask in masks.items():
        for b in range(attn.shape[0]):
            row = int(np.argmax(cls[b]))
            for l in range(attn.shape[1]):
                for h in range(attn.shape[2]):
                    value = got[name][b, l, h].item()
                    targets = [j for j in range(attn.shape[-1]) if mask[b, j]]
                    if not cls[b].any() or not targets:
                        assert math.isnan(value)
                    else:
                        assert value == pytest.approx(max(attn[b, l, h, row, j] for j in targets))


def test_monitors_on_a_tiny_model_batch() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model("bert")
    sentences = parse_conllu(CONLLU)
    encoded, _ = encode(tokenizer, sentences, 512)
    batch = tokenizer([list(s.words) for s in sentences], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad(), capture(model) as cap:
        model(**batch)
    roles = token_roles(batch["input_ids"], batch["attention_mask"], tokenizer)
    masks = token_masks(
        [ud_word_classes(s) for s in sentences], [e.word_ids for e in encoded], batch["input_ids"].shape[1]
    )
    values = class_attention(cap.attentions, roles.real, masks)
    assert set(values) == set(WORD_CLASSES) and values["noun"].shape == (3, 3, 4)
    assert torch.isnan(values["neg"][0]).all() and not torch.isnan(values["neg"][1:]).any()
    assert bool((values["noun"] > 0).all()) and bool((values["noun"] <= 1).all())
    targets = cls_targets(cap.attentions, roles.cls, {"sep": roles.sep, **masks})
    single = cap.attentions[0, -1, :, 0, 9]
    torch.testing.assert_close(targets["sep"][0, -1], single)


def test_figures_write_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    grids = {name: rng.random((3, 4)) for name in WORD_CLASSES}
    ref = {name: rng.random((3, 4)) for name in WORD_CLASSES}
    diff = {k: grids[k] - ref[k] for k in grids}
    wordclass_figure({"model": grids, "reference": ref, "difference": diff}, tmp_path / "w.png")
    cls_targets_figure({"model": {k: v[-1] for k, v in grids.items()}}, tmp_path / "c.png")
    assert (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
