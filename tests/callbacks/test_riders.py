"""Riders of BertWatchCallback's probe pass: word classes and [CLS] targets from token rules, and the head map
(JS distances, MDS) aligned between probe steps; against plain loops, then inside a real Trainer run."""

from __future__ import annotations

import glob

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from bertwatch.callbacks import BertWatchCallback, ExpertOptions
from bertwatch.callbacks.riders import WordClassPass, rule_word_classes
from bertwatch.heads.roles import TokenRoles
from bertwatch.linguistics.clustering import procrustes_align
from tests.support.tiny_trainer import tiny_tokenizer, toy_trainer


def test_token_rules():
    got = rule_word_classes(["[CLS]", "She", "did", "n't", "see", "him", "##self", "Ġthem", "▁it", "."])
    assert got["subj"] == [False, True] + [False] * 8
    assert got["obj"] == [False] * 5 + [True, False, True, False, False]
    assert got["pron"] == [False, True, False, False, False, True, False, True, True, False]
    assert got["neg"] == [False, False, False, True] + [False] * 6


def test_word_class_attention_matches_a_loop():
    tokens = [["[CLS]", "it", "was", "not", "them", "[SEP]"], ["[CLS]", "we", "saw", "[SEP]"]]
    real = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 0]], dtype=torch.bool)  # example 1 padded left+right
    cls = torch.zeros_like(real)
    cls[0, 0] = cls[1, 1] = True
    roles = TokenRoles(real, cls, torch.zeros_like(real), torch.zeros_like(real))
    g = torch.Generator().manual_seed(0)
    attn = torch.rand(2, 2, 3, 6, 6, generator=g)
    attn = attn / attn.sum(-1, keepdim=True)
    consumer = WordClassPass(tokens)
    consumer.consume((0, 1), attn, roles)
    grids = consumer.finish().grids
    want = {}
    for name in ("pron", "subj", "obj", "neg"):
        per_example, cls_rows = [], []
        for b in range(2):
            positions = [j for j in range(6) if real[b, j]]
            flags = rule_word_classes(tokens[b])[name]
            targets = [p for p, f in zip(positions, flags) if f]
            if not targets:
                continue
            a = attn[b].double().numpy()
            col = {j: sum(a[:, :, i, j] for i in positions) / len(positions) for j in targets}
            per_example.append(np.max(np.stack([col[j] for j in targets]), axis=0))
            first = positions[0]
            cls_rows.append(np.max(np.stack([a[:, :, first, j] for j in targets]), axis=0))
        nan = np.full((2, 3), np.nan)
        want[f"wordclass_{name}"] = np.mean(per_example, axis=0) if per_example else nan
        want[f"cls_target_{name}"] = np.mean(cls_rows, axis=0) if cls_rows else nan
    assert set(grids) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(grids[name], value, rtol=1e-5, equal_nan=True, err_msg=name)


def test_procrustes_recovers_a_rotation_reflection_and_shift():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(12, 2))
    angle = 1.1
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]]) @ np.diag([1, -1])
    moved = reference @ rotation + np.array([3.0, -2.0])
    np.testing.assert_allclose(procrustes_align(moved, reference), reference, atol=1e-10)


def test_word_classes_and_moving_head_map_in_a_training_run(tmp_path):
    tok = tiny_tokenizer()
    cb = BertWatchCallback(
        every_n_steps=2, num_probe_examples=8, num_maps=0, expert=ExpertOptions(word_classes=True, head_clusters=True)
    )
    cb.strict = True
    trainer = toy_trainer(tmp_path, [cb], tokenizer=tok, eval_strategy="no", logging_steps=1, report_to="tensorboard")
    trainer.train()
    acc = EventAccumulator(glob.glob(str(tmp_path / "runs" / "*"))[0], size_guidance={"tensors": 0})
    acc.Reload()
    tags = acc.Tags()["tensors"]
    assert {"bertwatch/heads/wordclass_neg", "bertwatch/heads/cls_target_pron"} <= set(tags)
    neg = [tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors("bertwatch/heads/wordclass_neg")]
    assert len(neg) >= 3 and all(g.shape == (2, 4) for g in neg)
    maps = [tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors("bertwatch/clustering/js_mds_training")]
    steps = [e.step for e in acc.Tensors("bertwatch/clustering/js_mds_training")]
    assert steps == sorted(set(steps)) and len(steps) >= 3
    for before, after in zip(maps, maps[1:]):  # each map is already the best rotation onto the one before
        np.testing.assert_allclose(procrustes_align(after, before), after, atol=1e-4)
