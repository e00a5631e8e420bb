"""Find the transformers encoder inside whatever wraps it, and choose its inputs from its own signature.

Users hand bertwatch the model their Trainer trains: a peft model, a ``torch.compile``'d module, a DDP wrapper, a
``SentenceTransformer``. Statistics are taken on the encoder inside, as trained (peft's LoRA weights included),
with every input the tokenizer produced that the encoder takes. A wrapper bertwatch does not know, or an input
the encoder cannot take, is refused with what to do, never dropped silently.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = [
    "LABEL_NAMES",
    "KNOWN_WRAPPERS",
    "UnsupportedInputError",
    "UnsupportedModelError",
    "not_watched",
    "Unwrapped",
    "input_names",
    "select_inputs",
    "unwrap",
]

#: Batch keys that carry targets, never model inputs (the Trainer's defaults).
LABEL_NAMES = ("labels", "label", "label_ids")
#: What ``unwrap`` removes, for error messages and the docs.
KNOWN_WRAPPERS = (
    "peft PeftModel / PeftMixedModel / LoraModel",
    "torch.compile (OptimizedModule)",
    "DistributedDataParallel / DataParallel",
    "sentence-transformers SentenceTransformer",
    "accelerate's prepare() (DDP, or a forward patched for mixed precision)",
)
_MAX_DEPTH = 8


class UnsupportedModelError(ValueError):
    """bertwatch cannot capture this model's attention exactly (or cannot find the encoder in it)."""


#: What follows the cause when bertwatch does not watch a model's family: the families it watches, where their list
#: is, and how to train the model without bertwatch.
NOT_WATCHED = (
    "bertwatch watches BERT-family encoders (bert, roberta, deberta-v2/v3, electra, modernbert, ...; the list is "
    "under 'Supported models' in bertwatch's README and docs/faq.md).\n"
    "To train this model without bertwatch, remove bertwatch.watch(trainer) or the BertWatchCallback from the "
    "script, or run it with python instead of bertwatch run"
)


def not_watched(cause: str) -> UnsupportedModelError:
    """The error for a model whose family bertwatch does not watch: ``cause`` on the first line, then
    :data:`NOT_WATCHED`."""
    return UnsupportedModelError(f"{cause}.\n{NOT_WATCHED}")


class UnsupportedInputError(UnsupportedModelError):
    """A batch holds an input the encoder cannot take; bertwatch refuses rather than drop it."""


@dataclass(frozen=True)
class Unwrapped:
    """The encoder bertwatch captures, the tokenizer its wrapper carries (or None), and the wrappers removed."""

    model: nn.Module
    tokenizer: Any = None
    wrappers: tuple[str, ...] = ()


def _is_transformers_model(model: Any) -> bool:
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel)


def _peft_inner(model: Any) -> nn.Module | None:
    """The transformers model inside a peft wrapper, with its adapters injected (the model as trained)."""
    if "peft" not in sys.modules:  # not imported: nothing can be a peft model (and importing it is slow)
        return None
    try:
        from peft import PeftMixedModel, PeftModel
        from peft.tuners.tuners_utils import BaseTuner
    except ImportError:
        return None
    if isinstance(model, PeftModel):
        return model.get_base_model()
    if isinstance(model, PeftMixedModel):
        return model.base_model.model
    if isinstance(model, BaseTuner):
        return model.model
    return None


def _sentence_transformer(model: Any) -> tuple[nn.Module, Any] | None:
    """The ``auto_model`` and tokenizer of a SentenceTransformer's single Transformer module."""
    if "sentence_transformers" not in sys.modules:
        return None
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    if not isinstance(model, SentenceTransformer):
        return None
    # only sentence-transformers' Transformer module holds an auto_model
    inner = [m for m in model.modules() if isinstance(getattr(m, "auto_model", None), nn.Module)]
    if len(inner) != 1:
        raise UnsupportedModelError(
            f"this SentenceTransformer has {len(inner)} transformer modules; bertwatch watches exactly one encoder. "
            "Pass the encoder you want watched (its module's .auto_model) and its tokenizer instead"
        )
    # a custom module with an auto_model may carry no tokenizer, nor then the SentenceTransformer (it asks module 0)
    return inner[0].auto_model, getattr(inner[0], "tokenizer", None) or getattr(model, "tokenizer", None)


def _parallel_inner(model: Any) -> nn.Module | None:
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    if isinstance(model, (DistributedDataParallel, DataParallel)):
        return model.module
    return None


def _refuse_sharded(model: Any) -> None:
    """FSDP (v1) and DeepSpeed keep parameters sharded outside their own forward: no direct pass is exact."""
    name = type(model).__name__
    if name in ("FullyShardedDataParallel", "DeepSpeedEngine"):
        raise UnsupportedModelError(
            f"bertwatch cannot run its probe pass inside a {name} wrapper (the encoder's parameters are sharded "
            "outside the wrapper's forward). Give bertwatch the model the Trainer was built with (the Trainer passes "
            "it to callbacks), or use FSDP2 (fully_shard), which keeps the transformers model as the module"
        )


def unwrap(model: Any) -> Unwrapped:
    """Remove known wrappers down to a transformers ``PreTrainedModel``; refuse anything else with what to do.

    Order does not matter (e.g. DDP around peft around a compiled module). The result shares its parameters with
    ``model``: statistics describe the model being trained.
    """
    wrappers: list[str] = []
    tokenizer = None
    current = model
    for _ in range(_MAX_DEPTH):
        _refuse_sharded(current)
        inner = _peft_inner(current)
        if inner is None:
            found = _sentence_transformer(current)
            if found is not None:
                inner, tokenizer = found
        if inner is None:
            inner = _parallel_inner(current)
        # only torch.compile's OptimizedModule holds an _orig_mod
        if inner is None and isinstance(getattr(current, "_orig_mod", None), nn.Module):
            inner = current._orig_mod  # torch.compile's OptimizedModule
        if inner is None:
            break
        wrappers.append(type(current).__name__)
        current = inner
    if not _is_transformers_model(current):
        chain = " -> ".join([*wrappers, type(current).__name__])
        raise UnsupportedModelError(
            f"bertwatch needs a transformers PreTrainedModel; got {chain}. It unwraps "
            f"{'; '.join(KNOWN_WRAPPERS)}. For another wrapper or a custom module holding an encoder, give "
            "bertwatch the transformers model inside it (and its tokenizer)"
        )
    return Unwrapped(current, tokenizer, tuple(wrappers))


def input_names(model: Any) -> frozenset[str]:
    """The named inputs of the unwrapped encoder's ``forward`` (from its class, so a patched ``forward`` or
    ``*args, **kwargs`` of a wrapper cannot hide them)."""
    encoder = unwrap(model).model
    params = inspect.signature(type(encoder).forward).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in params if p.kind in named and p.name != "self")


def select_inputs(
    model: Any, batch: Mapping[str, Any], label_names: Iterable[str] = (), *, keep_labels: bool = False
) -> dict[str, Any]:
    """The entries of ``batch`` to call the unwrapped encoder with.

    Label keys (``LABEL_NAMES`` and ``label_names``) are left out unless ``keep_labels`` and the encoder takes
    them. Any other key the encoder cannot take raises ``UnsupportedInputError`` naming it: a dropped input
    (segment ids, say) would change every statistic without a warning.
    """
    accepts = input_names(model)
    labels = set(LABEL_NAMES) | set(label_names)
    refused = sorted(k for k in batch if k not in accepts and k not in labels)
    if refused:
        encoder = type(unwrap(model).model).__name__
        raise UnsupportedInputError(
            f"the batch holds {refused}, which {encoder}.forward does not take; bertwatch will not drop model "
            f"inputs silently. It takes {sorted(accepts - labels)}: tokenize with the model's own tokenizer, remove "
            "those columns from the dataset or collator output, or pass probe_texts=/probe_dataset= with only "
            "what the model takes"
        )
    return {k: v for k, v in batch.items() if k in accepts and (keep_labels or k not in labels)}
