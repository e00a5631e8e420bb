"""Token roles ([CLS], [SEP], punctuation, padding, segments) and word-piece to word attention maps.

Everything here is tensors in, tensors out; the tokenizer is only asked for token ids and strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

__all__ = ["TokenRoles", "token_roles", "word_groups", "to_word_level"]

_PUNCT = (".", ",")
_PREFIXES = ("", "▁", "Ġ")


@dataclass(frozen=True)
class TokenRoles:
    """Which positions of a padded batch are real, [CLS], [SEP] or "."/","; all masks are `[batch, T]`.

    `cls`, `sep` and `punct` are False on padding. `segment` is the token type id `[batch, T]` (long) or None
    when the model has no segments.
    """

    real: Tensor
    cls: Tensor
    sep: Tensor
    punct: Tensor
    segment: Tensor | None = None

    def to(self, device: torch.device | str) -> TokenRoles:
        """The same roles on `device`."""
        seg = None if self.segment is None else self.segment.to(device)
        return TokenRoles(self.real.to(device), self.cls.to(device), self.sep.to(device), self.punct.to(device), seg)

    def select(self, index: int | slice | Sequence[int] | Tensor) -> TokenRoles:
        """The roles of a subset of the batch (an int keeps a batch dimension of 1)."""
        if isinstance(index, int):
            index = slice(index, index + 1 if index != -1 else None)
        elif not isinstance(index, (slice, Tensor)):
            index = torch.as_tensor(index, dtype=torch.long, device=self.real.device)
        seg = None if self.segment is None else self.segment[index]
        return TokenRoles(self.real[index], self.cls[index], self.sep[index], self.punct[index], seg)

    @property
    def num_real(self) -> Tensor:
        """Number of real (non-pad) tokens per example, long `[batch]`."""
        return self.real.sum(-1)


def _special_id(tokenizer: Any, primary: str, fallback: str) -> int | None:
    """The id of `primary` (e.g. cls_token_id), else of `fallback` (bos/eos for RoBERTa-style tokenizers)."""
    for attr in (primary, fallback):
        value = getattr(tokenizer, attr)  # every transformers tokenizer answers each *_token_id (None when unset)
        if value is not None:
            return int(value)
    return None


def _punct_ids(tokenizer: Any) -> list[int]:
    """Ids of the vocabulary tokens that are "." or "," (also "▁." / "Ġ," style variants decoding to them)."""
    unk = tokenizer.unk_token_id
    ids: set[int] = set()
    for mark in _PUNCT:
        for prefix in _PREFIXES:
            token = prefix + mark
            try:
                tid = tokenizer.convert_tokens_to_ids(token)
            except (KeyError, ValueError, TypeError):
                continue
            if tid is None or isinstance(tid, list) or tid == unk:
                continue
            if prefix and tokenizer.decode([tid]).strip() != mark:
                continue
            ids.add(int(tid))
    return sorted(ids)


def token_roles(
    input_ids: Tensor, attention_mask: Tensor | None, tokenizer: Any, token_type_ids: Tensor | None = None
) -> TokenRoles:
    """Token roles of a padded batch `[batch, T]`, from the tokenizer's special and punctuation ids.

    [CLS] is `cls_token_id` (else `bos_token_id`), [SEP] is `sep_token_id` (else `eos_token_id`), every
    occurrence counts; a tokenizer without such tokens gives all-False masks. Without `attention_mask`
    every position is real.
    """
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    device = input_ids.device
    if attention_mask is None:
        real = torch.ones_like(input_ids, dtype=torch.bool)
    else:
        real = attention_mask.reshape(input_ids.shape).to(device=device) != 0

    def mask_of(ids: list[int]) -> Tensor:
        if not ids:
            return torch.zeros_like(real)
        return torch.isin(input_ids, torch.tensor(ids, dtype=input_ids.dtype, device=device)) & real

    cls_id = _special_id(tokenizer, "cls_token_id", "bos_token_id")
    sep_id = _special_id(tokenizer, "sep_token_id", "eos_token_id")
    cls = mask_of([] if cls_id is None else [cls_id])
    sep = mask_of([] if sep_id is None else [sep_id])
    punct = mask_of(_punct_ids(tokenizer))
    segment = None
    if token_type_ids is not None:
        segment = token_type_ids.reshape(input_ids.shape).to(device=device, dtype=torch.long)
    return TokenRoles(real=real, cls=cls, sep=sep, punct=punct, segment=segment)


def word_groups(word_ids: Sequence[int | None]) -> list[list[int]]:
    """Token positions of each word, from a fast tokenizer's `encoding.word_ids()` for ONE unpadded example.

    Consecutive pieces with the same word id form a word (pair inputs restart their word ids, so runs, not
    values, define words); every special token (word id None) is its own one-piece word, as in Clark's code.
    """
    groups: list[list[int]] = []
    previous: int | None = None
    for position, wid in enumerate(word_ids):
        if wid is not None and wid == previous and groups:
            groups[-1].append(position)
        else:
            groups.append([position])
        previous = wid
    return groups


def to_word_level(attn: Tensor, groups: Sequence[Sequence[int]], mode: Literal["mean", "first"] = "mean") -> Tensor:
    """Word-level attention `[..., W, W]` from piece-level `attn` `[..., T, T]` (float32 result).

    Attention TO a word sums its pieces' columns; attention FROM a word is the mean of its pieces' rows
    ("mean", Clark's paper) or its first piece's row ("first", Clark's released code). Rows still sum to 1
    when the groups cover every key with mass.
    """
    if mode not in ("mean", "first"):
        raise ValueError(f"mode must be 'mean' or 'first', not {mode!r}")
    length = attn.shape[-1]
    flat = [p for g in groups for p in g]
    if any(not g for g in groups):
        raise ValueError("every word needs at least one piece")
    if flat and (min(flat) < 0 or max(flat) >= length):
        raise ValueError(f"group positions must lie in [0, {length})")
    num_words = len(groups)
    word_of = torch.tensor([w for w, g in enumerate(groups) for _ in g], dtype=torch.long)
    piece = torch.tensor(flat, dtype=torch.long)
    to_word = torch.zeros(length, num_words)
    to_word[piece, word_of] = 1.0
    from_word = torch.zeros(num_words, length)
    if mode == "mean":
        sizes = torch.tensor([float(len(g)) for g in groups])
        from_word[word_of, piece] = 1.0 / sizes[word_of]
    else:
        firsts = torch.tensor([g[0] for g in groups], dtype=torch.long)
        from_word[torch.arange(num_words), firsts] = 1.0
    a = attn.float()
    return from_word.to(a.device) @ (a @ to_word.to(a.device))
