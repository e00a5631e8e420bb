"""Evaluate stacked configurations on one batch, reusing the baseline's hidden states below the first disabled
layer; the model's own code runs every layer and the task head."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.skipping import SkippingLayer, supports
from bertwatch.core.families import model_family
from bertwatch.core.modes import check_mode
from bertwatch.heads.capture import Intervention, capture, model_shape
from bertwatch.heads.sharding import is_sharded

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

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: Any = None,
        encoder_attention_mask: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        # the encoder's own keywords (its key-value cache under this transformers version's name) go on as given
        attention = self.inner.attention
        context, _ = attention.self(hidden_states, attention_mask=attention_mask, **kwargs)
        first = attention.output(context[:, :1], hidden_states[:, :1])
        return self.inner.feed_forward_chunk(first)


class _FirstTokenDistilLayer(nn.Module):
    """DistilBERT's last block with its feed-forward part on the first token only."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.inner = layer

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> torch.Tensor:
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
        try:
            owner = layer.get_submodule(path)
            linears = [owner.get_submodule(n) for n in names]
        except AttributeError:  # not this layout
            continue
        if all(isinstance(linear, nn.Linear) for linear in linears):
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
    if model_family(model.config) not in _REUSE_TYPES:
        return None
    path = "transformer.layer" if model_family(model.config) == "distilbert" else "encoder.layer"
    try:
        layers = model.base_model.get_submodule(path)
    except AttributeError:  # a wrapper's base_model (peft's tuner around a task model) holds no layer list
        return None
    if isinstance(layers, nn.ModuleList) and len(layers) == num_layers:
        return layers
    return None


def _first_token_layer(model: nn.Module, layers: nn.ModuleList | None) -> nn.Module | None:
    if layers is None or type(model).__name__ not in _FIRST_TOKEN_HEADS:
        return None
    last = layers[-1]
    if all(hasattr(last, a) for a in ("sa_layer_norm", "ffn", "output_layer_norm", "attention")):
        return _FirstTokenDistilLayer(last)
    return _FirstTokenBertLayer(last) if supports(last) else None


class Runner:
    """Evaluates stacked configurations on one batch, reusing the baseline's states below the first disabled layer.

    Sharded weights (FSDP) gather each layer's parameters in that layer's own forward hooks, which swapped or
    partly called layers would bypass: a sharded model runs every layer whole (no reuse).
    """

    def __init__(self, model: nn.Module, mode: str, reuse: bool = True):
        self.model = model
        self.mode = check_mode(mode)
        self.num_layers, self.num_heads = model_shape(model)
        self.sharded = is_sharded(model)
        reuse = reuse and not self.sharded
        self.layers = _layer_list(model, self.num_layers) if reuse else None
        self.last = _first_token_layer(model, self.layers) if reuse else None
        #: One configuration at a time runs through SkippingLayer (BERT-style layers; see _skipping).
        self.skips = self.layers is not None and all(supports(layer) for layer in self.layers)
        self._skip_cache: dict[tuple[int, bytes, bool], nn.Module] = {}
        self.device = next(model.parameters()).device
        #: Token-level outputs are padded to this many positions, so that batches of any length concatenate.
        self.pad_to: int | None = None
        #: Masked LM: the outputs are the negative log-likelihood of each labelled token ``[B, T, 1]`` (0 elsewhere).
        self.token_nll = False

    def outputs(self, output: Any, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The head's outputs as one tensor: ``logits``, QA's start and end logits stacked ``[B, T, 2]``, or the
        masked-LM token NLL; token-level outputs padded (with zeros) to ``pad_to`` positions."""
        start = getattr(output, "start_logits", None)  # only a question-answering head's output has them
        logits = torch.stack([start, output.end_logits], dim=-1) if start is not None else output.logits
        if self.token_nll:
            labels = inputs["labels"]
            logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.clamp_min(0)[..., None])
            logits = torch.where(labels[..., None] != -100, -logp, torch.zeros_like(logp))
        if self.pad_to is not None and logits.dim() == 3 and logits.shape[1] < self.pad_to:
            logits = nn.functional.pad(logits, (0, 0, 0, self.pad_to - logits.shape[1]))
        return logits

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

    def baseline(
        self, inputs: Mapping[str, torch.Tensor], cache: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Baseline logits ``[B, C]`` and, with ``cache``, the hidden states entering each layer."""
        inputs = self._to_device(inputs)
        states: list[torch.Tensor | None] = [None] * self.num_layers
        with self._swapped(self._last()):
            hooks = []
            if cache and self.layers is not None:
                for i in range(self.num_layers):
                    hooks.append(self.layers[i].register_forward_pre_hook(state_saver(states, i), with_kwargs=True))
            try:
                with capture(self.model, record=False):
                    logits = self.outputs(self.model(**inputs), inputs)
            finally:
                for hook in hooks:
                    hook.remove()
        return logits, (states if cache and self.layers is not None else None)

    def _skipping(self, masks: np.ndarray, start: int) -> dict[int, nn.Module] | None:
        """For one configuration (``masks`` ``[1, layers, heads]``) on BERT-style layers: the
        :class:`SkippingLayer` of every layer from ``start`` up with a disabled head (and of the last layer when the
        task head reads its first token only); None where the layers are not all BERT-style."""
        if masks.shape[0] != 1 or not self.skips:
            return None
        mask = np.asarray(masks[0], dtype=bool)
        first = self.last is not None
        out = {}
        for i in range(start, self.num_layers):
            last = first and i == self.num_layers - 1
            if not (mask[i].any() or last):
                continue
            key = (i, mask[i].tobytes(), last)
            if key not in self._skip_cache:
                if len(self._skip_cache) >= 4 * self.num_layers:
                    self._skip_cache.clear()
                self._skip_cache[key] = SkippingLayer(self.layers[i], mask[i], self.mode, first_token=last)
            out[i] = self._skip_cache[key]
        return out

    def run(
        self, inputs: Mapping[str, torch.Tensor], states: list[torch.Tensor] | None, masks: np.ndarray, start: int
    ) -> torch.Tensor:
        """Logits ``[k, B, C]`` of ``k`` configurations (masks ``[k, layers, heads]``) whose first disabled layer is
        ``start`` or later, stacked into one batch."""
        return self._run(inputs, states, masks, start, ())[0]

    def _run(
        self,
        inputs: Mapping[str, torch.Tensor],
        states: list[torch.Tensor] | None,
        masks: np.ndarray,
        start: int,
        keep: Sequence[int],
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """:meth:`run`, also keeping the hidden states entering each layer of ``keep``. One configuration on
        BERT-style layers runs through :class:`SkippingLayer` (disabled heads never computed); otherwise every
        head is computed and the intervention disables the marked ones."""
        inputs = self._to_device(inputs)
        k, size = masks.shape[0], next(iter(inputs.values())).shape[0]
        skipping = self._skipping(masks, start)
        if skipping is None:
            rows = size * (inputs["input_ids"].shape[1] if inputs["input_ids"].dim() == 3 else 1)  # x choices
            per_example = torch.as_tensor(masks, dtype=torch.bool, device=self.device).repeat_interleave(rows, dim=0)
            intervention = Intervention.disable(per_example, self.mode)
            replacements = self._last()
        else:
            intervention, replacements = None, dict(skipping)
        stacked = {name: value.repeat(k, *([1] * (value.dim() - 1))) for name, value in inputs.items()}
        skip = self.layers is not None and states is not None and 0 < start < self.num_layers
        if skip:
            stub = _Cached(states[start].repeat(k, 1, 1))
            replacements.update({i: stub for i in range(start)})
        shared = contextlib.nullcontext()
        if self.layers is not None and (skip or start == 0) and skipping is None:
            shared = _tiled_projections(self.layers[start], k)  # layer start sees k copies of the same states
        kept: list[torch.Tensor | None] = [None] * self.num_layers
        # capture first: it verifies the model (once per configuration) before any layer is swapped
        with capture(self.model, record=False, intervention=intervention) as cap, self._swapped(replacements), shared:
            hooks = [self.layers[l].register_forward_pre_hook(state_saver(kept, l), with_kwargs=True) for l in keep]
            if skip:
                hooks.append(self.layers[start].register_forward_pre_hook(lambda *_: cap.reset(start_layer=start)))
            try:
                logits = self.outputs(self.model(**stacked), stacked)
            finally:
                for hook in hooks:
                    hook.remove()
        return logits.reshape(k, size, *logits.shape[1:]), {l: kept[l] for l in keep}

    def run_keeping(
        self,
        inputs: Mapping[str, torch.Tensor],
        states: list[torch.Tensor] | None,
        mask: np.ndarray,
        start: int,
        keep: Sequence[int],
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Logits ``[B, C]`` of one configuration and the hidden states entering each layer of ``keep`` (all
        above ``start``), ``{layer: [B, T, hidden]}``."""
        if self.layers is None or any(not start < l < self.num_layers for l in keep):
            raise ValueError(f"cannot keep the states entering layers {list(keep)} of a pass that starts at {start}")
        logits, kept = self._run(inputs, states, mask[None], start, keep)
        return logits[0], kept


def state_saver(states: list, index: int) -> Callable:
    def save(module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs.get("hidden_states", kwargs.get("x"))
        states[index] = hidden.detach()

    return save


#: Share of the accelerator's free memory that stacked configurations may fill (the rest: allocator slack, cache).
MEMORY_SHARE = 0.5
#: Rows (examples x configurations) per forward on a CPU, where stacking past a few hundred rows gains nothing.
CPU_ROWS = 128
#: Upper bound on configurations per forward, whatever the memory.
MAX_CONFIGS = 512


def row_bytes(config: Any, length: int, dtype_bytes: int) -> int:
    """Peak activation bytes of one example row in one encoder layer at sequence ``length`` in inference: the
    scores, float32 softmax, probabilities and intervention temporaries ``[heads, L, L]`` and the hidden-size
    tensors (query, key, value, context, output, residual, intermediate) ``[L, ...]``."""
    heads, hidden = int(config.num_attention_heads), int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", 4 * hidden) or 4 * hidden)  # DistilBertConfig has none
    attention = heads * length * length * (3 * dtype_bytes + 4)
    states = length * (6 * hidden + intermediate) * dtype_bytes
    return attention + states


def configs_that_fit(free_bytes: int, batch_size: int, per_row: int) -> int:
    """How many configurations of ``batch_size`` rows each fit in ``MEMORY_SHARE`` of ``free_bytes``."""
    fit = int(MEMORY_SHARE * free_bytes) // max(1, batch_size * per_row)
    return max(1, min(MAX_CONFIGS, fit))


def default_configs_per_batch(model: nn.Module, device: torch.device, batch_size: int, length: int) -> int:
    """Configurations stacked per forward: on CUDA as many as fit in the free memory at the longest ``length``;
    elsewhere ``CPU_ROWS`` rows."""
    if device.type != "cuda":
        return max(1, CPU_ROWS // batch_size)
    free, _total = torch.cuda.mem_get_info(device)
    dtype_bytes = next(model.parameters()).element_size()
    return configs_that_fit(free, batch_size, row_bytes(model.config, length, dtype_bytes))
