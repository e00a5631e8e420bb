"""Encoders with attention heads physically removed: the modelling code of a ``bertwatch prune`` folder.

This file imports only torch and transformers: ``bertwatch prune`` copies it into the model folder it writes (as
``modeling_bertwatch_pruned.py``, followed by one small subclass per saved Auto head), so that

>>> AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)

rebuilds the smaller model in any environment. The configuration keeps the family's own settings (so the head
size stays ``hidden_size / num_attention_heads``) plus ``bertwatch_kept_heads``: for every layer, the original
indices of the heads it keeps, ``{"0": [0, 3, 5], ...}``.

What a pruned layer computes is exactly what the full model computes with the removed heads' context vectors set
to zero (Michel et al.'s masking, bertwatch's "zero" mode): the kept heads' rows of Q, K, V (weights and biases)
and the matching columns of the output projection remain, the output projection's bias stays. A layer that keeps
no head loses its whole attention computation: its attention block returns the output bias (then the family's
dropout, residual and normalisation as before), which is what zeroing every head gives.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

#: The configuration key holding the kept heads, ``{str(layer): [head, ...]}``.
KEPT_HEADS_KEY = "bertwatch_kept_heads"

#: Per family, relative to ``model.base_model``: the layer list; from a layer, the attention module whose heads
#: are cut, its Q/K/V projections (a 1-tuple names a fused [q; k; v] projection), the output projection, and
#: what replaces the attention module when no head is left: "context" returns a zero-width context for the
#: family's own output block; otherwise the names of the output projection, dropout and normalisation it holds.
_BERT_LIKE = ("encoder.layer", "attention.self", ("query", "key", "value"), "attention.output.dense", "context")
FAMILIES: dict[str, tuple[str, str, tuple[str, ...], str, Any]] = {
    **dict.fromkeys(
        (
            "bert",
            "roberta",
            "camembert",
            "data2vec-text",
            "electra",
            "ernie",
            "layoutlm",
            "markuplm",
            "roc-bert",
            "splinter",
            "xlm-roberta",
            "xlm-roberta-xl",
            "mobilebert",
        ),
        _BERT_LIKE,
    ),
    "distilbert": ("transformer.layer", "attention", ("q_lin", "k_lin", "v_lin"), "attention.out_lin", ("out_lin",)),
    "albert": (
        "encoder.albert_layer_groups.0.albert_layers",
        "attention",
        ("query", "key", "value"),
        "attention.dense",
        ("dense", "output_dropout", "LayerNorm"),
    ),
    "deberta-v2": (
        "encoder.layer",
        "attention.self",
        ("query_proj", "key_proj", "value_proj", "pos_key_proj", "pos_query_proj"),
        "attention.output.dense",
        "context",
    ),
    "mpnet": ("encoder.layer", "attention.attn", ("q", "k", "v"), "attention.attn.o", ("o",)),
    "modernbert": ("layers", "attn", ("Wqkv",), "attn.Wo", ("Wo", "out_drop")),
}


def family(config: Any) -> str:
    """The family name of ``config`` as FAMILIES spells it (``model_type`` with dashes): the rule of
    ``bertwatch.core.families.model_family``, written here again only because this file may import nothing of
    bertwatch (it is copied into pruned model folders)."""
    return str(config.model_type).replace("_", "-")


def head_counts(config: Any) -> tuple[int, int, int]:
    """(layers, heads per layer, head size) of the unpruned ``config``: the one reading of an encoder's shape from
    any supported configuration (DistilBERT's ``n_layers``/``n_heads``/``dim`` answer to the common names through
    its ``attribute_map``; MobileBERT's attention works on its ``true_hidden_size``)."""
    layers, heads = int(config.num_hidden_layers), int(config.num_attention_heads)
    width = int(config.true_hidden_size if family(config) == "mobilebert" else config.hidden_size)
    return layers, heads, width // heads


def recorded_heads(config: Any) -> dict[str, list[int]] | None:
    """The kept heads ``config`` records (``{str(layer): [head, ...]}``), or None for a model never pruned."""
    return getattr(config, KEPT_HEADS_KEY, None)  # only the config of a pruned folder has this key


def kept_heads(config: Any) -> dict[int, list[int]]:
    """The kept heads per layer recorded in ``config`` (every layer, every head when it records none)."""
    layers, heads, _ = head_counts(config)
    recorded = recorded_heads(config) or {}
    return {layer: [int(h) for h in recorded.get(str(layer), range(heads))] for layer in range(layers)}


def _get(module: nn.Module, path: str) -> Any:
    for part in path.split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return module


def _set(module: nn.Module, path: str, value: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_get(module, parent) if parent else module, name, value)


class NoHeads(nn.Module):
    """The attention computation of a layer that keeps no head: a zero-width context, or, for families whose
    attention module also projects (and normalises), the projection's bias through the same dropout, residual
    and normalisation. Submodules keep their original names, so the weights load under the same keys."""

    def __init__(self, parts: dict[str, nn.Module]) -> None:
        super().__init__()
        self.names = list(parts)
        for name, part in parts.items():
            setattr(self, name, part)

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        out = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
        if not self.names:
            return out, None
        out = getattr(self, self.names[0])(out)
        if len(self.names) > 1:
            out = getattr(self, self.names[1])(out)
        if len(self.names) > 2:
            out = getattr(self, self.names[2])(hidden_states + out)
        return out, None


def _rows(kept: list[int], heads: int, size: int, chunks: int) -> torch.Tensor:
    """Output rows of the kept heads in a projection of ``chunks`` stacked [heads * size] blocks."""
    one = [h * size + i for h in kept for i in range(size)]
    return torch.tensor([c * heads * size + r for c in range(chunks) for r in one], dtype=torch.long)


def _cut(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A copy of ``linear`` keeping ``index`` along its output (dim 0) or input (dim 1) features."""
    weight = linear.weight.detach().index_select(dim, index.to(linear.weight.device))
    bias = None if linear.bias is None else linear.bias.detach()
    if bias is not None and dim == 0:
        bias = bias.index_select(0, index.to(bias.device))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
        out = torch.nn.utils.skip_init(
            nn.Linear, weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype
        )
    with torch.no_grad():
        out.weight.copy_(weight)
        if bias is not None:
            out.bias.copy_(bias)
    return out


def _slice_position_bias(kept: torch.Tensor):
    """A forward pre-hook giving MPNet's shared relative-position bias [batch, heads, query, key] only the kept
    heads (it is computed once for all layers with every head)."""

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if len(args) > 2 and args[2] is not None:
            args = (*args[:2], args[2].index_select(1, kept.to(args[2].device)), *args[3:])
        elif kwargs.get("position_bias") is not None:
            kwargs = {
                **kwargs,
                "position_bias": kwargs["position_bias"].index_select(1, kept.to(kwargs["position_bias"].device)),
            }
        return args, kwargs

    return hook


def shrink(model: nn.Module, kept: dict[int, list[int]]) -> nn.Module:
    """Remove, in place, every head of ``model`` not in ``kept`` (``{layer: [heads kept]}``, original indices).

    Q/K/V rows and output-projection columns of the removed heads are dropped from the existing weights; a layer
    keeping no head gets :class:`NoHeads`. Returns ``model``. Raises ValueError for a family missing from
    FAMILIES, or an ALBERT whose shared layer would be cut differently in different layers.
    """
    config = model.config
    name = family(config)
    if name not in FAMILIES:
        raise ValueError(
            f"cannot prune heads of a {name!r} model: supported families are {', '.join(sorted(FAMILIES))}"
        )
    layers_path, attn_path, projections, out_path, empty = FAMILIES[name]
    layers, heads, size = head_counts(config)
    base = model.base_model
    modules = _get(base, layers_path)
    if name == "albert":
        if int(config.num_hidden_groups) != 1 or int(config.inner_group_num) != 1:
            raise ValueError(
                "cannot prune an ALBERT with several layer groups; only num_hidden_groups=1, inner_group_num=1"
            )
        if any(sorted(kept[layer]) != sorted(kept[0]) for layer in range(layers)):
            raise ValueError(
                "ALBERT shares one layer's weights across all layers: prune the same heads in every layer "
                "(e.g. take the heads the pruning order names in any layer for all of them)"
            )
        targets = {0: sorted(kept[0])}
    else:
        targets = {layer: sorted(kept[layer]) for layer in range(layers)}
    for index, keep in targets.items():
        if keep == list(range(heads)):
            continue
        layer = modules[index]
        attention = _get(layer, attn_path)
        if not keep:
            out = _get(layer, out_path)
            parts: dict[str, nn.Module] = {}
            if empty != "context":
                parts = {part: getattr(attention, part) for part in empty}
                parts[empty[0]] = _cut(out, torch.zeros(0, dtype=torch.long), 1)
            else:
                _set(layer, out_path, _cut(out, torch.zeros(0, dtype=torch.long), 1))
            _set(layer, attn_path, NoHeads(parts))
            continue
        chunks = 3 if len(projections) == 1 else 1
        rows = _rows(keep, heads, size, chunks)
        for projection in projections:
            # DeBERTa-v2 has pos_key_proj / pos_query_proj only when it does not share the content projections
            if isinstance(getattr(attention, projection, None), nn.Linear):
                setattr(attention, projection, _cut(getattr(attention, projection), rows, 0))
        _set(layer, out_path, _cut(_get(layer, out_path), _rows(keep, heads, size, 1), 1))
        for attribute in ("num_attention_heads", "n_heads", "num_heads"):
            if hasattr(attention, attribute):
                setattr(attention, attribute, len(keep))
        if hasattr(attention, "all_head_size"):
            attention.all_head_size = len(keep) * size
        if name == "mpnet":
            attention.register_forward_pre_hook(_slice_position_bias(torch.tensor(keep)), with_kwargs=True)
    return model


def pruned_subclass(base: type) -> type:
    """A subclass of the transformers class ``base`` that shrinks itself from its configuration's kept heads at
    construction, before ``from_pretrained`` loads the (smaller) weights."""

    def __init__(self: nn.Module, config: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, config, *args, **kwargs)
        shrink(self, kept_heads(config))

    return type(f"Pruned{base.__name__}", (base,), {"__init__": __init__, "__module__": base.__module__})


#: Written once after this file in a pruned folder, before the subclasses.
SUBCLASS_HEADER = "\n\nimport transformers  # noqa: E402\n"
SUBCLASS_TEMPLATE = '''

class Pruned{name}(transformers.{name}):
    """transformers' {name} with the heads named in config.{key} only."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        shrink(self, kept_heads(config))
'''
