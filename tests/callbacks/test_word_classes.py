"""Word classes from UD annotations during training (BertWatchCallback(word_classes="x.conllu")): the class
definition, the per-class attention share against a plain numpy loop over eager attention maps, a Trainer run
that logs the classes at every probe step, the setup refusals, and the demo's EWT dev sentences."""

from __future__ import annotations

import contextlib
import glob
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from bertwatch.callbacks import BertWatchCallback, ExpertOptions, SetupError, WordClassProbe
from bertwatch.callbacks.word_classes import (
    SHARE_PREFIX,
    UDWordClassPass,
    build_word_class_batches,
    series_values,
)
from bertwatch.cli.demo import UD_DEV, UD_SENTENCES, ud_dev_file
from bertwatch.linguistics.syntax import parse_conllu, read_conllu
from bertwatch.linguistics.wordclass import UD_CLASSES, ud_classes
from bertwatch.options.groups import word_class_option
from bertwatch.probe.adapt import autocast_dtype, mixed_precision
from bertwatch.tb.writer import metadata as md
from tests.support.tiny_trainer import SPECIAL, WORDS, tiny_bert, toy_trainer
from tests.support.tolerance import assert_float32_close
from tests.support.treebank import CONLLU

TREEBANK_PIECES = ["dog", "##s", "chase", "##d", "cat", "did", "n", "'", "t", "s", "them", "was", "by"]

# The definition, written out independently of bertwatch.linguistics.wordclass.UD_CLASSES.
PLAIN = {
    "noun": lambda upos, rel, feats: upos in ("NOUN", "PROPN"),
    "verb": lambda upos, rel, feats: upos == "VERB",
    "pron": lambda upos, rel, feats: upos == "PRON",
    "det": lambda upos, rel, feats: upos == "DET",
    "subj": lambda upos, rel, feats: rel in ("nsubj", "csubj") or rel.startswith(("nsubj:", "csubj:")),
    "obj": lambda upos, rel, feats: rel in ("obj", "iobj") or rel.startswith(("obj:", "iobj:")),
    "neg": lambda upos, rel, feats: feats.get("Polarity") == "Neg" or feats.get("PronType") == "Neg",
    "punct": lambda upos, rel, feats: upos == "PUNCT",
}


def tokenizer() -> T.PreTrainedTokenizerBase:
    """A fast WordPiece tokenizer over the toy training words plus the pieces of the hand-made treebank."""
    words = SPECIAL + WORDS + [w for w in TREEBANK_PIECES if w not in WORDS]
    return T.BertTokenizer(vocab={w: i for i, w in enumerate(words)})


def treebank(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    return path


def test_ud_classes_follow_the_definition(tmp_path):
    s1, s2, s3 = read_conllu(treebank(tmp_path))
    assert len(s2) == 9 and len(s3) == 11  # multiword tokens split, the empty node 6.1 left out
    c2 = ud_classes(s2)
    assert set(c2) == set(UD_CLASSES) == set(PLAIN)
    assert c2["noun"] == [False, True, False, True, False, False, False, False, False]  # cat, dog
    assert c2["verb"] == [False] * 6 + [True, False, False]  # chase; "did" is AUX
    assert c2["neg"] == [False] * 5 + [True, False, False, False]  # n't
    assert c2["subj"] == [False] * 3 + [True] + [False] * 5
    assert c2["obj"] == [False] * 7 + [True, False] and c2["pron"] == c2["obj"]  # them
    assert c2["det"] == [True] + [False] * 8 and c2["punct"] == [False] * 8 + [True]
    c3 = ud_classes(s3)
    assert c3["subj"] == [False, True] + [False] * 9  # nsubj:pass; obl:agent is not a subject here
    assert c3["neg"] == [False] * 7 + [True, False, False, False]
    for sentence in (s1, s2, s3):
        got = ud_classes(sentence)
        for name, rule in PLAIN.items():
            assert got[name] == [rule(*w) for w in zip(sentence.upos, sentence.deprels, sentence.feats)], name
    assert all(f"{SHARE_PREFIX}{name}" in md.STAT_DESCRIPTIONS for name in UD_CLASSES)


def plain_shares(model, tok, sentences) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Per class: Σ over the class's pieces j of (1/n) Σ_i A[i, j] per sentence (float64 loops over eager maps),
    averaged over the sentences having the class; and the uniform head's n_c / n."""
    model.eval()
    per_class: dict[str, list[np.ndarray]] = {name: [] for name in PLAIN}
    uniform: dict[str, list[float]] = {name: [] for name in PLAIN}
    for sentence in sentences:
        enc = tok(list(sentence.words), is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            out = model.bert(**enc, output_attentions=True)
        attn = np.stack([a[0].double().numpy() for a in out.attentions])  # [L, H, n, n]
        layers, heads, n, _ = attn.shape
        word_ids = enc.word_ids()
        for name, rule in PLAIN.items():
            flags = [rule(*w) for w in zip(sentence.upos, sentence.deprels, sentence.feats)]
            pieces = [j for j in range(n) if word_ids[j] is not None and flags[word_ids[j]]]
            if not pieces:
                continue
            share = np.zeros((layers, heads))
            for layer in range(layers):
                for head in range(heads):
                    share[layer, head] = sum(attn[layer, head, i, j] for i in range(n) for j in pieces) / n
            per_class[name].append(share)
            uniform[name].append(len(pieces) / n)
    shares = {name: np.mean(v, axis=0) if v else np.full((layers, heads), np.nan) for name, v in per_class.items()}
    return shares, {name: float(np.mean(v)) if v else float("nan") for name, v in uniform.items()}


@pytest.mark.parametrize("precision", ["bf16", "fp16", None])
def test_the_pass_runs_under_the_trainings_mixed_precision(tmp_path, precision):
    tok = tokenizer()
    model = tiny_bert(tok, seed=3)
    data = build_word_class_batches(WordClassProbe(treebank(tmp_path), batch_size=2), tok, max_length=64)
    dtype = autocast_dtype(SimpleNamespace(bf16=precision == "bf16", fp16=precision == "fp16"))
    device = torch.device("cpu")
    monitor = SimpleNamespace(encoder=model, device=device, autocast=lambda: mixed_precision(device, dtype))
    seen = []
    model.register_forward_pre_hook(
        lambda *_: seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
    )
    UDWordClassPass(monitor, data).shares()
    want = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[precision]
    assert seen == [want] * len(data.batches)


def test_class_shares_match_a_numpy_loop(tmp_path):
    tok = tokenizer()
    model = tiny_bert(tok, seed=3)
    model.config._attn_implementation = "eager"
    data = build_word_class_batches(WordClassProbe(treebank(tmp_path), batch_size=2), tok, max_length=64)
    assert data.sentences == 3 and len(data.batches) == 2
    monitor = SimpleNamespace(encoder=model, device=torch.device("cpu"), autocast=contextlib.nullcontext)
    model.train()
    grids = UDWordClassPass(monitor, data).shares()
    assert model.training  # capture restored the mode
    want, uniform = plain_shares(model, tok, parse_conllu(CONLLU))
    assert set(grids) == {SHARE_PREFIX + name for name in PLAIN}
    for name, value in want.items():
        assert_float32_close(grids[SHARE_PREFIX + name], value, msg=name)
        np.testing.assert_allclose(data.uniform[name], uniform[name], rtol=1e-12, err_msg=name)
    assert not np.isnan(grids[SHARE_PREFIX + "neg"]).any()
    series = series_values(grids, data.uniform)
    assert_float32_close(series["noun"], float(np.mean(want["noun"])), msg="noun")
    assert series["noun_uniform"] == pytest.approx(uniform["noun"])


def test_first_sentences_that_fit(tmp_path):
    tok = tokenizer()
    path = treebank(tmp_path)
    lengths = [len(tok(list(s.words), is_split_into_words=True)["input_ids"]) for s in read_conllu(path)]
    assert lengths == [10, 14, 15]
    data = build_word_class_batches(WordClassProbe(path, num_sentences=2), tok, max_length=14)
    assert data.sentences == 2 and data.skipped["too_long"] == 0  # the third is not needed: not counted
    assert [b["input_ids"].shape for b in data.batches] == [(2, 14)]
    data = build_word_class_batches(WordClassProbe(path, num_sentences=1), tok, max_length=64)
    assert data.sentences == 1 and data.batches[0]["input_ids"].shape == (1, 10)
    s1, _, s3 = CONLLU.strip().split("\n\n")
    late = tmp_path / "late.conllu"
    late.write_text("\n\n".join([s3] * 4 + [s1]) + "\n\n", encoding="utf-8")  # past the first round of reading
    data = build_word_class_batches(WordClassProbe(late, num_sentences=1), tok, max_length=12)
    assert data.sentences == 1 and data.skipped["too_long"] == 4 and data.batches[0]["input_ids"].shape == (1, 10)


def test_setup_refusals(tmp_path):
    tok = tokenizer()
    with pytest.raises(SetupError, match="no CoNLL-U file"):
        build_word_class_batches(WordClassProbe(tmp_path / "missing.conllu"), tok, 64)
    (tmp_path / "empty.conllu").write_text("\n", encoding="utf-8")
    with pytest.raises(SetupError, match="holds no sentence"):
        build_word_class_batches(WordClassProbe(tmp_path / "empty.conllu"), tok, 64)
    (tmp_path / "bad.conllu").write_text("1\tdog\tdog\tNOUN\tNN\t_\t7\tnsubj\t_\t_\n\n", encoding="utf-8")
    with pytest.raises(SetupError, match="not valid CoNLL-U"):
        build_word_class_batches(WordClassProbe(tmp_path / "bad.conllu"), tok, 64)
    with pytest.raises(SetupError, match="none of the sentences .* fits: 3 longer than 8"):
        build_word_class_batches(WordClassProbe(treebank(tmp_path)), tok, 8)
    with pytest.raises(SetupError, match="holds no sentence"):
        build_word_class_batches(WordClassProbe(()), tok, 64)
    with pytest.raises(TypeError, match="word_classes must be"):
        BertWatchCallback(expert=ExpertOptions(word_classes=3))
    with pytest.raises(ValueError, match="num_sentences"):
        WordClassProbe("x.conllu", num_sentences=0)
    sentences = parse_conllu(CONLLU)
    assert word_class_option(sentences) == WordClassProbe(tuple(sentences))
    assert word_class_option(True) is True and word_class_option(None) is False


def run_trainer(tmp_path: Path, word_classes, **overrides) -> tuple[BertWatchCallback, T.Trainer]:
    tok = tokenizer()
    cb = BertWatchCallback(
        stats=("cls_mass",),
        every_n_steps=2,
        num_probe_examples=8,
        num_maps=0,
        **overrides,
        expert=ExpertOptions(word_classes=word_classes),
    )
    cb.strict = True
    trainer = toy_trainer(tmp_path, [cb], tokenizer=tok, eval_size=8, eval_strategy="no", logging_steps=1)
    cb.set_trainer(trainer)
    return cb, trainer


def test_training_run_logs_the_classes_at_every_probe_step(tmp_path):
    cb, trainer = run_trainer(tmp_path, str(treebank(tmp_path)), logging_dir=str(tmp_path / "tb"))
    trainer.train()
    acc = EventAccumulator(glob.glob(str(tmp_path / "tb"))[0], size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["tensors"])
    probe_steps = [e.step for e in acc.Tensors("bertwatch/heads/cls_mass")]
    assert probe_steps == [0, 2, 4, 6]
    for name in UD_CLASSES:
        events = acc.Tensors(f"bertwatch/heads/{SHARE_PREFIX}{name}")
        assert [e.step for e in events] == probe_steps, name
        assert all(tensor_util.make_ndarray(e.tensor_proto).shape == (2, 4) for e in events)
    assert f"bertwatch/series/{md.WORD_CLASS_SERIES}" in tags
    series = acc.Tensors(f"bertwatch/series/{md.WORD_CLASS_SERIES}")
    assert [e.step for e in series] == probe_steps
    scalars = acc.Scalars(f"bertwatch_series/{md.WORD_CLASS_SERIES}/noun")
    assert [e.step for e in scalars] == probe_steps
    assert "bertwatch/heads/wordclass_pron" not in tags  # the token rules only with word_classes=True
    last = tensor_util.make_ndarray(acc.Tensors(f"bertwatch/heads/{SHARE_PREFIX}verb")[-1].tensor_proto)
    monitor = SimpleNamespace(encoder=trainer.model, device=torch.device("cpu"), autocast=contextlib.nullcontext)
    now = UDWordClassPass(monitor, cb.word_class_batches).shares()[SHARE_PREFIX + "verb"]
    np.testing.assert_allclose(last, now, rtol=1e-5)  # the end step measured the trained model
    first = tensor_util.make_ndarray(acc.Tensors(f"bertwatch/heads/{SHARE_PREFIX}verb")[0].tensor_proto)
    assert not np.allclose(first, last)


def test_a_missing_treebank_stops_training_at_setup(tmp_path):
    cb, trainer = run_trainer(tmp_path, str(tmp_path / "nope.conllu"))
    with pytest.raises(SetupError, match="no CoNLL-U file"):
        trainer.train()


def test_demo_passes_the_ewt_dev_file(tmp_path, monkeypatch, data_dir, minilm_path):
    monkeypatch.delenv("BERTWATCH_DATA", raising=False)
    assert ud_dev_file(str(tmp_path)) is None and ud_dev_file(None) is None
    assert ud_dev_file(str(data_dir)) == data_dir / UD_DEV
    monkeypatch.setenv("BERTWATCH_DATA", str(data_dir))
    assert ud_dev_file(None) == data_dir / UD_DEV
    tok = T.AutoTokenizer.from_pretrained(minilm_path)
    data = build_word_class_batches(WordClassProbe(data_dir / UD_DEV, num_sentences=UD_SENTENCES), tok, 64)
    assert data.sentences == UD_SENTENCES and sum(len(b["input_ids"]) for b in data.batches) == UD_SENTENCES
    assert all(b["input_ids"].shape[1] <= 64 for b in data.batches)
    counts = {name: sum(int(m[name].sum()) for m in data.masks) for name in UD_CLASSES}
    assert all(count > 0 for count in counts.values()), counts
    assert all(0 < data.uniform[name] < 1 for name in UD_CLASSES)
