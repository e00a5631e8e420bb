"""One configuration at a time, disabled heads never computed (ablation/skipping.py): the runner's outputs equal a
plain evaluation of the masked model, for every BERT-style family, both modes, padding on either side, a layer
that loses every head, the first-token last layer and token-level heads."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.ablation import runner as R
from bertwatch.ablation.skipping import SkippingLayer
from tests.support.models import lively, self_attention_hooks, tiny_config, tiny_model
from tests.support.tiers import fast_subset
from tests.support.tolerance import assert_float32_close

BERT_STYLE = ["bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie"]


def _batch(side: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Four examples of 3 to 9 real tokens padded to 9 on ``side`` (ids 5..119: never the pad id)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (4, 9), generator=g)
    mask = torch.zeros(4, 9, dtype=torch.long)
    for b, n in enumerate((9, 6, 3, 7)):
        if side == "right":
            mask[b, :n] = 1
        else:
            mask[b, 9 - n :] = 1
    return {"input_ids": ids.masked_fill(mask == 0, 1), "attention_mask": mask}


@contextlib.contextmanager
def _disabled(model: T.PreTrainedModel, mask: np.ndarray, mode: str, real: torch.Tensor) -> Iterator[None]:
    """The model's own eager attention with each layer's self-attention context rewritten by a hand-written hook:
    a disabled head's context is zero, or (uniform) the mean of its value vectors over the real tokens ``real``
    ``[B, T]`` (the keys any query may attend to)."""

    def hook(layer: int):
        def replace(module, args, kwargs, output):
            context = output[0]
            heads = context.reshape(*context.shape[:-1], mask.shape[1], -1).clone()
            hidden = args[0] if args else kwargs["hidden_states"]
            values = module.value(hidden).reshape(heads.shape).double()
            weights = real.double() / real.double().sum(-1, keepdim=True)
            mean = torch.einsum("bt,bthd->bhd", weights, values).float()
            for h in np.flatnonzero(mask[layer]):
                heads[:, :, h] = 0.0 if mode == "zero" else mean[:, None, h]
            return (heads.reshape(context.shape), *output[1:])

        return replace

    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with self_attention_hooks(model, hook):
            yield
    finally:
        model.set_attn_implementation(previous)


def _plain(model: T.PreTrainedModel, batch: dict[str, torch.Tensor], mask: np.ndarray, mode: str) -> np.ndarray:
    with torch.no_grad(), _disabled(model, mask, mode, batch["attention_mask"]):
        return model(**batch).logits.numpy()


def _masks(layers: int, heads: int) -> list[np.ndarray]:
    """A random half of the heads, one head, every head of the middle layer, and the last layer alone."""
    rng = np.random.default_rng(4)
    half = rng.random((layers, heads)) < 0.5
    one = np.zeros((layers, heads), dtype=bool)
    one[0, 2] = True
    middle = np.zeros((layers, heads), dtype=bool)
    middle[1] = True
    middle[2, 0] = True
    last = np.zeros((layers, heads), dtype=bool)
    last[-1, 1:] = True
    return [half, one, middle, last]


def _check(model: T.PreTrainedModel, mode: str, side: str) -> None:
    runner = R.Runner(model, mode)
    assert runner.skips
    batch = _batch(side)
    layers = model.config.num_hidden_layers
    computed: list[int] = []
    hooks = [
        layer.attention.self.register_forward_hook(lambda *_, i=i: computed.append(i))
        for i, layer in enumerate(model.base_model.encoder.layer)
    ]
    try:
        with torch.inference_mode():
            _, states = runner.baseline(batch, cache=True)
            for mask in _masks(layers, model.config.num_attention_heads):
                want = _plain(model, batch, mask, mode)
                first = int(np.flatnonzero(mask.any(axis=1))[0])
                for start, given in ((0, None), (first, states)):
                    computed.clear()
                    got = runner.run(batch, given, mask[None], start)[0].numpy()
                    touched = {l for l in range(start, layers) if mask[l].any()} | (
                        {layers - 1} if runner.last is not None else set()
                    )
                    assert set(computed).isdisjoint(touched)  # those layers never ran the model's own attention
                    assert np.array_equal(got.argmax(-1), want.argmax(-1))
                    assert_float32_close(got, want, scale=float(np.abs(want).max()), msg=f"{mode} {side} {start}")
                assert np.abs(want - _plain(model, batch, np.zeros_like(mask), mode)).max() > 1e-3
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("family", fast_subset(BERT_STYLE, ("bert",)))
@pytest.mark.parametrize("mode", ["uniform", "zero"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_one_configuration_skipping_heads_equals_the_plain_masked_model(family: str, mode: str, side: str) -> None:
    _check(lively(tiny_model(family)), mode, side)


@pytest.mark.fast
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_the_first_token_last_layer_raises_no_warning_of_transformers(family: str) -> None:
    """The last layer on the first token hands the encoder's keywords on as given: transformers warns nothing
    (a warning there would be bertwatch's own call, one the user cannot act on)."""
    model = lively(tiny_model(family))
    runner = R.Runner(model, "uniform")
    assert runner.last is not None
    batch = _batch("right")
    with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
        warnings.simplefilter("always")
        _, states = runner.baseline(batch, cache=True)
        for mask in _masks(model.config.num_hidden_layers, model.config.num_attention_heads):
            runner.run(batch, states, mask[None], int(np.flatnonzero(mask.any(axis=1))[0]))
    assert [str(w.message) for w in caught] == []


@pytest.mark.fast
@pytest.mark.parametrize("mode", ["uniform", "zero"])
def test_token_classifier_skips_heads_on_every_row(mode: str) -> None:
    torch.manual_seed(0)
    model = lively(T.BertForTokenClassification(tiny_config("bert")).eval())
    assert R.Runner(model, mode).last is None  # every row of the last layer reaches the outputs
    _check(model, mode, "right")


@pytest.mark.fast
def test_families_that_are_not_bert_style_keep_the_masked_path() -> None:
    assert not R.Runner(tiny_model("distilbert"), "zero").skips
    assert R.Runner(tiny_model("bert"), "zero").skips


@pytest.mark.fast
def test_uniform_heads_follow_each_query_rows_keys_when_rows_differ() -> None:
    """A mask whose query rows allow different keys (causal here): a uniform head's context is the mean over each
    row's own keys, not one vector per example."""
    model = lively(tiny_model("bert"))
    model.set_attn_implementation("eager")
    layer = model.bert.encoder.layer[1]
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 6, 32, generator=g)
    allowed = torch.tril(torch.ones(6, 6)).expand(2, 1, 6, 6)
    additive = (1 - allowed) * torch.finfo(torch.float32).min
    disabled = np.array([True, False, True, False])

    def replace(module, args, kwargs, output):
        heads = output[0].reshape(2, 6, 4, 8).clone()
        values = module.value(args[0] if args else kwargs["hidden_states"]).reshape(2, 6, 4, 8).double()
        weights = allowed[:, 0].double() / allowed[:, 0].double().sum(-1, keepdim=True)
        mean = torch.einsum("bqt,bthd->bqhd", weights, values).float()
        heads[:, :, disabled] = mean[:, :, disabled]
        return (heads.reshape(2, 6, 32), *output[1:])

    handle = layer.attention.self.register_forward_hook(replace, with_kwargs=True)
    try:
        with torch.no_grad():
            want = layer(x, additive)
    finally:
        handle.remove()
    with torch.no_grad():
        got = SkippingLayer(layer, disabled, "uniform")(x, additive)
    assert_float32_close(got, want, scale=float(want.abs().max()))
    with torch.no_grad():
        one_row = SkippingLayer(layer, disabled, "uniform")(x, additive[:, :, -1:].expand_as(additive))
    assert (one_row - got).abs().max() > 1e-3  # the rows' key sets matter
