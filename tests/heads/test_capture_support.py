"""Support by capability: every family whose capture is verified against its own eager attention, and the
DeBERTa-v2/v3 and MPNet adapters against eager maps and hand-made head disabling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import transformers as T

from bertwatch.heads.adapters import ADAPTERS
from bertwatch.heads.capture import Intervention, capture, model_shape
from tests.support.models import hooked_output, padded_batch
from tests.support.tiers import fast_subset

SIZES = dict(
    vocab_size=120,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)
#: Encoders verified by these tests (the README's list is checked against it).
INTERFACE_FAMILIES = (
    "albert",
    "bert",
    "camembert",
    "data2vec-text",
    "distilbert",
    "electra",
    "ernie",
    "layoutlm",
    "markuplm",
    "mobilebert",
    "modernbert",
    "roberta",
    "roc_bert",
    "splinter",
    "xlm-roberta",
    "xlm-roberta-xl",
)
ADAPTER_FAMILIES = ("deberta-v2", "mpnet")


def tiny_encoder(model_type: str, seed: int = 0) -> T.PreTrainedModel:
    """A 2-layer, 4-head random encoder of ``model_type`` (DeBERTa shaped like v3: relative c2p+p2c attention)."""
    extra: dict = {}
    if model_type == "distilbert":
        config = T.DistilBertConfig(
            vocab_size=120, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64
        )
    elif model_type == "deberta-v2":
        extra = dict(
            relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16, max_relative_positions=64
        )
        config = T.DebertaV2Config(**SIZES, share_att_key=True, norm_rel_ebd="layer_norm", **extra)
    elif model_type == "mobilebert":
        config = T.MobileBertConfig(
            **SIZES, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=1
        )
    elif model_type == "modernbert":
        config = T.ModernBertConfig(
            **SIZES, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, local_attention=4
        )
    elif model_type == "albert":
        config = T.AlbertConfig(**SIZES, embedding_size=16)
    else:
        config = T.AutoConfig.for_model(model_type, **SIZES)
    if model_type in ADAPTER_FAMILIES:
        config.initializer_range = 0.3  # peaked attention, so a disabled head changes the output visibly
    torch.manual_seed(seed)
    return T.AutoModel.from_config(config).eval()


def _eager_attentions(model, batch):
    if model.config.model_type.replace("_", "-") not in ADAPTER_FAMILIES:
        model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    return out, torch.stack(out.attentions, 1)


def _real(batch) -> torch.Tensor:
    m = batch["attention_mask"].bool()
    return (m[:, None, None, :, None] & m[:, None, None, None, :]).expand(-1, 2, 4, -1, -1)


@pytest.mark.parametrize("family", fast_subset(INTERFACE_FAMILIES + ADAPTER_FAMILIES, ("bert", "deberta-v2")))
def test_capture_equals_the_models_own_eager_attention(family: str) -> None:
    model = tiny_encoder(family)
    batch = padded_batch()
    assert model_shape(model) == (2, 4)
    eager, maps = _eager_attentions(model, batch)
    with torch.no_grad(), capture(model) as cap:
        out = model(**batch)
    real = _real(batch)
    torch.testing.assert_close(cap.attentions[real], maps[real], atol=1e-6, rtol=0)
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(out.last_hidden_state[keep], eager.last_hidden_state[keep], atol=1e-5, rtol=1e-5)


@pytest.mark.fast
def test_verification_runs_once_per_class() -> None:
    first, second = tiny_encoder("electra"), tiny_encoder("electra", seed=1)
    model_shape(first)
    calls = []
    second.register_forward_hook(lambda *_: calls.append(1))
    assert model_shape(second) == (2, 4) and not calls


def _self_attention_output(model, layer: int) -> torch.nn.Module:
    if model.config.model_type == "mpnet":
        return model.encoder.layer[layer].attention.attn.o
    return model.encoder.layer[layer].attention.output.dense


def _value_projection(model, layer: int) -> torch.nn.Module:
    if model.config.model_type == "mpnet":
        return model.encoder.layer[layer].attention.attn.v
    return model.encoder.layer[layer].attention.self.value_proj


def _by_hand(model, batch, layer: int, head: int, mode: str) -> torch.Tensor:
    """The head's context replaced before the output projection: zeros, or the mean of its value vectors over
    the example's real keys (uniform attention), with plain hooks on the model's own modules."""
    d = model.config.hidden_size // model.config.num_attention_heads
    cols = slice(head * d, (head + 1) * d)
    values = {}
    mask = batch["attention_mask"].bool()

    def keep_values(_m, _a, out):
        values["v"] = out

    def replace(_m, args):
        context = args[0].clone()
        if mode == "zero":
            context[..., cols] = 0
        else:
            v = values["v"][..., cols]
            mean = (v * mask[..., None]).sum(1, keepdim=True) / mask.sum(1)[:, None, None]
            context[..., cols] = mean.expand_as(context[..., cols])
        return (context, *args[1:])

    handles = [
        _value_projection(model, layer).register_forward_hook(keep_values),
        _self_attention_output(model, layer).register_forward_pre_hook(replace),
    ]
    return hooked_output(model, batch, handles)


@pytest.mark.parametrize("family", ADAPTER_FAMILIES)
@pytest.mark.parametrize("mode", ["zero", "uniform"])
def test_adapter_disabling_equals_a_hand_made_head_change(family: str, mode: str) -> None:
    model = tiny_encoder(family)
    batch = padded_batch()
    layer, head = 1, 2
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[layer, head] = True
    with torch.no_grad(), capture(model, intervention=Intervention.disable(mask, mode)):
        got = model(**batch).last_hidden_state
    expected = _by_hand(model, batch, layer, head, mode)
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        plain = model(**batch).last_hidden_state
    assert (plain[keep] - got[keep]).abs().max() > 1e-3  # the change is visible


@pytest.mark.parametrize("family", ADAPTER_FAMILIES)
def test_adapter_gate_gradients_are_finite_differences(family: str) -> None:
    model = tiny_encoder(family).double()
    batch = padded_batch()
    target = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def loss(gates: torch.Tensor) -> torch.Tensor:
        with capture(model, gates=gates):
            return ((model(**batch).last_hidden_state - target) ** 2).mean()

    gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(gates), gates)
    eps = 1e-6
    for layer, head in [(0, 1), (1, 3)]:
        bumped = []
        for sign in (1, -1):
            g = torch.ones(2, 4, dtype=torch.float64)
            g[layer, head] += sign * eps
            with torch.no_grad():
                bumped.append(float(loss(g)))
        assert abs(float(grad[layer, head]) - (bumped[0] - bumped[1]) / (2 * eps)) < 1e-6


@pytest.mark.fast
def test_readme_lists_exactly_the_tested_families() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = readme.split("<!-- supported-models:start -->")[1].split("<!-- supported-models:end -->")[0]
    listed = set(re.findall(r"`([a-z0-9_-]+)`", block))
    assert listed == set(INTERFACE_FAMILIES) | set(ADAPTER_FAMILIES) | set(ADAPTERS)
