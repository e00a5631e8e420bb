"""Evaluation examples as token ids: rows of a dataset or texts tokenised once, sorted by length, cut into
padded batches grouped into shards (the unit of resumption)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from bertwatch.core.warnings import BertWatchWarning, cut_message
from bertwatch.heads.layout import pad_features, real_tokens
from bertwatch.heads.loading import max_input_length
from bertwatch.heads.unwrap import select_inputs

_TEXT_COLUMNS = (
    ("text", "text_pair"),
    ("text", None),
    ("sentence1", "sentence2"),
    ("question1", "question2"),
    ("question", "sentence"),
    ("premise", "hypothesis"),
    ("sentence", None),
)
_LABEL_COLUMNS = ("label", "labels", "label_ids")


@dataclass
class EvalBatch:
    """One padded batch: ``index`` into the evaluation set, tensors on the CPU."""

    index: np.ndarray
    inputs: dict[str, torch.Tensor]

    @property
    def size(self) -> int:
        return int(self.index.size)


@dataclass
class EvalData:
    """Tokenised evaluation examples, length-sorted batches grouped into shards (the unit of resumption)."""

    features: list[dict[str, list[int]]]
    labels: np.ndarray
    shards: list[list[EvalBatch]] = field(default_factory=list)
    #: The task type (``bertwatch.ablation.task_types.TASK_TYPES``): how ``labels`` feed the model's loss.
    task_type: str = "sequence-classification"
    #: How many examples were cut to the length measured (texts longer than ``max_length`` tokens).
    cut: int = 0

    @property
    def size(self) -> int:
        return len(self.features)


def was_cut(ids: Sequence[Any], length: int, whole: Callable[[], Mapping[str, Any]]) -> bool:
    """Whether a text tokenised with ``truncation=True, max_length=length`` into ``ids`` was cut: only one that
    reached ``length`` can have been, and ``whole()`` (the same call without truncation) says whether it was."""
    return len(ids) >= length and len(whole()["input_ids"]) > length


def warn_cut(cut: int, total: int, length: int, requested: int) -> None:
    """One ``BertWatchWarning`` (``core.warnings.cut_message``) when ``cut`` of ``total`` evaluation examples were
    cut to ``length`` tokens (``requested``: the settings' ``max_length``, capped by the model's maximum)."""
    if not cut:
        return
    capped = length < requested
    remedy = (
        "pass shorter examples"
        if capped
        else "raise max_length (AblationSettings(max_length=...), bertwatch ablate --max-length) up to the model's "
        "maximum; a batch's cost grows with the square of its length"
    )
    message = cut_message(
        cut,
        total,
        "evaluation examples",
        length,
        "the model's maximum" if capped else "max_length",
        "ablation.json records both (config: max_length, cut_examples) and every configuration is scored on the "
        "same cut examples",
        remedy,
    )
    warnings.warn(message, BertWatchWarning, stacklevel=3)


def example_rows(examples: Any) -> list[dict[str, Any]]:
    """The examples (a list of dicts, a ``datasets.Dataset`` or any sequence of mappings) as a list of dicts."""
    if isinstance(examples, Mapping):
        raise TypeError("pass a list of examples or a dataset, not a single dict")
    if hasattr(examples, "column_names") and callable(getattr(examples, "to_list", None)):  # datasets.Dataset
        return [dict(row) for row in examples.to_list()]
    if hasattr(examples, "__getitem__") and hasattr(examples, "__len__"):
        return [dict(examples[i]) for i in range(len(examples))]
    return [dict(row) for row in examples]


def _label_of(row: Mapping[str, Any], number: int) -> Any:
    for name in _LABEL_COLUMNS:
        if name in row and row[name] is not None:
            value = row[name]
            return value.item() if hasattr(value, "item") else value
    raise ValueError(
        f"example {number} has no label (looked for {', '.join(_LABEL_COLUMNS)}); the sweep scores "
        "each configuration against the labels"
    )


def _text_columns(row: Mapping[str, Any]) -> tuple[str, str | None]:
    for first, second in _TEXT_COLUMNS:
        if first in row and (second is None or second in row):
            return first, second
    raise ValueError(
        f"cannot find the text of an example with columns {sorted(row)}: give 'input_ids', or 'text' (+ "
        "'text_pair'), or GLUE columns such as 'sentence' / 'sentence1'+'sentence2'"
    )


#: What tokenizers return; every one the examples carry must reach the model (the sweep pads the first three).
_TOKENIZER_OUTPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def _check_inputs(model: nn.Module, example: Mapping[str, Any]) -> None:
    """Refuse tokenizer outputs the model cannot take, or that the sweep would not pass on (never drop them)."""
    select_inputs(model, {k: v for k, v in example.items() if k in _TOKENIZER_OUTPUTS})
    if "position_ids" in example:
        raise ValueError("the examples carry position_ids, which the sweep does not pass on; drop that column")


def prepare_examples(
    model: nn.Module, examples: Any, tokenizer: Any, max_length: int, regression: bool
) -> tuple[list[dict[str, list[int]]], np.ndarray, int]:
    """Token ids (and segment ids) per example, unpadded, the labels ``[n]``, and how many texts were cut to the
    length measured (``max_length`` capped by the model's maximum; one ``BertWatchWarning`` when any was).
    Tokenized examples (``input_ids``) are never cut."""
    rows = example_rows(examples)
    if not rows:
        raise ValueError("the evaluation set is empty: the sweep needs labelled examples to score each configuration")
    labels = [_label_of(r, i) for i, r in enumerate(rows)]
    cut = 0
    if "input_ids" in rows[0]:
        _check_inputs(model, {k: v for k, v in rows[0].items() if k in _TOKENIZER_OUTPUTS and v is not None})
        features = [real_tokens(row, ("input_ids", "token_type_ids")) for row in rows]
    else:
        if tokenizer is None:
            raise ValueError("the examples are text: pass the tokenizer")
        first, second = _text_columns(rows[0])
        texts = [str(r[first]) for r in rows]
        pairs = [r.get(second) if second else None for r in rows]
        length = max_input_length(model, tokenizer, max_length)
        if all(p is None for p in pairs):
            encoded = tokenizer(texts, truncation=True, max_length=length)
        else:
            if any(p is None for p in pairs):
                raise ValueError(
                    "some examples have a second sentence and some do not; the task must be one or the other"
                )
            encoded = tokenizer(texts, pairs, truncation=True, max_length=length)
        cut = sum(
            was_cut(ids, length, lambda i=i: tokenizer(texts[i], pairs[i], truncation=False, verbose=False))
            for i, ids in enumerate(encoded["input_ids"])
        )
        warn_cut(cut, len(rows), length, max_length)
        _check_inputs(model, dict(encoded))
        keys = ["input_ids"] + (["token_type_ids"] if "token_type_ids" in encoded else [])
        features = [{k: list(encoded[k][i]) for k in keys} for i in range(len(rows))]
    if regression:
        array = np.asarray(labels, dtype=np.float64)
    else:
        try:
            array = np.asarray(labels, dtype=np.int64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"labels must be class ids for a classifier: {error}") from error
    if any(len(f["input_ids"]) == 0 for f in features):
        raise ValueError("an example has no tokens; drop empty examples from the evaluation set")
    return features, array, cut


def make_batches(data: EvalData, batch_size: int, shard_size: int, pad_id: int) -> None:
    """Sort by length (less padding), cut into batches and group the batches into shards of ~``shard_size``."""
    lengths = np.array([len(f["input_ids"]) for f in data.features])
    order = np.argsort(lengths, kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    per_shard = max(1, shard_size // batch_size)
    data.shards = [
        [
            EvalBatch(index, pad_features([data.features[i] for i in index], pad_id))
            for index in batches[s : s + per_shard]
        ]
        for s in range(0, len(batches), per_shard)
    ]
