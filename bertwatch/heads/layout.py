"""bertwatch's one batch layout: every example's real tokens first, in their order, then the padding.

A statistic of an example must not depend on the batch it was put in. Encoders with absolute positions (BERT,
DistilBERT, ELECTRA, ALBERT, ModernBERT's rotary positions...) number the positions of a row from 0 whatever the
attention mask says, so a left-padded example (``tokenizer.padding_side = "left"``) or a packed row with holes in
its mask sees positions shifted by however much padding its neighbours forced. Laid out with its real tokens at
the front of its row, an example sees positions 0..n-1 exactly as it does alone, and with the padding masked out
its maps over the real tokens are those of the example alone.

Two forms of the same rule:

- :func:`right_align` for a collated batch (tensors ``[batch, T]`` or ``[batch, choices, T]``): the real tokens
  (``attention_mask == 1``) of every row are moved to its front, stably; every per-token tensor moves with them and
  QA's ``start_positions`` / ``end_positions`` are renumbered;
- :func:`real_tokens` for one example as lists (before bertwatch pads it on the right itself).

Explicit ``position_ids`` are refused when a row has to move: they were made for the old layout and bertwatch cannot
know what they mean (drop them so the model numbers positions itself, or pad on the right).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "LayoutError",
    "POSITION_KEYS",
    "is_right_aligned",
    "pad_examples",
    "pad_features",
    "pad_token_id",
    "real_tokens",
    "right_align",
]

#: Fields that hold a token index per example (``[batch]``) and move with the tokens they point at.
POSITION_KEYS: tuple[str, ...] = ("start_positions", "end_positions")


def pad_token_id(tokenizer: Any, config: Any = None) -> int:
    """The id bertwatch pads with: the tokenizer's pad token, else the model config's, else 0. Any id will do, since
    padding is masked and laid out after the real tokens; a tokenizer without a pad token is measured all the same.

    Example:
        >>> from types import SimpleNamespace
        >>> pad_token_id(SimpleNamespace(pad_token_id=None), SimpleNamespace(pad_token_id=None))
        0
    """
    for source in (tokenizer, config):
        pad = getattr(source, "pad_token_id", None)  # None for either; a transformers 5 config may not declare it
        if pad is not None:
            return int(pad)
    return 0


def pad_features(features: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask`` (+ ``token_type_ids``) ``[B, T]``; multiple-choice features
    (a list of token lists per example) give ``[B, choices, T]``."""
    if features and features[0]["input_ids"] and isinstance(features[0]["input_ids"][0], list):
        choices = [
            pad_features([{k: v[c] for k, v in f.items()} for f in features], pad_id)
            for c in range(len(features[0]["input_ids"]))
        ]
        length = max(part["input_ids"].shape[1] for part in choices)
        return {
            name: torch.stack(
                [
                    torch.nn.functional.pad(
                        part[name], (0, length - part[name].shape[1]), value=pad_id if name == "input_ids" else 0
                    )
                    for part in choices
                ],
                dim=1,
            )
            for name in choices[0]
        }
    length = max(len(f["input_ids"]) for f in features)
    out = {
        "input_ids": torch.full((len(features), length), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros(len(features), length, dtype=torch.long),
    }
    if "token_type_ids" in features[0]:
        out["token_type_ids"] = torch.zeros(len(features), length, dtype=torch.long)
    if "labels" in features[0]:  # masked LM: the fixed masks' targets go into the forward
        out["labels"] = torch.full((len(features), length), -100, dtype=torch.long)
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        out["input_ids"][i, :n] = torch.tensor(f["input_ids"])
        out["attention_mask"][i, :n] = 1
        if "token_type_ids" in out:
            out["token_type_ids"][i, :n] = torch.tensor(f["token_type_ids"])
        if "labels" in out:
            out["labels"][i, :n] = torch.tensor(f["labels"])
    return out


def pad_examples(features: Sequence[Mapping[str, Any]], tokenizer: Any) -> dict[str, Tensor]:
    """Tokenized examples as one padded batch: padded by the tokenizer when it has a pad token, else on the right
    with :func:`pad_token_id` (:func:`pad_features`); either way the padding is masked."""
    if tokenizer is None or tokenizer.pad_token_id is None:
        return pad_features([dict(f) for f in features], pad_token_id(tokenizer))
    return dict(tokenizer.pad(list(features), padding=True, return_tensors="pt"))


class LayoutError(ValueError):
    """A batch bertwatch cannot lay out with the real tokens first without changing what the model sees."""


def is_right_aligned(attention_mask: Tensor) -> bool:
    """True when every row ``[..., T]`` of the mask is its real tokens (nonzero) then only padding."""
    real = attention_mask != 0
    if real.shape[-1] < 2:
        return True
    return not bool((~real[..., :-1] & real[..., 1:]).any())


def _order(real: Tensor) -> Tensor:
    """``[rows, T]`` -> the stable permutation ``[rows, T]`` that puts each row's real positions first."""
    return torch.sort((~real).to(torch.int8), dim=-1, stable=True).indices


def right_align(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The batch with each row's real tokens moved to the front of the row, stably (a new dict; inputs untouched).

    Args:
        batch: a collated batch. ``attention_mask`` ``[batch, T]`` or ``[batch, choices, T]`` says which tokens
            are real; every tensor whose leading dimensions are the mask's shape (``input_ids``, ``token_type_ids``,
            per-token ``labels``, ``special_tokens_mask``, ``[batch, T, ...]`` features) is permuted the same way
            along the token dimension. ``start_positions`` / ``end_positions`` ``[batch]`` of a ``[batch, T]``
            batch are renumbered to where their token went. Everything else is passed on as it is.

    Returns:
        The batch laid out as if right-padded (the same object's values when it already was, or has no mask).

    Raises:
        LayoutError: the batch carries ``position_ids`` and some row has to move.

    Example:
        >>> b = right_align({"input_ids": torch.tensor([[0, 0, 7, 8]]), "attention_mask": torch.tensor([[0, 0, 1, 1]])})
        >>> b["input_ids"].tolist(), b["attention_mask"].tolist()
        ([[7, 8, 0, 0]], [[1, 1, 0, 0]])
    """
    out = dict(batch)
    mask = out.get("attention_mask")
    if not isinstance(mask, Tensor) or mask.dim() not in (2, 3) or is_right_aligned(mask):
        return out
    if out.get("position_ids") is not None:
        raise LayoutError(
            "bertwatch lays out its batches with each example's real tokens first (so an example's statistics do "
            "not depend on its padding), but this batch carries position_ids made for padding elsewhere: drop "
            "position_ids from the examples (the model numbers positions itself) or pad on the right"
        )
    shape, length = tuple(mask.shape), mask.shape[-1]
    order = _order((mask != 0).reshape(-1, length))
    for key, value in batch.items():
        if not isinstance(value, Tensor) or value.dim() < mask.dim() or tuple(value.shape[: mask.dim()]) != shape:
            continue
        rows = value.reshape(-1, length, *value.shape[mask.dim() :])
        index = order.to(value.device).view(*order.shape, *([1] * (rows.dim() - 2))).expand_as(rows)
        out[key] = rows.gather(1, index).reshape(value.shape)
    if mask.dim() == 2:
        where = torch.argsort(order, dim=-1)
        for key in POSITION_KEYS:
            value = out.get(key)
            if isinstance(value, Tensor) and value.shape == (shape[0],):
                moved = where.to(value.device).gather(1, value.clamp(0, length - 1).long()[:, None])[:, 0]
                out[key] = torch.where((value >= 0) & (value < length), moved.to(value.dtype), value)
    return out


def real_tokens(example: Mapping[str, Any], keys: Sequence[str] | None = None) -> dict[str, Any]:
    """One example's per-token lists cut to its real tokens (``attention_mask`` nonzero), in order.

    Args:
        example: token lists (``input_ids`` and any list of the same length: ``token_type_ids``, per-token
            ``labels``...), a multiple-choice example's list of such lists per choice, and optionally
            ``attention_mask``. Without a mask every token is real.
        keys: the fields to keep (default: every per-token field; ``attention_mask`` is dropped).

    Returns:
        ``{key: list}`` of the kept fields over the real tokens, ready to be padded on the right.

    Raises:
        LayoutError: the example carries ``position_ids`` and some of its tokens are padding.
    """
    ids = _as_list(example["input_ids"])
    nested = bool(ids) and isinstance(ids[0], list)
    id_rows = ids if nested else [ids]
    mask = example.get("attention_mask")
    if mask is None:
        mask_rows = [[1] * len(r) for r in id_rows]
    else:
        mask_rows = [_as_list(m) for m in _as_list(mask)] if nested else [_as_list(mask)]
    if example.get("position_ids") is not None and not all(all(m) for m in mask_rows):
        raise LayoutError(
            "the examples carry position_ids and padding: bertwatch pads its own batches on the right, so drop "
            "position_ids (the model numbers positions itself) or the padding"
        )
    wanted = keys if keys is not None else [k for k in example if k not in ("attention_mask", "position_ids")]
    out: dict[str, Any] = {}
    for key in wanted:
        value = example.get(key)
        if value is None:
            continue
        rows = [_as_list(v) for v in _as_list(value)] if nested else [_as_list(value)]
        if not all(isinstance(r, list) for r in rows) or [len(r) for r in rows] != [len(r) for r in id_rows]:
            out[key] = value
            continue
        kept = [[t for t, m in zip(row, keep) if m] for row, keep in zip(rows, mask_rows)]
        out[key] = kept if nested else kept[0]
    return out


def _as_list(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value) if isinstance(value, (list, tuple)) else value
