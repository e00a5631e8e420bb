"""The probe set (a fixed, seeded sample of examples, collated once) and the float16 reference-attention cache.

The probe set is built once per training run, with the Trainer's own tokenizer and collator, and never touches
the training dataloader or the global random state (collators such as masked-LM ones draw random numbers).
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bertwatch.core.warnings import BertWatchWarning, SetupError, cut_message
from bertwatch.heads.layout import LayoutError, pad_examples, right_align
from bertwatch.heads.loading import DEFAULT_MAX_LENGTH, max_input_length
from bertwatch.heads.rng import rng_untouched
from bertwatch.heads.roles import TokenRoles, token_roles
from bertwatch.heads.task_heads import IGNORE_INDEX, example_mask, head_kind, original_ids
from bertwatch.heads.unwrap import input_names, unwrap
from bertwatch.probe.adapt import tokenizer_value

__all__ = [
    "ProbeSet",
    "ReferenceCache",
    "build_probe_set",
    "crop_maps",
    "sample_indices",
    "text_examples",
]

_LABEL_KEYS = ("labels", "label", "label_ids")
CACHE_VERSION = 2


@dataclass
class ProbeSet:
    """Collated probe batches (CPU tensors, fixed order) with their token roles and token strings.

    ``batches[k]`` holds the model inputs ``[batch, T_k]`` (``[batch, choices, T_k]`` for multiple choice) and,
    when known, the label fields; ``roles[k]`` the roles of the rows the encoder sees ``[rows, T_k]`` (each choice
    a row); ``tokens[i]`` / ``segments[i]`` the real tokens (and segment ids or None) of row i over all batches.
    ``max_length`` is the length bertwatch cut probe texts to (None: it cut nothing, the examples were given
    tokenized) and ``truncated`` how many examples it cut.
    """

    batches: list[dict[str, Tensor]]
    roles: list[TokenRoles]
    tokens: list[list[str]]
    segments: list[list[int] | None]
    fingerprint: str
    max_length: int | None = None
    truncated: int = 0

    @property
    def size(self) -> int:
        return len(self.tokens)

    def first_row(self, k: int) -> int:
        """The index of batch k's first encoder row over all batches (rows are choices for multiple choice)."""
        return sum(int(r.real.shape[0]) for r in self.roles[:k])

    def length_info(self) -> dict[str, int | None]:
        """What was measured, recorded with the run: ``max_length`` (None: nothing was cut by bertwatch),
        ``truncated`` examples, ``examples`` in all and the ``longest`` row measured, in tokens with specials."""
        return {
            "max_length": self.max_length,
            "truncated": int(self.truncated),
            "examples": self.size,
            "longest": max((len(t) for t in self.tokens), default=0),
        }

    def maps_bytes(self, layers: int, heads: int) -> list[int]:
        """The bytes of each probe row's attention maps in float16, ``[layers, heads, n, n]``, ``n`` its real
        tokens (what the drift reference keeps of it)."""
        return [2 * layers * heads * len(tokens) ** 2 for tokens in self.tokens]

    def maps_that_fit(self, layers: int, heads: int, budget_bytes: int) -> int:
        """How many of the first probe rows' attention maps (:meth:`maps_bytes`) fit together in ``budget_bytes``."""
        total = 0
        for count, size in enumerate(self.maps_bytes(layers, heads)):
            total += size
            if total > budget_bytes:
                return count
        return self.size

    @property
    def has_labels(self) -> bool:
        """Every batch holds a head's label fields: ``labels``, or QA's ``start_positions`` and ``end_positions``."""
        return all("labels" in b or {"start_positions", "end_positions"} <= set(b) for b in self.batches)


def sample_indices(length: int, num_examples: int, seed: int) -> list[int]:
    """A seeded sample of ``min(num_examples, length)`` indices in increasing order (the probe set's fixed order)."""
    if num_examples <= 0:
        raise SetupError(f"num_probe_examples must be positive, got {num_examples}")
    if length <= num_examples:
        return list(range(length))
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(length, size=num_examples, replace=False))


def _as_text_example(item: Any) -> tuple[str, str | None, Any]:
    """A probe text as (text, text_pair, label): a string, a (text, pair) tuple or a dict with "text"."""
    if isinstance(item, str):
        return item, None, None
    if isinstance(item, Mapping):
        if "text" not in item:
            raise SetupError(f"a probe text given as a dict needs a 'text' key, got keys {sorted(item)}")
        return item["text"], item.get("text_pair"), item.get("label", item.get("labels"))
    if isinstance(item, (tuple, list)) and 1 <= len(item) <= 2:
        return item[0], (item[1] if len(item) == 2 else None), None
    raise SetupError(f"probe texts must be strings, (text, text_pair) tuples or dicts; got {type(item).__name__}")


def _text_features(texts: Sequence[Any], tokenizer: Any, max_length: int) -> tuple[list[dict[str, Any]], int]:
    """Each probe text tokenized whole, or cut to ``max_length`` tokens (with specials) when longer; returns the
    features and how many were cut."""
    features, truncated = [], 0
    for item in texts:
        text, pair, label = _as_text_example(item)
        encoded = dict(tokenizer(text, pair, truncation=False))
        if len(encoded["input_ids"]) > max_length:
            truncated += 1
            encoded = dict(tokenizer(text, pair, truncation=True, max_length=max_length))
        if label is not None:
            encoded["labels"] = label
        features.append(encoded)
    return features, truncated


def _pad_collate(tokenizer: Any) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    """Pad with the tokenizer, or on the right when it has no pad token (``heads.layout.pad_examples``: the padding
    is masked, so any id measures the same); token labels (one per token) are padded with -100 on the padding's
    side."""

    def collate(features: list[dict[str, Any]]) -> dict[str, Any]:
        labels = [f.pop("labels") for f in features if "labels" in f]
        batch = pad_examples(features, tokenizer)
        left = (
            tokenizer_value(tokenizer, "pad_token_id") is not None
            and tokenizer_value(tokenizer, "padding_side") == "left"
        )
        if labels and len(labels) == len(features):
            if isinstance(labels[0], (list, tuple)):
                width = batch["input_ids"].shape[-1]
                pads = [[IGNORE_INDEX] * (width - len(x)) for x in labels]
                labels = [p + list(x) if left else list(x) + p for p, x in zip(pads, labels)]
            batch["labels"] = torch.tensor(labels)
        return batch

    return collate


def _ints(value: Any) -> list[int]:
    return [int(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]


def _masked_lm_features(
    features: Sequence[Any], numbers: Sequence[int], tokenizer: Any, seed: int
) -> list[dict[str, Any]]:
    """A masked-LM model's probe examples with fixed, seeded masks (``bertwatch.heads.task_heads.example_mask``, seeded
    by ``seed`` and each example's index ``numbers[i]`` in its dataset), so every probe pass sees the same masked
    tokens and labels whatever the training collator draws. Labels already in an example give back its unmasked
    tokens (``original_ids``) before it is masked again."""
    mask_id = tokenizer_value(tokenizer, "mask_token_id")
    if mask_id is None:
        raise SetupError(
            "a masked-LM model's probe set is masked with the tokenizer's mask token: the tokenizer has none"
        )
    specials = list(tokenizer_value(tokenizer, "all_special_ids", []))
    out = []
    for number, feature in zip(numbers, features):
        if not isinstance(feature, Mapping) or "input_ids" not in feature:
            raise SetupError(
                "a masked-LM model's probe examples need 'input_ids' (tokenized examples) to be masked; pass "
                "probe_texts= (strings) or a tokenized probe_dataset="
            )
        labels = feature.get("labels")
        per_token = isinstance(labels, (list, tuple)) or np.ndim(labels) == 1
        ids = original_ids(_ints(feature["input_ids"]), _ints(labels) if per_token else None)
        masked, labels = example_mask(ids, number, mask_id, specials, seed=seed)
        if all(label == IGNORE_INDEX for label in labels):
            raise SetupError(f"probe example {number} has no token that can be masked (only special tokens)")
        row = {k: v for k, v in feature.items() if k not in (*_LABEL_KEYS, "special_tokens_mask")}
        out.append({**row, "input_ids": masked, "labels": labels})
    return out


def _model_columns(model: Any, label_names: Sequence[str] | None) -> set[str]:
    """What the Trainer keeps with ``remove_unused_columns``: the unwrapped encoder's inputs and the label names."""
    return set(input_names(model)) | set(_LABEL_KEYS) | set(label_names or ())


def text_examples(dataset: Any, num_examples: int, seed: int) -> list[str]:
    """A seeded sample of the strings in a dataset's text columns, each one probe text (bi-encoders such as
    sentence-transformers embed every sentence of a pair on its own)."""
    if dataset is None or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise SetupError("bertwatch needs an eval_dataset with text columns, or probe_texts=, for this model")
    rows = [dataset[i] for i in sample_indices(len(dataset), num_examples, seed)] if len(dataset) else []
    columns = [k for k in (rows[0] if rows and isinstance(rows[0], Mapping) else {}) if isinstance(rows[0][k], str)]
    if not columns:
        raise SetupError("the probe dataset has no text columns; pass probe_texts= (strings) to the callback")
    return [str(row[c]) for row in rows for c in columns][:num_examples]


def _dataset_features(dataset: Any, indices: Sequence[int], keep: set[str] | None) -> list[Any]:
    features = []
    for i in indices:
        example = dataset[i]
        if keep is not None and isinstance(example, Mapping):
            example = {k: v for k, v in example.items() if k in keep}
        features.append(example)
    return features


def _first_examples(dataset: Any, num_examples: int) -> list[Any]:
    """The first examples of an iterable (streaming) dataset."""
    out = []
    for example in dataset:
        out.append(example)
        if len(out) >= num_examples:
            break
    return out


def _tensor_batch(batch: Mapping[str, Any]) -> dict[str, Tensor]:
    """The collated batch's tensors, label keys renamed to ``labels``, laid out with each example's real tokens
    first (``bertwatch.heads.layout.right_align``): an example's statistics never depend on the padding side."""
    out = {k: v for k, v in dict(batch).items() if isinstance(v, Tensor)}
    for key in ("label", "label_ids"):
        if key in out and "labels" not in out:
            out["labels"] = out.pop(key)
    if "input_ids" not in out:
        raise SetupError(
            f"the collated probe batch has no 'input_ids' (keys: {sorted(out)}); pass tokenized examples as "
            "probe_dataset=, raw strings as probe_texts=, or the collator that tokenizes as data_collator="
        )
    try:
        return right_align(out)
    except LayoutError as error:
        raise SetupError(f"probe set: {error}") from error


def _choice_rows(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The rows the encoder sees: a multiple-choice batch ``[batch, choices, T]`` as ``[batch * choices, T]``."""
    ids = batch["input_ids"]
    if ids.dim() != 3:
        return dict(batch)
    keys = ("input_ids", "attention_mask", "token_type_ids")
    return {k: batch[k].reshape(-1, ids.shape[-1]) for k in keys if batch.get(k) is not None}


def _fingerprint(batches: Sequence[Mapping[str, Tensor]]) -> str:
    digest = hashlib.sha1()
    for b in batches:
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            if key in b:
                digest.update(key.encode())
                digest.update(b[key].detach().cpu().to(torch.int64).numpy().tobytes())
    return digest.hexdigest()


def _rows(
    batches: Sequence[Mapping[str, Tensor]], tokenizer: Any
) -> tuple[list[TokenRoles], list[list[str]], list[list[int] | None]]:
    """Each batch's token roles ``[rows, T_k]``, and each encoder row's real tokens and segment ids (or None)."""
    roles, tokens, segments = [], [], []
    for b in batches:
        rows = _choice_rows(b)
        r = token_roles(rows["input_ids"], rows.get("attention_mask"), tokenizer, rows.get("token_type_ids"))
        roles.append(r)
        for row in range(rows["input_ids"].shape[0]):
            real = r.real[row]
            tokens.append([str(t) for t in tokenizer.convert_ids_to_tokens(rows["input_ids"][row][real].tolist())])
            segments.append(None if r.segment is None else r.segment[row][real].tolist())
    return roles, tokens, segments


def build_probe_set(
    tokenizer: Any,
    *,
    texts: Sequence[Any] | None = None,
    dataset: Any = None,
    collator: Callable | None = None,
    model: Any = None,
    num_examples: int = 32,
    seed: int = 0,
    batch_size: int = 16,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    remove_unused_columns: bool = True,
    label_names: Sequence[str] | None = None,
) -> ProbeSet:
    """Collate the probe examples once: ``texts`` (all of them) or a seeded sample of ``dataset``.

    Texts longer than ``max_length`` tokens (``None``: the model's and tokenizer's maximum, see
    ``bertwatch.heads.loading.max_input_length``; never more than that maximum) are cut to it, counted in
    ``ProbeSet.truncated`` and said in one ``BertWatchWarning`` (:func:`_probe_cut_message`). Tokenized ``dataset`` examples are never cut; one longer than the ``model`` takes is
    refused. A masked-LM ``model``'s examples get fixed, seeded masks (:func:`_masked_lm_features`) and are padded, not
    collated with ``collator`` (a masked-LM collator draws new masks at every call).
    Raises ``SetupError`` with what to do when there is nothing to probe.
    """
    if tokenizer is None:
        raise SetupError(
            "bertwatch needs the tokenizer to find [CLS], [SEP] and punctuation: pass processing_class= to the "
            "Trainer or tokenizer= to the callback"
        )
    encoder = unwrap(model).model if model is not None else None
    model_limit = max_input_length(encoder, tokenizer, None, default=None)
    limit = min(model_limit, max_length) if max_length is not None else model_limit
    cut_to, truncated = None, 0
    with rng_untouched():
        if texts is not None:
            features, truncated = _text_features(list(texts), tokenizer, limit)
            cut_to = limit
            indices = list(range(len(features)))
            collate = _pad_collate(tokenizer)
        elif dataset is not None:
            if hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
                indices = sample_indices(len(dataset), num_examples, seed) if len(dataset) else []
                keep = _model_columns(model, label_names) if remove_unused_columns and model is not None else None
                features = _dataset_features(dataset, indices, keep)
            else:
                features = _first_examples(dataset, num_examples)
                indices = list(range(len(features)))
            collate = collator if collator is not None else _pad_collate(tokenizer)
        else:
            raise SetupError(
                "bertwatch found no probe examples: give the Trainer an eval_dataset, or pass probe_texts= or "
                "probe_dataset= to the callback"
            )
        if not features:
            raise SetupError(
                "the probe set is empty: the evaluation dataset (or probe_texts / probe_dataset) has no examples"
            )
        if batch_size <= 0:
            raise SetupError(f"ProbeOptions(batch_size=...) must be positive, got {batch_size}")
        if model is not None and head_kind(unwrap(model).model) == "masked-lm":
            features, collate = _masked_lm_features(features, indices, tokenizer, seed), _pad_collate(tokenizer)
        batches = [
            _tensor_batch(collate([dict(f) if isinstance(f, Mapping) else f for f in features[i : i + batch_size]]))
            for i in range(0, len(features), batch_size)
        ]
    roles, tokens, segments = _rows(batches, tokenizer)
    longest = max((len(t) for t in tokens), default=0)
    if model is not None and cut_to is None and longest > model_limit:
        raise SetupError(
            f"a tokenized probe example has {longest} tokens; the model takes at most {model_limit}. bertwatch does not "
            "cut tokenized examples: truncate the probe_dataset (or eval_dataset) when tokenizing, or pass raw "
            "strings as probe_texts="
        )
    probe = ProbeSet(batches, roles, tokens, segments, _fingerprint(batches), cut_to, truncated)
    if truncated:
        warnings.warn(_probe_cut_message(probe, max_length), BertWatchWarning, stacklevel=3)
    return probe


def _probe_cut_message(probe: ProbeSet, requested: int | None) -> str:
    """The setup warning of a probe set whose texts were cut: how many, to what length, and what to do."""
    asked = (
        "the model's maximum"
        if requested is None or requested > (probe.max_length or 0)
        else "ProbeOptions(max_length=...)"
    )
    more = (
        "pass shorter probe texts"
        if asked == "the model's maximum"
        else "pass probing=ProbeOptions(max_length=None) to measure up to the model's maximum (memory grows with the square of "
        "the length; docs/callbacks.md)"
    )
    return cut_message(
        probe.truncated, probe.size, "probe examples", probe.max_length, asked, "the run records this length", more
    )


def crop_maps(attn: Tensor, real: Tensor) -> list[Tensor]:
    """Padded maps ``[batch, L, H, T, T]`` -> per example ``[L, H, n, n]`` over its real positions."""
    out = []
    for row in range(attn.shape[0]):
        idx = real[row].nonzero().squeeze(-1).to(attn.device)
        out.append(attn[row].index_select(-2, idx).index_select(-1, idx))
    return out


class ReferenceCache:
    """The drift reference under ``<output_dir>/bertwatch/reference.pt``: the cropped probe maps in float16
    (:meth:`save`, matched to a probe set by its fingerprint) or a frozen model's weights (:meth:`save_model`, for a
    reference kept as a model: any probe set).

    A resumed run loads it, so drift is still measured from the pretrained model, not from the checkpoint.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def save(self, maps: Sequence[Tensor], fingerprint: str, layers: int, heads: int, source: str) -> None:
        """Write the maps atomically (a temporary file, then a rename): a reader never sees half a file."""
        maps = [m.detach().to("cpu", torch.float16).contiguous() for m in maps]
        self._write({"kind": "maps", "fingerprint": fingerprint, "maps": maps}, layers, heads, source)

    def save_model(self, state: dict[str, Tensor], layers: int, heads: int, source: str) -> None:
        """Write a frozen model's weights (``state_dict``) atomically."""
        state = {k: v.detach().to("cpu") for k, v in state.items()}
        self._write({"kind": "model", "state": state}, layers, heads, source)

    def _write(self, payload: dict[str, Any], layers: int, heads: int, source: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"version": CACHE_VERSION, "layers": int(layers), "heads": int(heads), "source": source, **payload}
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        torch.save(payload, tmp)
        os.replace(tmp, self.path)

    def _read(self, layers: int, heads: int, kind: str) -> dict[str, Any] | None:
        """The cache's payload if it exists, is of ``kind`` and was made for this model shape, else None."""
        if not self.path.is_file():
            return None
        payload = torch.load(self.path, map_location="cpu", weights_only=True)
        if (
            payload.get("version") not in (1, CACHE_VERSION)
            or payload.get("kind", "maps") != kind
            or (payload.get("layers"), payload.get("heads")) != (layers, heads)
        ):
            return None
        return payload

    def load(self, fingerprint: str, layers: int, heads: int) -> list[Tensor] | None:
        """The cached maps if the file holds maps made for this probe set and model shape, else None."""
        payload = self._read(layers, heads, "maps")
        if payload is None or payload.get("fingerprint") != fingerprint:
            return None
        return list(payload["maps"])

    def load_model(self, layers: int, heads: int) -> dict[str, Tensor] | None:
        """The cached weights if the file holds a model of this shape's, else None."""
        payload = self._read(layers, heads, "model")
        return None if payload is None else dict(payload["state"])
