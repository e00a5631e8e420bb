"""Batch invariance of the two linguistic batching paths, generated: the UD word-class pass of the callback
(``word_classes="dev.conllu"``) and ``probe-syntax``'s attention batches give each sentence the word-level maps and
class shares it has ALONE (unpadded, float64 eager loops written here from docs/linguistics.md), whatever the
batch size, the order of the sentences, their neighbours and the tokenizer's padding side.

Sentences are drawn by hypothesis (profiles in tests/conftest.py; a failure prints its replay): random words that
split into several word pieces, unknown words, punctuation anywhere, random UPOS / relations / negation, lengths
from one word to past the measured length (those are skipped, so the oracle skips them too).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from bertwatch.callbacks.word_classes import (  # noqa: E402
    SHARE_PREFIX,
    UDWordClassPass,
    WordClassProbe,
    build_word_class_batches,  # noqa: E402
)
from bertwatch.linguistics.syntax import Sentence, attention_batches, encode  # noqa: E402
from tests.callbacks.test_word_classes import PLAIN  # noqa: E402
from tests.heads.test_capture_support import tiny_encoder  # noqa: E402
from tests.support.alone_oracle import eager_copy  # noqa: E402
from tests.support.property import ORDERS, PADDING_SIDES  # noqa: E402
from tests.support.treebank import tiny_tokenizer  # noqa: E402

FAMILIES = ("bert", "roberta", "distilbert", "electra", "deberta-v2")
#: Words of the tiny treebank vocabulary: whole ones, ones split into pieces (dogs, chased, didn't), unknown ones.
WORD_POOL = ("the", "dogs", "chased", "a", "cat", "cats", "dog", ".", ",", "did", "n't", "them", "was", "by", "not")
WORD_POOL += ("chase", "zebra", "dogsd", "!")
UPOS = ("NOUN", "PROPN", "VERB", "PRON", "DET", "PUNCT", "AUX", "ADP", "PART")
DEPRELS = ("nsubj", "csubj:pass", "nsubj:pass", "obj", "iobj", "det", "punct", "root", "obl:agent", "advmod")
FEATS = ({}, {}, {"Polarity": "Neg"}, {"PronType": "Neg"}, {"Number": "Plur"})
MAX_LENGTH = 40  # word pieces with [CLS] and [SEP]; the tiny models have 64 positions
EPS32, EPS_BF16 = float(torch.finfo(torch.float32).eps), float(torch.finfo(torch.bfloat16).eps)

_MODELS: dict[tuple[str, str], torch.nn.Module] = {}


def model_of(family: str, kind: str = "float32") -> torch.nn.Module:
    """The family's tiny random encoder (``kind="float64"`` / ``"float32-eager"``: its eager twin in that dtype,
    the oracle's model)."""
    if (family, kind) not in _MODELS:
        base = _MODELS.setdefault((family, "float32"), tiny_encoder(family, 0).eval())
        _MODELS[family, kind] = base if kind == "float32" else eager_copy(base, getattr(torch, kind.split("-")[0]))
    return _MODELS[family, kind]


@st.composite
def sentences(draw) -> Sentence:
    n = draw(st.integers(1, 24))
    pick = lambda pool: tuple(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)))  # noqa: E731
    return Sentence(
        words=pick(WORD_POOL),
        heads=tuple(draw(st.lists(st.integers(0, n), min_size=n, max_size=n))),
        deprels=pick(DEPRELS),
        upos=pick(UPOS),
        xpos=(None,) * n,
        feats=pick(FEATS),
    )


treebanks = st.lists(sentences(), min_size=1, max_size=7)


def alone(model, ids: list[int], autocast: torch.dtype | None = None) -> np.ndarray:
    """One sentence's piece-level maps ``[layers, heads, n, n]`` through ``model`` alone, no padding, float64."""
    guard = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    batch = torch.tensor([ids])
    with torch.no_grad(), guard:
        out = model(input_ids=batch, attention_mask=torch.ones_like(batch), output_attentions=True)
    return np.stack([a[0].double().numpy() for a in out.attentions])


def word_map(attn: np.ndarray, word_ids: list[int | None], mode: str) -> np.ndarray:
    """docs/linguistics.md: words are [CLS], each word, [SEP]; attention TO a word sums its pieces' columns, FROM a
    word is the mean of its pieces' rows ("mean") or its first piece's row ("first")."""
    n = attn.shape[-1]
    words = [[0]] + [
        [p for p in range(n) if word_ids[p] == w] for w in range(max(w for w in word_ids if w is not None) + 1)
    ]
    words.append([n - 1])
    out = np.zeros(attn.shape[:2] + (len(words), len(words)))
    for a, src in enumerate(words):
        rows = src if mode == "mean" else src[:1]
        for b, dst in enumerate(words):
            total = 0.0
            for i in rows:
                for j in dst:
                    total += attn[..., i, j]
            out[..., a, b] = total / len(rows)
    return out


def assert_close(got: np.ndarray, want: np.ndarray, eps: float, scale: float, what: str) -> None:
    """|got - want| <= scale * eps * (1 + |want|): float rounding, relative away from zero, absolute near it."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaN pattern of {what}")
    err = np.abs(np.nan_to_num(got) - np.nan_to_num(want))
    bound = scale * eps * (1.0 + np.abs(np.nan_to_num(want)))
    assert (err <= bound).all(), f"{what}: max error {err.max():.3g} above {scale} eps (1 + |value|)"


def _tokenizer(side: str):
    tok = tiny_tokenizer()
    tok.padding_side = side
    return tok


def _fits(tok, sentence: Sentence) -> list[int] | None:
    ids = tok(list(sentence.words), is_split_into_words=True)["input_ids"]
    return ids if len(ids) <= MAX_LENGTH else None


@pytest.mark.fast
@given(
    family=st.sampled_from(FAMILIES),
    treebank=treebanks,
    side=PADDING_SIDES,
    batch_size=st.integers(1, 4),
    order=ORDERS,
    precision=st.sampled_from(["float32", "bf16"]),
)
def test_ud_word_class_shares_are_each_sentence_alone(family, treebank, side, batch_size, order, precision):
    """The UD word-class pass: per class, Σ_{j in the class's pieces} (1/n) Σ_i A[i, j] of each sentence alone,
    averaged over the sentences having the class (NaN when none has it), equals the batched pass; in float32 and
    under bf16 autocast (the oracle then runs the float32 model alone under the same autocast; bound: bf16's eps
    times the depth of the model)."""
    tok = _tokenizer(side)
    order.shuffle(treebank)
    fitting = [(s, ids) for s in treebank if (ids := _fits(tok, s)) is not None]
    assume(fitting)
    model = model_of(family)
    autocast = torch.bfloat16 if precision == "bf16" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skip warning (tests/linguistics/test_skipped_sentences.py)
        data = build_word_class_batches(
            WordClassProbe(tuple(treebank), num_sentences=len(treebank), batch_size=batch_size), tok, MAX_LENGTH
        )
    assert data.sentences == len(fitting) and data.skipped["too_long"] == len(treebank) - len(fitting)
    guard = (lambda: torch.autocast("cpu", dtype=autocast)) if autocast is not None else contextlib.nullcontext
    monitor = type("M", (), {"encoder": model, "device": torch.device("cpu"), "autocast": staticmethod(guard)})
    grids = UDWordClassPass(monitor, data).shares()

    oracle = model_of(family, "float32-eager" if autocast is not None else "float64")
    per_class: dict[str, list[np.ndarray]] = {name: [] for name in PLAIN}
    for sentence, ids in fitting:
        attn = alone(oracle, ids, autocast)
        word_ids = tok(list(sentence.words), is_split_into_words=True).word_ids()
        n = len(ids)
        for name, rule in PLAIN.items():
            flags = [rule(*w) for w in zip(sentence.upos, sentence.deprels, sentence.feats)]
            pieces = [j for j in range(n) if word_ids[j] is not None and flags[word_ids[j]]]
            if pieces:
                per_class[name].append(sum(attn[..., i, j] for i in range(n) for j in pieces) / n)
    layers = model.config.num_hidden_layers
    eps, scale = (EPS32, 2**8) if autocast is None else (EPS_BF16, 8 * layers)
    for name, values in per_class.items():
        want = np.mean(values, axis=0) if values else np.full(grids[SHARE_PREFIX + name].shape, np.nan)
        assert_close(np.asarray(grids[SHARE_PREFIX + name], dtype=np.float64), want, eps, scale, name)


@pytest.mark.fast
@given(
    family=st.sampled_from(FAMILIES),
    treebank=treebanks,
    side=PADDING_SIDES,
    batch_size=st.integers(1, 5),
    order=ORDERS,
    mode=st.sampled_from(["mean", "first"]),
)
def test_probe_syntax_word_maps_are_each_sentence_alone(family, treebank, side, batch_size, order, mode):
    """``probe-syntax``'s attention batches: every kept sentence comes back once, and its word-level map
    ``[layers, heads, W, W]`` equals the float64 loop over the sentence alone."""
    tok = _tokenizer(side)
    order.shuffle(treebank)
    fitting = [(s, ids) for s in treebank if (ids := _fits(tok, s)) is not None]
    encoded, skipped = encode(tok, treebank, MAX_LENGTH)
    assert [e.index for e in encoded] == [i for i, s in enumerate(treebank) if _fits(tok, s) is not None]
    assert skipped == {"too_long": len(treebank) - len(fitting), "unaligned": 0}
    model = model_of(family)
    seen = []
    for batch in attention_batches(model, tok, encoded, batch_size=batch_size, progress=False):
        assert len(batch) <= batch_size
        for b, item in enumerate(batch.items):
            sentence = treebank[item.index]
            ids = tok(list(sentence.words), is_split_into_words=True)["input_ids"]
            assert list(item.input_ids) == ids
            want = word_map(alone(model_of(family, "float64"), ids), item.word_ids, mode)
            got = batch.word_map(b, mode).double().numpy()
            assert got.shape == want.shape == (*want.shape[:2], len(sentence) + 2, len(sentence) + 2)
            assert_close(got, want, EPS32, 2**8, f"word map of sentence {item.index}")
            seen.append(item.index)
    assert sorted(seen) == [e.index for e in encoded]
