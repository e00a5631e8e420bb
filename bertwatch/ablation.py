"""Disable heads and layers of a fine-tuned encoder after training and measure, with intervals, what each is worth.

Kovaleva et al. 2019 (``mode="uniform"``: the head attends uniformly to every real token) and Michel et al. 2019
(``mode="zero"``: the head's context is zero). One sweep evaluates the baseline, every single head, every whole
layer, "keep only head h of layer l" (Michel's best-head-per-layer) and the iterative pruning curve; every delta
gets a paired bootstrap interval and p-value (:mod:`bertwatch.bootstrap`).

It is exact and cheaper than evaluating each configuration on its own:

* a configuration whose lowest disabled layer is ``l`` sees the baseline's hidden states below ``l``; the sweep
  caches the states entering every layer once per batch and runs only layers ``l..L-1`` (the layers below are
  swapped for a module that returns the cached states, so the model's own code builds the mask and runs the
  layers and the classification head);
* several configurations run stacked in one batch, each example with its own ``[layers, heads]`` mask; the
  stacked copies enter their first layer with identical states, so that layer's query/key/value projections
  run once and are tiled;
* for sequence classifiers that read only the first token (BERT, RoBERTa, XLM-R, CamemBERT, ELECTRA, ERNIE,
  DistilBERT), the last layer's output projection and feed-forward block run on that token only;
* each pruning step starts from the previous step's states at the lowest layer where their masks differ.

Attention itself is never re-implemented: interventions go through :mod:`bertwatch.capture`. Results are
appended to ``partial.jsonl`` as they are found, so an interrupted sweep resumes where it stopped; with several
processes (``accelerate launch`` / ``torchrun``) configurations are split across them.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import inspect
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from bertwatch.bootstrap import kernel_name, metric_on_counts, paired_bootstrap
from bertwatch.capture import Intervention, capture, model_shape
from bertwatch.report import FIELDS, AblationResult, cli_report, write_outputs

try:  # the callback base class; only needed when transformers is installed (it is a dependency)
    from transformers import TrainerCallback
except ImportError:  # pragma: no cover
    TrainerCallback = object  # type: ignore[misc,assignment]

__all__ = [
    "AblationCallback",
    "AblationConfig",
    "AblationResult",
    "MODES",
    "ablate",
    "cli_ablate",
    "cli_report",
    "pruning_masks",
    "run_ablation_on_trainer",
    "sweep_configs",
]

logger = logging.getLogger(__name__)

MODES = ("uniform", "zero")

#: Families whose encoder is a ``ModuleList`` of layers called in order with (hidden, mask): layer reuse works.
_REUSE_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "distilbert")
#: Sequence classifiers whose head reads only the first token of the last layer.
_FIRST_TOKEN_HEADS = (
    "BertForSequenceClassification",
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "CamembertForSequenceClassification",
    "ElectraForSequenceClassification",
    "ErnieForSequenceClassification",
    "DistilBertForSequenceClassification",
)
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


# --------------------------------------------------------------------------------------------------------
# Configurations


@dataclass(frozen=True)
class AblationConfig:
    """One set of disabled heads: ``mask`` is bool ``[layers, heads]``, True = disabled."""

    id: str
    mask: np.ndarray

    @property
    def start_layer(self) -> int:
        """The lowest layer with a disabled head (``layers`` for the baseline): everything below is unchanged."""
        rows = np.flatnonzero(self.mask.any(axis=1))
        return int(rows[0]) if rows.size else int(self.mask.shape[0])

    @property
    def key(self) -> str:
        """A hash of the id and the mask, so a resumed sweep never mixes up configurations."""
        digest = hashlib.sha1(self.id.encode())
        digest.update(np.ascontiguousarray(self.mask, dtype=np.bool_).tobytes())
        digest.update(str(self.mask.shape).encode())
        return digest.hexdigest()[:16]


def sweep_configs(num_layers: int, num_heads: int, keep_only: bool = True) -> list[AblationConfig]:
    """The baseline, every single head (``head:l:h``), every layer (``layer:l``) and, with ``keep_only``, every
    "only head h of layer l left on" (``keep:l:h``)."""
    shape = (num_layers, num_heads)
    configs = [AblationConfig("baseline", np.zeros(shape, dtype=bool))]
    for l in range(num_layers):
        for h in range(num_heads):
            mask = np.zeros(shape, dtype=bool)
            mask[l, h] = True
            configs.append(AblationConfig(f"head:{l}:{h}", mask))
    for l in range(num_layers):
        mask = np.zeros(shape, dtype=bool)
        mask[l] = True
        configs.append(AblationConfig(f"layer:{l}", mask))
    if keep_only and num_heads > 1:
        for l in range(num_layers):
            for h in range(num_heads):
                mask = np.zeros(shape, dtype=bool)
                mask[l] = True
                mask[l, h] = False
                configs.append(AblationConfig(f"keep:{l}:{h}", mask))
    return configs


def pruning_masks(importance: np.ndarray, step: float = 0.1) -> list[np.ndarray]:
    """Cumulative pruning masks: each step disables ``max(1, int(step * remaining))`` more heads, least important
    first (one global ranking, ascending; ties by position), until no head is left."""
    if not 0 < step <= 1:
        raise ValueError(f"the pruning step must be in (0, 1], got {step}")
    importance = np.asarray(importance, dtype=np.float64)
    order = np.argsort(np.nan_to_num(importance, nan=np.inf).ravel(), kind="stable")
    total = order.size
    masks, pruned = [], 0
    while pruned < total:
        pruned += max(1, int(step * (total - pruned)))
        mask = np.zeros(total, dtype=bool)
        mask[order[:pruned]] = True
        masks.append(mask.reshape(importance.shape))
    return masks


# --------------------------------------------------------------------------------------------------------
# Evaluation data


@dataclass
class _Batch:
    """One padded batch: ``index`` into the evaluation set, tensors on the CPU."""

    index: np.ndarray
    inputs: dict[str, torch.Tensor]

    @property
    def size(self) -> int:
        return int(self.index.size)


@dataclass
class _Data:
    """Tokenised evaluation examples, length-sorted batches grouped into shards (the unit of resumption)."""

    features: list[dict[str, list[int]]]
    labels: np.ndarray
    shards: list[list[_Batch]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.features)


def _rows(examples: Any) -> list[dict[str, Any]]:
    if isinstance(examples, Mapping):
        raise TypeError("pass a list of examples or a dataset, not a single dict")
    if hasattr(examples, "column_names") and callable(getattr(examples, "to_list", None)):  # datasets.Dataset
        return [dict(row) for row in examples.to_list()]
    if hasattr(examples, "__getitem__") and hasattr(examples, "__len__"):
        return [dict(examples[i]) for i in range(len(examples))]
    return [dict(row) for row in examples]


def _as_list(value: Any) -> list[int]:
    if hasattr(value, "tolist"):
        value = value.tolist()
    return [int(v) for v in value]


def _label_of(row: Mapping[str, Any], number: int) -> Any:
    for name in _LABEL_COLUMNS:
        if name in row and row[name] is not None:
            value = row[name]
            return value.item() if hasattr(value, "item") else value
    raise ValueError(f"example {number} has no label (looked for {', '.join(_LABEL_COLUMNS)}); the sweep scores "
                     "each configuration against the labels")


def _text_columns(row: Mapping[str, Any]) -> tuple[str, str | None]:
    for first, second in _TEXT_COLUMNS:
        if first in row and (second is None or second in row):
            return first, second
    raise ValueError(
        f"cannot find the text of an example with columns {sorted(row)}: give 'input_ids', or 'text' (+ "
        "'text_pair'), or GLUE columns such as 'sentence' / 'sentence1'+'sentence2'"
    )


def _max_length(model: nn.Module, tokenizer: Any, requested: int) -> int:
    limit = getattr(model.config, "max_position_embeddings", None) or requested
    if getattr(model.config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2
    tok_limit = getattr(tokenizer, "model_max_length", limit)
    if isinstance(tok_limit, int) and 0 < tok_limit < limit:
        limit = tok_limit
    return int(min(requested, limit))


def _prepare(
    model: nn.Module, examples: Any, tokenizer: Any, max_length: int, regression: bool
) -> tuple[list[dict[str, list[int]]], np.ndarray]:
    """Token ids (and segment ids) per example, unpadded, and the labels ``[n]``."""
    rows = _rows(examples)
    if not rows:
        raise ValueError("the evaluation set is empty: the sweep needs labelled examples to score each configuration")
    labels = [_label_of(r, i) for i, r in enumerate(rows)]
    accepts = set(inspect.signature(model.forward).parameters)
    if "input_ids" in rows[0]:
        features = []
        for row in rows:
            ids = _as_list(row["input_ids"])
            keep = _as_list(row["attention_mask"]) if row.get("attention_mask") is not None else [1] * len(ids)
            feature = {"input_ids": [t for t, m in zip(ids, keep) if m]}
            if row.get("token_type_ids") is not None and "token_type_ids" in accepts:
                feature["token_type_ids"] = [t for t, m in zip(_as_list(row["token_type_ids"]), keep) if m]
            features.append(feature)
    else:
        if tokenizer is None:
            raise ValueError("the examples are text: pass the tokenizer")
        first, second = _text_columns(rows[0])
        texts = [str(r[first]) for r in rows]
        pairs = [r.get(second) if second else None for r in rows]
        length = _max_length(model, tokenizer, max_length)
        if all(p is None for p in pairs):
            encoded = tokenizer(texts, truncation=True, max_length=length)
        else:
            if any(p is None for p in pairs):
                raise ValueError("some examples have a second sentence and some do not; the task must be one or the other")
            encoded = tokenizer(texts, pairs, truncation=True, max_length=length)
        keys = ["input_ids"] + (["token_type_ids"] if "token_type_ids" in encoded and "token_type_ids" in accepts else [])
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
    return features, array


def _pad(features: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    length = max(len(f["input_ids"]) for f in features)
    out = {"input_ids": torch.full((len(features), length), pad_id, dtype=torch.long),
           "attention_mask": torch.zeros(len(features), length, dtype=torch.long)}
    if "token_type_ids" in features[0]:
        out["token_type_ids"] = torch.zeros(len(features), length, dtype=torch.long)
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        out["input_ids"][i, :n] = torch.tensor(f["input_ids"])
        out["attention_mask"][i, :n] = 1
        if "token_type_ids" in out:
            out["token_type_ids"][i, :n] = torch.tensor(f["token_type_ids"])
    return out


def _batches(data: _Data, batch_size: int, shard_size: int, pad_id: int) -> None:
    """Sort by length (less padding), cut into batches and group the batches into shards of ~``shard_size``."""
    lengths = np.array([len(f["input_ids"]) for f in data.features])
    order = np.argsort(lengths, kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    per_shard = max(1, shard_size // batch_size)
    data.shards = [
        [_Batch(index, _pad([data.features[i] for i in index], pad_id)) for index in batches[s : s + per_shard]]
        for s in range(0, len(batches), per_shard)
    ]


# --------------------------------------------------------------------------------------------------------
# Running configurations


def _model_type(model: nn.Module) -> str:
    return str(getattr(model.config, "model_type", "")).replace("_", "-")


class _Cached(nn.Module):
    """Stands in for the layers below a configuration's first disabled layer: returns the cached hidden states."""

    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.hidden


class _FirstTokenBertLayer(nn.Module):
    """A BERT-style last layer whose attention output projection and feed-forward block run on the first token
    only (all the classification head reads); its self-attention still sees every token."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.inner = layer

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                encoder_hidden_states: Any = None, encoder_attention_mask: Any = None,
                past_key_values: Any = None, **kwargs: Any) -> torch.Tensor:
        attention = self.inner.attention
        context, _ = attention.self(hidden_states, attention_mask=attention_mask, past_key_values=past_key_values,
                                    **kwargs)
        first = attention.output(context[:, :1], hidden_states[:, :1])
        return self.inner.feed_forward_chunk(first)


class _FirstTokenDistilLayer(nn.Module):
    """DistilBERT's last block with its feed-forward part on the first token only."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.inner = layer

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Any) -> torch.Tensor:
        block = self.inner
        attention_output, _ = block.attention(hidden_states, attention_mask=attention_mask, **kwargs)
        first = block.sa_layer_norm(attention_output[:, :1] + hidden_states[:, :1])
        return block.output_layer_norm(block.ffn(first) + first)


class _Tiled(nn.Module):
    """A projection whose input is ``copies`` stacked copies of one batch: computed once, then tiled."""

    def __init__(self, linear: nn.Module, copies: int):
        super().__init__()
        self.linear = linear
        self.copies = copies

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        once = self.linear(x[: x.shape[0] // self.copies])
        return once.repeat(self.copies, *([1] * (once.dim() - 1)))


_PROJECTIONS = (("attention.self", ("query", "key", "value")), ("attention", ("q_lin", "k_lin", "v_lin")))


def _projections(layer: nn.Module) -> tuple[nn.Module, tuple[str, ...]] | None:
    """The module holding a layer's query/key/value projections and their names (BERT-style or DistilBERT)."""
    for path, names in _PROJECTIONS:
        owner = layer
        for part in path.split("."):
            owner = getattr(owner, part, None)
        if owner is not None and all(isinstance(getattr(owner, n, None), nn.Linear) for n in names):
            return owner, names
    return None


@contextlib.contextmanager
def _tiled_projections(layer: nn.Module, copies: int) -> Iterator[None]:
    """While active, the layer's query/key/value projections run once on the first of ``copies`` equal blocks."""
    found = _projections(layer) if copies > 1 else None
    if found is None:
        yield
        return
    owner, names = found
    originals = {n: getattr(owner, n) for n in names}
    try:
        for n, linear in originals.items():
            setattr(owner, n, _Tiled(linear, copies))
        yield
    finally:
        for n, linear in originals.items():
            setattr(owner, n, linear)


def _layer_list(model: nn.Module, num_layers: int) -> nn.ModuleList | None:
    if _model_type(model) not in _REUSE_TYPES:
        return None
    base = getattr(model, "base_model", model)
    holder = getattr(base, "encoder", None) or getattr(base, "transformer", None)
    layers = getattr(holder, "layer", None)
    if isinstance(layers, nn.ModuleList) and len(layers) == num_layers:
        return layers
    return None


def _first_token_layer(model: nn.Module, layers: nn.ModuleList | None) -> nn.Module | None:
    if layers is None or type(model).__name__ not in _FIRST_TOKEN_HEADS:
        return None
    last = layers[-1]
    if all(hasattr(last, a) for a in ("sa_layer_norm", "ffn", "output_layer_norm", "attention")):
        return _FirstTokenDistilLayer(last)
    attention = getattr(last, "attention", None)
    if (hasattr(last, "feed_forward_chunk") and hasattr(attention, "self") and hasattr(attention, "output")
            and not getattr(attention, "is_cross_attention", False)
            and not getattr(last, "add_cross_attention", False) and not getattr(last, "is_decoder", False)):
        return _FirstTokenBertLayer(last)
    return None


class _Runner:
    """Evaluates stacked configurations on one batch, reusing the baseline's states below the first disabled layer."""

    def __init__(self, model: nn.Module, mode: str, reuse: bool = True):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
        self.model = model
        self.mode = mode
        self.num_layers, self.num_heads = model_shape(model)
        self.layers = _layer_list(model, self.num_layers) if reuse else None
        self.last = _first_token_layer(model, self.layers) if reuse else None
        self.device = next(model.parameters()).device

    @property
    def reuses(self) -> bool:
        return self.layers is not None

    @contextlib.contextmanager
    def _swapped(self, replacements: Mapping[int, nn.Module]) -> Iterator[None]:
        originals = {i: self.layers[i] for i in replacements} if self.layers is not None else {}
        try:
            for i, module in replacements.items():
                self.layers[i] = module
            yield
        finally:
            for i, module in originals.items():
                self.layers[i] = module

    def _last(self) -> dict[int, nn.Module]:
        return {self.num_layers - 1: self.last} if self.last is not None else {}

    def _to_device(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in inputs.items()}

    def baseline(self, inputs: Mapping[str, torch.Tensor], cache: bool) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Baseline logits ``[B, C]`` and, with ``cache``, the hidden states entering each layer."""
        inputs = self._to_device(inputs)
        states: list[torch.Tensor | None] = [None] * self.num_layers
        with self._swapped(self._last()):
            hooks = []
            if cache and self.layers is not None:
                for i in range(self.num_layers):
                    hooks.append(self.layers[i].register_forward_pre_hook(_state_saver(states, i), with_kwargs=True))
            try:
                with capture(self.model, record=False):
                    logits = self.model(**inputs).logits
            finally:
                for hook in hooks:
                    hook.remove()
        return logits, (states if cache and self.layers is not None else None)

    def run(self, inputs: Mapping[str, torch.Tensor], states: list[torch.Tensor] | None, masks: np.ndarray,
            start: int) -> torch.Tensor:
        """Logits ``[k, B, C]`` of ``k`` configurations (masks ``[k, layers, heads]``) whose first disabled layer is
        ``start`` or later, stacked into one batch."""
        inputs = self._to_device(inputs)
        k, size = masks.shape[0], next(iter(inputs.values())).shape[0]
        stacked = {name: value.repeat(k, *([1] * (value.dim() - 1))) for name, value in inputs.items()}
        per_example = torch.as_tensor(masks, dtype=torch.bool, device=self.device).repeat_interleave(size, dim=0)
        intervention = Intervention.disable(per_example, self.mode)
        replacements = self._last()
        skip = self.layers is not None and states is not None and 0 < start < self.num_layers
        if skip:
            stub = _Cached(states[start].repeat(k, 1, 1))
            replacements.update({i: stub for i in range(start)})
        shared = contextlib.nullcontext()
        if self.layers is not None and (skip or start == 0):
            shared = _tiled_projections(self.layers[start], k)  # layer start sees k copies of the same states
        with self._swapped(replacements), shared, capture(self.model, record=False, intervention=intervention) as cap:
            hook = None
            if skip:
                hook = self.layers[start].register_forward_pre_hook(lambda *_: cap.reset(start_layer=start))
            try:
                logits = self.model(**stacked).logits
            finally:
                if hook is not None:
                    hook.remove()
        return logits.reshape(k, size, -1)


    def run_keeping(self, inputs: Mapping[str, torch.Tensor], states: list[torch.Tensor] | None, mask: np.ndarray,
                    start: int, keep: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, C]`` of one configuration and the hidden states entering layer ``keep`` (>= ``start``)."""
        if self.layers is None or not start <= keep < self.num_layers:
            raise ValueError(f"cannot keep the states entering layer {keep} of a pass that starts at {start}")
        target = self.last if (keep == self.num_layers - 1 and self.last is not None) else self.layers[keep]
        kept: list[torch.Tensor | None] = [None]
        hook = target.register_forward_pre_hook(_state_saver(kept, 0), with_kwargs=True)
        try:
            logits = self.run(inputs, states, mask[None], start)[0]
        finally:
            hook.remove()
        return logits, kept[0]


def _state_saver(states: list, index: int) -> Callable:
    def save(module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))
        states[index] = hidden.detach()

    return save


# --------------------------------------------------------------------------------------------------------
# Resumable store and process groups


class _Store:
    """``partial.jsonl``: one line per (shard, configuration) with its logits; lines of another run are ignored."""

    def __init__(self, path: Path | None, fingerprint: str, writer: bool):
        self.path = path
        self.fingerprint = fingerprint
        self.writer = writer
        self.entries: dict[tuple[int, str], np.ndarray] = {}
        if path is None or not path.is_file():
            return
        stale = False
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n") and writer:
            with path.open("a", encoding="utf-8") as file:
                file.write("\n")  # end a line torn by an interruption, so the next one starts clean
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by an interruption
            if row.get("run") != self.fingerprint:
                stale = True
                continue
            data = np.frombuffer(base64.b64decode(row["logits"]), dtype=np.float32).reshape(row["shape"])
            self.entries[(int(row["shard"]), row["key"])] = data
        if stale and not self.entries and writer:
            path.unlink()

    def get(self, shard: int, config: AblationConfig) -> np.ndarray | None:
        return self.entries.get((shard, config.key))

    def put(self, shard: int, config: AblationConfig, logits: np.ndarray) -> None:
        logits = np.ascontiguousarray(logits, dtype=np.float32)
        self.entries[(shard, config.key)] = logits
        if self.path is None or not self.writer:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {"run": self.fingerprint, "shard": shard, "id": config.id, "key": config.key,
               "shape": list(logits.shape), "logits": base64.b64encode(logits.tobytes()).decode("ascii")}
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
            file.flush()


class _Processes:
    """This process's share of the configurations; one process unless launched with accelerate / torchrun."""

    def __init__(self, distributed: bool | None, cpu: bool = False):
        self.state = None
        world = int(os.environ.get("WORLD_SIZE", "1"))
        initialised = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed or (distributed is None and (world > 1 or initialised)):
            from accelerate import PartialState

            self.state = PartialState(cpu=cpu)  # cpu=True: gloo between CPU processes
        self.rank = self.state.process_index if self.state is not None else 0
        self.world = self.state.num_processes if self.state is not None else 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def split(self, configs: Sequence[AblationConfig], num_layers: int) -> list[AblationConfig]:
        """Balance the cost (layers to run) across processes, then let accelerate hand out the contiguous parts."""
        if self.world == 1:
            return list(configs)
        ranked = sorted(configs, key=lambda c: (-(num_layers - min(c.start_layer, num_layers - 1)), c.id))
        base, extra = divmod(len(ranked), self.world)
        sizes = [base + (1 if r < extra else 0) for r in range(self.world)]
        buckets: list[list[AblationConfig]] = [[] for _ in range(self.world)]
        cost = [0] * self.world
        for config in ranked:
            open_ranks = [r for r in range(self.world) if len(buckets[r]) < sizes[r]]
            r = min(open_ranks, key=lambda r: (cost[r], r))
            buckets[r].append(config)
            cost[r] += num_layers - min(config.start_layer, num_layers - 1)
        arranged = [c for bucket in buckets for c in bucket]
        with self.state.split_between_processes(arranged) as mine:
            return list(mine)

    def gather(self, local: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.world == 1:
            return local
        from accelerate.utils import gather_object

        return dict(gather_object(list(local.items())))

    def barrier(self) -> None:
        if self.state is not None:
            self.state.wait_for_everyone()


def _group_by_start(configs: Sequence[AblationConfig], reuse: bool) -> list[tuple[int, list[AblationConfig]]]:
    groups: dict[int, list[AblationConfig]] = {}
    for c in configs:
        groups.setdefault(c.start_layer if reuse else 0, []).append(c)
    return sorted(groups.items())


def _run_shard(runner: _Runner, batches: Sequence[_Batch], configs: Sequence[AblationConfig],
               configs_per_batch: int, progress: Any) -> dict[str, np.ndarray]:
    """Logits ``[shard examples, C]`` of each configuration, in the shard's batch order."""
    num_layers = runner.num_layers
    baseline_ids = {c.id for c in configs if c.start_layer >= num_layers}
    others = [c for c in configs if c.start_layer < num_layers]
    need_states = runner.reuses and any(c.start_layer > 0 for c in others)
    parts: dict[str, list[np.ndarray]] = {c.id: [] for c in configs}
    for batch in batches:
        states = None
        if baseline_ids or need_states:
            logits, states = runner.baseline(batch.inputs, cache=need_states)
            for cid in baseline_ids:
                parts[cid].append(logits.float().cpu().numpy())
            if progress is not None:
                progress.update(batch.size * len(baseline_ids))
        for start, group in _group_by_start(others, runner.reuses):
            for i in range(0, len(group), configs_per_batch):
                chunk = group[i : i + configs_per_batch]
                out = runner.run(batch.inputs, states, np.stack([c.mask for c in chunk]), start)
                out = out.float().cpu().numpy()
                for j, c in enumerate(chunk):
                    parts[c.id].append(out[j])
                if progress is not None:
                    progress.update(batch.size * len(chunk))
    return {cid: np.concatenate(chunks, axis=0) for cid, chunks in parts.items()}


def _progress(enabled: bool, total: int, desc: str, unit: str) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)


def _evaluate_configs(runner: _Runner, data: _Data, configs: Sequence[AblationConfig], store: _Store,
                     processes: _Processes, configs_per_batch: int, progress: bool = True,
                     desc: str = "ablate") -> dict[str, np.ndarray]:
    """Logits ``[n, C]`` of every configuration in the evaluation set's order, shard by shard, resuming from and
    appending to ``store``; configurations missing from a shard are split across processes."""
    parts: dict[str, list[np.ndarray]] = {c.id: [] for c in configs}
    todo_total = sum(sum(b.size for b in shard) * sum(store.get(s, c) is None for c in configs)
                     for s, shard in enumerate(data.shards))
    bar = _progress(progress and processes.is_main and todo_total > 0, todo_total, desc, "ex")
    try:
        for s, shard in enumerate(data.shards):
            found = {c.id: store.get(s, c) for c in configs}
            todo = [c for c in configs if found[c.id] is None]
            if todo:
                mine = processes.split(todo, runner.num_layers)
                local = _run_shard(runner, shard, mine, configs_per_batch, bar)
                gathered = processes.gather(local)
                for c in todo:
                    store.put(s, c, gathered[c.id])
                    found[c.id] = gathered[c.id]
                if bar is not None and processes.world > 1:
                    bar.update(sum(b.size for b in shard) * (len(todo) - len(mine)))
            for c in configs:
                parts[c.id].append(found[c.id])
    finally:
        if bar is not None:
            bar.close()
    return {cid: _in_input_order(data, chunks) for cid, chunks in parts.items()}


def _in_input_order(data: _Data, shard_parts: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate per-shard results (length-sorted batch order) and put them back in the input order."""
    logits = np.concatenate(shard_parts, axis=0)
    restored = np.empty_like(logits)
    restored[np.concatenate([b.index for shard in data.shards for b in shard])] = logits
    return restored


# --------------------------------------------------------------------------------------------------------
# Metrics


@dataclass
class _Metric:
    """How to score logits ``[n, C]``: the value on the whole set and the paired bootstrap's metric."""

    name: str
    labels: np.ndarray
    predictions: Callable[[np.ndarray], np.ndarray]
    score: Callable[[np.ndarray], float]
    kernel: str | None
    on_logits: Callable[[np.ndarray, np.ndarray], float] | None = None
    all_metrics: Callable[[np.ndarray], dict[str, float]] | None = None

    def bootstrap(self, baseline: np.ndarray, configs: list[np.ndarray], n_resamples: int, seed: int,
                  confidence: float):
        if self.kernel is not None:
            preds = np.stack([self.predictions(c) for c in configs])
            return paired_bootstrap(self.predictions(baseline), preds, self.labels, self.kernel, n_resamples, seed,
                                    confidence)
        return paired_bootstrap(baseline, np.stack(configs), self.labels, self.on_logits, n_resamples, seed,
                                confidence)


def _default_predictions(regression: bool) -> Callable[[np.ndarray], np.ndarray]:
    def predictions(logits: np.ndarray) -> np.ndarray:
        logits = np.asarray(logits)
        return logits.reshape(len(logits), -1)[:, 0] if regression else logits.argmax(-1)

    return predictions


def _make_metric(task: str | None, compute_metrics: Callable | None, metric: str | None, labels: np.ndarray,
                 regression: bool) -> _Metric:
    predictions = _default_predictions(regression)
    if compute_metrics is not None:
        from transformers import EvalPrediction

        def full(logits: np.ndarray, lab: np.ndarray = labels) -> dict[str, float]:
            values = compute_metrics(EvalPrediction(predictions=logits, label_ids=lab))
            return {k: float(v) for k, v in values.items() if isinstance(v, (int, float, np.floating, np.integer))}

        name = metric[len("eval_"):] if metric and metric.startswith("eval_") else metric
        spec = _Metric(name or "", labels, predictions, lambda logits: 0.0, None, all_metrics=full)

        def named(values: Mapping[str, float]) -> float:
            if not spec.name:
                spec.name = _pick_metric(values, task)
            if spec.name not in values:
                raise ValueError(f"compute_metrics returned {sorted(values)}, not the metric {spec.name!r}")
            return values[spec.name]

        spec.score = lambda logits: named(full(logits))
        spec.on_logits = lambda logits, lab: named(full(logits, lab))
        return spec
    if task is not None:
        from bertwatch.metrics import glue_metrics, metric_fn, predictions_from_logits, primary_metric

        name = metric or primary_metric(task)
        fn = metric_fn(task, name)

        def task_predictions(logits: np.ndarray) -> np.ndarray:
            return predictions_from_logits(task, logits)

        return _Metric(name, labels, task_predictions, lambda logits: fn(task_predictions(logits), labels),
                       kernel_name(name), on_logits=lambda logits, lab: fn(task_predictions(logits), lab),
                       all_metrics=lambda logits: glue_metrics(task, task_predictions(logits), labels))
    name = metric or ("pearson" if regression else "accuracy")
    if kernel_name(name) is None:
        raise ValueError(f"metric {name!r} needs a task or compute_metrics; built in: accuracy, f1, "
                         "matthews_correlation, pearson, spearmanr")

    def score(logits: np.ndarray) -> float:
        return float(metric_on_counts(name, predictions(logits)[None], labels, np.ones((1, len(labels))))[0, 0])

    return _Metric(name, labels, predictions, score, kernel_name(name),
                   all_metrics=lambda logits: {name: score(logits)})


def _pick_metric(values: Mapping[str, float], task: str | None) -> str:
    if task is not None:
        from bertwatch.metrics import primary_metric

        if primary_metric(task) in values:
            return primary_metric(task)
    for preferred in ("accuracy", "f1", "matthews_correlation", "pearson"):
        if preferred in values:
            return preferred
    if not values:
        raise ValueError("compute_metrics returned no numeric metric")
    return next(iter(values))


def _settle_metric(metric: _Metric, logits: Mapping[str, np.ndarray]) -> None:
    """With compute_metrics: fix the metric's name and use the vectorised bootstrap when the user's function
    gives exactly what the built-in one gives on every configuration (else call it once per resample)."""
    if metric.all_metrics is None or metric.kernel is not None:
        return
    metric.score(next(iter(logits.values())))
    name = kernel_name(metric.name)
    if name is None:
        return
    ones = np.ones((1, len(metric.labels)))
    for value in logits.values():
        theirs = metric.score(value)
        ours = float(metric_on_counts(name, metric.predictions(value)[None], metric.labels, ones)[0, 0])
        if not (math.isclose(theirs, ours, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(theirs) and math.isnan(ours))):
            logger.info("compute_metrics' %s differs from the built-in one; bootstrapping it resample by resample",
                        metric.name)
            return
    metric.kernel = name


# --------------------------------------------------------------------------------------------------------
# The sweep


def _check_model(model: nn.Module, task: str | None) -> tuple[bool, int]:
    """(regression, number of outputs); clear errors for models the sweep cannot score."""
    name = type(model).__name__
    if not name.endswith("ForSequenceClassification"):
        raise ValueError(
            f"{name} has no sequence-classification head; the sweep scores a fine-tuned classifier. Load the "
            "checkpoint with AutoModelForSequenceClassification (after fine-tuning it on the task)."
        )
    num_labels = int(getattr(model.config, "num_labels", 0))
    problem = getattr(model.config, "problem_type", None)
    if problem == "multi_label_classification":
        raise ValueError("multi-label classifiers are not supported by the ablation sweep")
    regression = problem == "regression" or num_labels == 1
    if task is not None:
        from bertwatch.data import glue_task

        spec = glue_task(task)
        if spec.num_labels != num_labels or spec.is_regression != regression:
            raise ValueError(
                f"task {spec.name!r} has {spec.num_labels} label{'s' if spec.num_labels != 1 else ''}"
                f"{' (regression)' if spec.is_regression else ''}, but the model's head has {num_labels} output"
                f"{'s' if num_labels != 1 else ''}: was this checkpoint fine-tuned on {spec.name}?"
            )
    return regression, num_labels


def _check_labels(labels: np.ndarray, regression: bool, num_labels: int) -> None:
    if regression:
        if not np.all(np.isfinite(labels)):
            raise ValueError("regression labels must be finite numbers")
        return
    bad = labels[(labels < 0) | (labels >= num_labels)]
    if bad.size:
        raise ValueError(f"labels {sorted(set(bad.tolist()))[:5]} are outside the model's {num_labels} classes; "
                         "do the task's labels match the model?")


def _fingerprint(model: nn.Module, data: _Data, mode: str, batch_size: int, shard_size: int) -> str:
    digest = hashlib.sha1(f"{mode}|{batch_size}|{shard_size}|{type(model).__name__}".encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for feature in data.features:
        digest.update(json.dumps(feature, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(data.labels).tobytes())
    return digest.hexdigest()[:20]


def _head_importance(model: nn.Module, data: _Data, regression: bool, loss_fn: Callable | None) -> np.ndarray:
    """Michel et al.'s importance ``E_x |dL/d gate|`` over the evaluation set, L2-normalised per layer."""
    from bertwatch.importance import gradient_stats, normalize_by_layer
    from bertwatch.roles import TokenRoles

    device = next(model.parameters()).device
    total, count = None, 0
    for shard in data.shards:
        for batch in shard:
            inputs = {k: v.to(device) for k, v in batch.inputs.items()}
            real = inputs["attention_mask"].bool()
            none = torch.zeros_like(real)
            roles = TokenRoles(real=real, cls=none, sep=none, punct=none)
            labels = torch.as_tensor(data.labels[batch.index], device=device)
            labels = labels.float() if regression else labels.long()
            stats = gradient_stats(model, {**inputs, "labels": labels}, roles, loss_fn=loss_fn)
            part = stats["head_importance"].double().sum(0).cpu()
            total = part if total is None else total + part
            count += batch.size
    return normalize_by_layer(total / count).numpy()


def _first_change(mask: np.ndarray, previous: np.ndarray | None) -> int:
    """The lowest layer where two head masks differ (where a pass relative to ``previous`` must start)."""
    if previous is None:
        return 0
    rows = np.flatnonzero((mask != previous).any(axis=1))
    return int(rows[0]) if rows.size else int(mask.shape[0])


def _carry_bytes(data: _Data, runner: _Runner) -> int:
    """Memory to keep one layer's hidden states for the whole evaluation set (float32)."""
    hidden = int(getattr(runner.model.config, "hidden_size", 0) or getattr(runner.model.config, "dim", 0))
    return sum(b.inputs["input_ids"].numel() for shard in data.shards for b in shard) * hidden * 4


def _chain_step(runner: _Runner, data: _Data, store: _Store, masks: Sequence[np.ndarray], j: int,
                carried: dict[tuple[int, int], torch.Tensor] | None
                ) -> tuple[dict[str, np.ndarray], dict[tuple[int, int], torch.Tensor] | None]:
    """Pruning step ``j`` evaluated from step ``j-1``'s states where the two agree (the layers below the lowest
    newly pruned head), keeping this step's states entering the layer step ``j+1`` will start from.

    ``carried`` maps (shard, batch) to the states entering ``_first_change(masks[j], masks[j-1])`` under step
    ``j-1``, or is None (then step ``j`` runs from layer 0). Returns its logits and what step ``j+1`` needs.
    """
    config = AblationConfig(f"prune:{int(masks[j].sum())}", masks[j])
    start = _first_change(masks[j], masks[j - 1] if j else None) if carried is not None else 0
    following = _first_change(masks[j + 1], masks[j]) if j + 1 < len(masks) else None
    keep = following if following is not None and max(start, 1) <= following < runner.num_layers else None
    nxt: dict[tuple[int, int], torch.Tensor] | None = {} if keep is not None else None
    parts = []
    for s, shard in enumerate(data.shards):
        stored = store.get(s, config)
        if stored is not None:
            parts.append(stored)
            nxt = None  # this shard's states were not computed: the next step starts over
            continue
        chunks = []
        for b, batch in enumerate(shard):
            states = None
            if start > 0:
                states = [None] * runner.num_layers
                states[start] = carried[(s, b)].to(runner.device)
            if keep is not None:
                logits, kept = runner.run_keeping(batch.inputs, states, config.mask, start, keep)
                if nxt is not None:
                    nxt[(s, b)] = kept.cpu()
            else:
                logits = runner.run(batch.inputs, states, config.mask[None], start)[0]
            chunks.append(logits.float().cpu().numpy())
        parts.append(np.concatenate(chunks, axis=0))
        store.put(s, config, parts[-1])
    return {config.id: _in_input_order(data, parts)}, nxt


def _pruning_curve(runner: _Runner, data: _Data, store: _Store, processes: _Processes, configs_per_batch: int,
                   score: Callable[[np.ndarray], float], importance: np.ndarray, step: float,
                   crossed: Callable[[float], bool], progress: bool, mode: str, carry_limit: int = 2**30
                   ) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Evaluate the pruning steps in order until one crosses the limit (kept) or no head is left.

    In one process, each step starts from the previous step's states at the lowest newly pruned layer (masks
    are nested), keeping one layer of states for the whole evaluation set (at most ``carry_limit`` bytes).
    Returns one ``{"pruned", "fraction", "value", "heads"}`` entry per step and its logits ``[n, C]``.
    """
    masks = pruning_masks(importance, step)
    total = importance.size
    chain = processes.world == 1 and runner.reuses and _carry_bytes(data, runner) <= carry_limit
    chunk = max(1, processes.world)  # one step per process at a time
    bar = _progress(progress and processes.is_main, len(masks), f"prune ({mode})", "step")
    entries: list[dict[str, Any]] = []
    found: list[np.ndarray] = []
    carried: dict[tuple[int, int], torch.Tensor] | None = None
    try:
        for first in range(0, len(masks), chunk):
            configs = [AblationConfig(f"prune:{int(m.sum())}", m) for m in masks[first : first + chunk]]
            if chain:
                got, carried = _chain_step(runner, data, store, masks, first, carried)
            else:
                got = _evaluate_configs(runner, data, configs, store, processes, configs_per_batch, progress=False)
            if bar is not None:
                bar.update(len(configs))
            for config in configs:
                value = score(got[config.id])
                entries.append({"pruned": int(config.mask.sum()), "fraction": int(config.mask.sum()) / total,
                                "value": value, "heads": [[int(l), int(h)] for l, h in zip(*np.nonzero(config.mask))]})
                found.append(got[config.id])
                if crossed(value) or not math.isfinite(value):
                    return entries, found
    finally:
        if bar is not None:
            bar.close()
    return entries, found


def _writer_for(writer: Any, logdir: str | os.PathLike | None):
    from bertwatch.summary import SummaryWriter

    if writer is None:
        return (SummaryWriter(os.fspath(logdir)), True) if logdir is not None else (None, False)
    if isinstance(writer, SummaryWriter):
        return writer, False
    if isinstance(writer, (str, os.PathLike)):
        return SummaryWriter(os.fspath(writer)), True
    return SummaryWriter.from_torch_writer(writer), False


def ablate(
    model: nn.Module,
    examples_or_dataset: Any,
    tokenizer: Any = None,
    task: str | None = None,
    compute_metrics: Callable | None = None,
    mode: str = "uniform",
    out_dir: str | os.PathLike | None = None,
    writer: Any = None,
    *,
    metric: str | None = None,
    greater_is_better: bool = True,
    logdir: str | os.PathLike | None = None,
    step: int = 0,
    keep_only: bool = True,
    prune: bool = True,
    prune_step: float = 0.1,
    prune_threshold: float = 0.9,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    batch_size: int = 32,
    configs_per_batch: int | None = None,
    shard_size: int = 256,
    max_length: int = 128,
    reuse: bool = True,
    resume: bool = True,
    distributed: bool | None = None,
    progress: bool = True,
    loss_fn: Callable | None = None,
) -> AblationResult:
    """Disable every head, every layer, each layer but one head, and prune by importance; score each with a
    paired bootstrap against the baseline.

    ``examples_or_dataset``: ``{"text", "text_pair", "label"}`` dicts (:func:`bertwatch.data.load_glue`), or a
    (HF) dataset with ``input_ids`` (+ ``token_type_ids``) and ``label``/``labels``, or GLUE text columns.
    The metric is ``compute_metrics``' (``metric`` names which key, default: the task's primary one or accuracy),
    else the task's GLUE metric, else accuracy (Pearson for regression). ``mode``: "uniform" (Kovaleva) or "zero"
    (Michel). Pruning removes ``max(1, int(prune_step * remaining))`` heads a step, least important first
    (importance computed once, on the evaluation set), until the metric falls below ``prune_threshold`` x
    baseline or no head is left. ``out_dir``: ablation.json, ablation.csv, report.html and the resumable
    partial.jsonl. ``writer`` (a bertwatch or torch SummaryWriter, or a run directory) or ``logdir`` receive the
    TensorBoard ablation summaries at ``step``. Runs split across processes under accelerate / torchrun.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    started = time.perf_counter()
    regression, num_labels = _check_model(model, task)
    num_layers, num_heads = model_shape(model)
    features, labels = _prepare(model, examples_or_dataset, tokenizer, max_length, regression)
    _check_labels(labels, regression, num_labels)
    pad_id = getattr(tokenizer, "pad_token_id", None)
    if pad_id is None:
        pad_id = getattr(model.config, "pad_token_id", None) or 0
    data = _Data(features, labels)
    _batches(data, batch_size, shard_size, int(pad_id))
    runner = _Runner(model, mode, reuse=reuse)
    processes = _Processes(distributed, cpu=runner.device.type == "cpu")
    if configs_per_batch is None:
        rows = 1024 if runner.device.type == "cuda" else 128
        configs_per_batch = max(1, rows // batch_size)
    metric_spec = _make_metric(task, compute_metrics, metric, labels, regression)
    out_path = Path(out_dir) if out_dir is not None else None
    fingerprint = _fingerprint(model, data, mode, batch_size, shard_size)
    store = _Store(out_path / "partial.jsonl" if (out_path is not None and resume) else None, fingerprint,
                   processes.is_main)
    processes.barrier()

    configs = sweep_configs(num_layers, num_heads, keep_only=keep_only)
    with torch.inference_mode():
        logits = _evaluate_configs(runner, data, configs, store, processes, configs_per_batch, progress,
                                  desc=f"ablate ({mode})")
    evaluated = time.perf_counter()
    _settle_metric(metric_spec, logits)
    baseline_logits = logits["baseline"]
    baseline = metric_spec.score(baseline_logits)

    pruning, importance, prune_logits = [], None, []
    importance_seconds = 0.0
    if prune:
        importance = _head_importance(model, data, regression, loss_fn)
        importance_seconds = time.perf_counter() - evaluated
        limit = baseline - (1 - prune_threshold) * abs(baseline) if greater_is_better \
            else baseline + (1 - prune_threshold) * abs(baseline)
        with torch.inference_mode():
            pruning, prune_logits = _pruning_curve(
                runner, data, store, processes, configs_per_batch, metric_spec.score, importance, prune_step,
                (lambda value: value < limit) if greater_is_better else (lambda value: value > limit),
                progress, mode)
        logits.update(zip((f"prune:{p['pruned']}" for p in pruning), prune_logits))
    pruned = time.perf_counter()

    names = [c.id for c in configs if c.id != "baseline"]
    boot = metric_spec.bootstrap(baseline_logits, [logits[i] for i in names] + prune_logits, n_resamples, seed,
                                 confidence)
    cells = boot.cells()
    index = {cid: i for i, cid in enumerate(names)}
    heads = np.stack([[cells[index[f"head:{l}:{h}"]] for h in range(num_heads)] for l in range(num_layers)])
    layers = np.stack([cells[index[f"layer:{l}"]] for l in range(num_layers)])
    keep = None
    if keep_only and num_heads > 1:
        keep = np.stack([[cells[index[f"keep:{l}:{h}"]] for h in range(num_heads)] for l in range(num_layers)])
    for j, entry in enumerate(pruning):
        entry.update(dict(zip(FIELDS, (float(v) for v in cells[len(names) + j]))))
    finished = time.perf_counter()

    baseline_metrics = metric_spec.all_metrics(baseline_logits) if metric_spec.all_metrics else {}
    result = AblationResult(
        task=task,
        mode=mode,
        metric=metric_spec.name,
        num_examples=data.size,
        baseline=float(boot.baseline),
        heads=heads,
        layers=layers,
        keep_only=keep,
        pruning=pruning,
        importance=importance,
        baseline_metrics={k: float(v) for k, v in baseline_metrics.items()},
        config={
            "model": getattr(model.config, "_name_or_path", "") or type(model).__name__,
            "model_type": _model_type(model),
            "layers": num_layers,
            "heads": num_heads,
            "mode": mode,
            "metric": metric_spec.name,
            "metric_source": "compute_metrics" if compute_metrics is not None else ("glue" if task else "built-in"),
            "greater_is_better": bool(greater_is_better),
            "n_resamples": int(n_resamples),
            "seed": int(seed),
            "confidence": float(confidence),
            "p_value": "two-sided bootstrap: min(1, 2*min(1+#(d<=0), 1+#(d>=0))/(R+1))",
            "prune_step": float(prune_step),
            "prune_threshold": float(prune_threshold),
            "importance": "E|dL/d gate| on the evaluation set, L2-normalised per layer, computed once",
            "batch_size": int(batch_size),
            "configs_per_batch": int(configs_per_batch),
            "max_length": int(max_length),
            "layer_reuse": runner.reuses,
            "first_token_last_layer": runner.last is not None,
            "processes": processes.world,
            "num_configurations": len(configs) + len(pruning),
            "seconds": {"sweep": round(evaluated - started, 3), "importance": round(importance_seconds, 3),
                        "pruning": round(pruned - evaluated - importance_seconds, 3),
                        "bootstrap": round(finished - pruned, 3)},
        },
        logits=logits,
    )
    if processes.is_main:
        if out_path is not None:
            write_outputs(result, out_path)
        sw, owned = _writer_for(writer, logdir)
        if sw is not None:
            try:
                sw.add_ablation(mode, result.metric, result.baseline, result.num_examples, result.heads.astype(np.float32),
                                result.layers.astype(np.float32), result.pruning_curve() if pruning else None, step=step)
            finally:
                sw.close() if owned else sw.flush()
    processes.barrier()
    return result


# --------------------------------------------------------------------------------------------------------
# Trainer integration


def run_ablation_on_trainer(
    trainer_or_model: Any,
    eval_dataset: Any,
    mode: str = "uniform",
    out_dir: str | os.PathLike | None = None,
    writer: Any = None,
    **kwargs: Any,
) -> AblationResult:
    """Run :func:`ablate` with what a ``Trainer`` knows: its model, tokenizer, ``compute_metrics``,
    ``metric_for_best_model``, eval batch size and global step (``kwargs`` override any of them).

    Meant for one process (``BertWatchCallback`` calls it on world process zero), so it does not split the work
    across processes unless ``distributed=True`` is passed and every process calls it.
    """
    trainer = trainer_or_model if hasattr(trainer_or_model, "model") and hasattr(trainer_or_model, "args") else None
    model = trainer.model if trainer is not None else trainer_or_model
    settings: dict[str, Any] = {}
    if trainer is not None:
        args = trainer.args
        settings["tokenizer"] = getattr(trainer, "processing_class", None)
        settings["compute_metrics"] = getattr(trainer, "compute_metrics", None)
        if getattr(args, "metric_for_best_model", None) and settings["compute_metrics"] is not None:
            settings["metric"] = args.metric_for_best_model
            if getattr(args, "greater_is_better", None) is not None:
                settings["greater_is_better"] = bool(args.greater_is_better)
        settings["batch_size"] = int(getattr(args, "per_device_eval_batch_size", 32) or 32)
        settings["step"] = int(getattr(trainer.state, "global_step", 0))
    settings["distributed"] = False
    settings.update(kwargs)
    if isinstance(eval_dataset, dict):
        eval_dataset = next(iter(eval_dataset.values()))
    tokenizer = settings.pop("tokenizer", None)
    compute_metrics = settings.pop("compute_metrics", None)
    task = settings.pop("task", None)
    return ablate(model, eval_dataset, tokenizer, task=task, compute_metrics=compute_metrics, mode=mode,
                  out_dir=out_dir, writer=writer, **settings)


class AblationCallback(TrainerCallback):
    """Runs the ablation sweep on the evaluation set when training ends.

    Summaries go to the Trainer's TensorBoard run (``bertwatch/ablation/{mode}/...``); the report, JSON and CSV
    to ``<output_dir>/bertwatch_ablation/`` (one sub-folder per mode when there are several). ``eval_dataset``,
    ``compute_metrics`` and ``task`` default to the Trainer's; other keyword arguments go to :func:`ablate`.
    """

    def __init__(
        self,
        modes: str | Sequence[str] = ("uniform",),
        eval_dataset: Any = None,
        compute_metrics: Callable | None = None,
        task: str | None = None,
        out_dir: str | os.PathLike | None = None,
        logdir: str | os.PathLike | None = None,
        **ablate_kwargs: Any,
    ):
        self.modes = (modes,) if isinstance(modes, str) else tuple(modes)
        for mode in self.modes:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}: use 'uniform' (Kovaleva) or 'zero' (Michel)")
        self.eval_dataset = eval_dataset
        self.compute_metrics = compute_metrics
        self.task = task
        self.out_dir = out_dir
        self.logdir = logdir
        self.ablate_kwargs = ablate_kwargs
        self.results: dict[str, AblationResult] = {}

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                     eval_dataloader: Any = None, **kwargs: Any) -> None:
        from bertwatch.callbacks._context import find_context, tensorboard_run_dir

        context = find_context()
        dataset = self.eval_dataset if self.eval_dataset is not None else context.eval_dataset
        if dataset is None and eval_dataloader is not None:
            dataset = eval_dataloader.dataset
        if dataset is None:
            raise ValueError("AblationCallback needs an evaluation set: give the Trainer an eval_dataset or pass "
                             "AblationCallback(eval_dataset=...)")
        compute = self.compute_metrics if self.compute_metrics is not None else context.compute_metrics
        trainer = context.trainer
        settings: dict[str, Any] = {"batch_size": int(getattr(args, "per_device_eval_batch_size", 32) or 32)}
        if getattr(args, "metric_for_best_model", None) and compute is not None:
            settings["metric"] = args.metric_for_best_model
            if getattr(args, "greater_is_better", None) is not None:
                settings["greater_is_better"] = bool(args.greater_is_better)
        settings.update(self.ablate_kwargs)
        run_dir = tensorboard_run_dir(args, context, self.logdir) if state.is_world_process_zero else None
        out_root = Path(self.out_dir) if self.out_dir is not None else Path(args.output_dir) / "bertwatch_ablation"
        model = model if model is not None else getattr(trainer, "model", None)
        tokenizer = processing_class if processing_class is not None else getattr(trainer, "processing_class", None)
        for mode in self.modes:
            out = out_root if len(self.modes) == 1 else out_root / mode
            self.results[mode] = ablate(
                model, dataset, tokenizer, task=self.task, compute_metrics=compute, mode=mode, out_dir=out,
                writer=run_dir, step=int(state.global_step), **settings,
            )


# --------------------------------------------------------------------------------------------------------
# Command line


def _ablate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertwatch ablate",
        description="Disable every head and every layer of a fine-tuned checkpoint (and prune it by importance); "
        "write ablation.json, ablation.csv, report.html and TensorBoard summaries with bootstrap intervals.",
    )
    parser.add_argument("--model", required=True, help="checkpoint folder of a fine-tuned sequence classifier")
    parser.add_argument("--task", required=True, help="GLUE task name, e.g. sst2, mrpc, cola, stsb")
    parser.add_argument("--glue-dir", default=None, help="local GLUE folder (default: $GLUE_DIR or $BERTWATCH_DATA/glue)")
    parser.add_argument("--split", default="dev", help="split to evaluate on (default: dev)")
    parser.add_argument("--limit", type=int, default=None, help="use the first N examples of the split (file order)")
    parser.add_argument("--mode", choices=MODES, default="uniform", help="uniform (Kovaleva) or zero (Michel)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--logdir", default=None, help="TensorBoard run folder for the summaries (default: OUT)")
    parser.add_argument("--metric", default=None, help="metric to compare (default: the task's primary metric)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--configs-per-batch", type=int, default=None, help="configurations stacked in one batch")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--device", default=None, help="torch device (default: cpu, or the process's device under accelerate)")
    parser.add_argument("--no-keep-only", action="store_true", help="skip the keep-one-head-per-layer configurations")
    parser.add_argument("--no-prune", action="store_true", help="skip the iterative pruning curve")
    parser.add_argument("--no-resume", action="store_true", help="start over even if OUT/partial.jsonl exists")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _load_classifier(path: str, device: str | None) -> tuple[nn.Module, Any]:
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    folder = Path(path).expanduser()
    looks_local = path.startswith((".", "/", "~")) or path.count("/") > 1
    if looks_local and not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {path!r} does not exist")
    try:
        config = AutoConfig.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"could not load {path!r}: {error}. Pass a folder saved with save_pretrained().") from error
    architectures = getattr(config, "architectures", None) or []
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ValueError(
            f"{path} is a {', '.join(architectures)} checkpoint without a sequence-classification head; "
            "fine-tune it on the task first (AutoModelForSequenceClassification + Trainer) and ablate that checkpoint"
        )
    model, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True)
    prefix = getattr(model, "base_model_prefix", "")
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix + ".")]
    if missing:
        raise ValueError(
            f"{path} has no trained classification head (missing {', '.join(sorted(missing)[:4])}); "
            "fine-tune it on the task first and ablate that checkpoint"
        )
    if device:
        model.to(device)
    return model.eval(), tokenizer


def cli_ablate(argv: Sequence[str]) -> int:
    """``bertwatch ablate --model CKPT --task NAME [--glue-dir DIR] [--split dev] [--limit N] [--mode M] --out DIR``."""
    args = _ablate_parser().parse_args(list(argv))
    from bertwatch.data import load_glue

    wanted = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    processes = _Processes(None, cpu=wanted.startswith("cpu"))
    device = args.device
    if device is None and processes.state is not None:
        device = str(processes.state.device)
    try:
        model, tokenizer = _load_classifier(args.model, device)
        examples = load_glue(args.task, split=args.split, glue_dir=args.glue_dir, limit=args.limit)
        result = ablate(
            model, examples, tokenizer, task=args.task, mode=args.mode, out_dir=args.out,
            logdir=args.logdir or args.out, metric=args.metric, n_resamples=args.resamples, seed=args.seed,
            batch_size=args.batch_size, configs_per_batch=args.configs_per_batch, max_length=args.max_length,
            keep_only=not args.no_keep_only, prune=not args.no_prune, resume=not args.no_resume,
            progress=not args.quiet,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"bertwatch ablate: {error}", file=sys.stderr)
        return 2
    if processes.is_main:
        best = np.nanargmax(result.heads[..., 1])
        l, h = divmod(int(best), result.shape[1])
        print(
            f"bertwatch ablate: {result.task} {result.mode}, {result.num_examples} examples, baseline "
            f"{result.metric} {result.baseline:.4f}; best single-head change {result.heads[l, h, 1]:+.4f} "
            f"(layer {l}, head {h}, p={result.heads[l, h, 4]:.3f}) -> {args.out}/ablation.json, ablation.csv, report.html"
        )
    return 0
