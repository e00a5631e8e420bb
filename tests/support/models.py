"""Tiny random encoders of every supported family, built offline for fast tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator

import numpy as np
import torch
import transformers as T

COMMON = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    num_labels=2,
)


def tiny_config(model_type: str) -> T.PretrainedConfig:
    """A 3-layer, 4-head configuration of ``model_type`` with a 120-token vocabulary."""
    if model_type == "distilbert":
        return T.DistilBertConfig(
            vocab_size=120, dim=32, n_layers=3, n_heads=4, hidden_dim=37, max_position_embeddings=64, num_labels=2
        )
    if model_type == "albert":
        return T.AlbertConfig(embedding_size=16, **COMMON)
    if model_type == "modernbert":
        return T.ModernBertConfig(
            **COMMON,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
            local_attention=4,
            global_attn_every_n_layers=2,
        )
    if model_type == "mobilebert":
        return T.MobileBertConfig(
            **{**COMMON, "hidden_size": 32},
            embedding_size=16,
            intra_bottleneck_size=16,
            true_hidden_size=16,
            num_feedforward_networks=1,
        )
    classes = {
        "bert": T.BertConfig,
        "roberta": T.RobertaConfig,
        "xlm-roberta": T.XLMRobertaConfig,
        "camembert": T.CamembertConfig,
        "electra": T.ElectraConfig,
        "ernie": T.ErnieConfig,
    }
    return classes[model_type](**COMMON)


def tiny_model(model_type: str, seed: int = 0) -> T.PreTrainedModel:
    """A sequence classifier of ``model_type`` with random weights, in eval mode."""
    torch.manual_seed(seed)
    return T.AutoModelForSequenceClassification.from_config(tiny_config(model_type)).eval()


def padded_batch(batch: int = 3, length: int = 10, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random ids with right padding of different lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    for b in range(1, batch):
        mask[b, max(2, length - 3 * b) :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask}


def bert_with_head(
    cls: type, tokenizer, layers: int = 2, heads: int = 4, seed: int = 0, scale: float | None = None, **extra
):
    """A random ``cls`` (a BERT head class) sized for ``tokenizer``: hidden 32, ``layers`` x ``heads``. With
    ``scale`` every weight matrix is redrawn N(0, scale²) so that each head changes the outputs."""
    torch.manual_seed(seed)
    config = T.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=37,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )
    model = cls(config)
    return model if scale is None else lively(model, scale, seed)


def lively(model: torch.nn.Module, scale: float = 0.3, seed: int = 0) -> torch.nn.Module:
    """``model`` with every weight matrix redrawn N(0, scale²) from a generator seeded with ``seed`` (biases and
    norms kept), so that each head moves the outputs well beyond float noise; modified in place and returned."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model


def unit_masks(layers: int, heads: int):
    """(unit, where, mask ``[layers, heads]``) for the baseline, every single head and every whole layer."""
    yield "baseline", None, np.zeros((layers, heads), dtype=bool)
    for l in range(layers):
        for h in range(heads):
            mask = np.zeros((layers, heads), dtype=bool)
            mask[l, h] = True
            yield "head", (l, h), mask
        mask = np.zeros((layers, heads), dtype=bool)
        mask[l] = True
        yield "layer", l, mask


class OneMember:
    """A probe-pass watched (``callbacks.watched_run``) with one member that measures ``names`` at every event and
    keeps ``maps`` examples' maps: what a callback does, without the Trainer. ``history`` holds
    ``(step, grids)`` per event that measured."""

    def __init__(self, model, settings, names: Collection[str], args, state, event, maps: int = 0) -> None:
        from bertwatch.callbacks._context import TrainerContext
        from bertwatch.callbacks.members import Member
        from bertwatch.callbacks.pacing import MapsCadence, ProbePacing
        from bertwatch.callbacks.watched_run import join

        self.watched = join(model, settings, args, state, event, TrainerContext())
        cadence = MapsCadence(maps, 1, fixed=True) if maps else None
        member = Member("test", frozenset(names), ProbePacing(1, 0.02), maps=cadence, log_to_trackers=False)
        self.handle, self.history = self.watched.add(member), []

    def run(self, event: str, state) -> None:
        """Handle ``event`` at ``state.global_step``, keeping what it measured."""
        for result in self.watched.handle(event, int(state.global_step), self.handle):
            grids = result.of(self.handle)
            if grids is not None:
                self.history.append((result.step, grids))

    @property
    def context(self):
        return self.watched.context

    @property
    def probe(self):
        return self.watched.context.probe

    def close(self) -> None:
        self.watched.leave(self.handle)


def hooked_output(model: torch.nn.Module, batch: dict[str, torch.Tensor], handles: list) -> torch.Tensor:
    """``last_hidden_state`` of one no-grad forward under hand-written hooks, which are removed afterwards."""
    try:
        with torch.no_grad():
            return model(**batch).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def self_attention_hooks(model: torch.nn.Module, hook_for: Callable[[int], Callable]) -> Iterator[None]:
    """Within the block, each encoder layer ``l``'s self-attention module carries the forward hook ``hook_for(l)``
    (called with the module's args, kwargs and output; a returned value replaces the output); removed afterwards."""
    layers = model.base_model.encoder.layer
    handles = [
        layer.attention.self.register_forward_hook(hook_for(l), with_kwargs=True) for l, layer in enumerate(layers)
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def tiny_classifier(family: str = "bert") -> T.PreTrainedModel:
    """A ``tiny_config(family)`` sequence classifier with weights drawn N(0, 0.3²) (seed 0), in eval mode."""
    config = tiny_config(family)
    config.initializer_range = 0.3
    torch.manual_seed(0)
    return T.AutoModelForSequenceClassification.from_config(config).eval()
