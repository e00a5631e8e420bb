"""Capture: exact maps on every supported family, interventions against a hand-written BERT, restoration."""

from __future__ import annotations

import math

import pytest
import torch
import transformers as T

from bertwatch.heads.capture import Intervention, UnsupportedModelError, capture, model_shape
from tests.support.models import padded_batch, tiny_model
from tests.support.tiers import fast_subset

FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "albert", "ernie", "modernbert"]


@pytest.mark.parametrize("family", fast_subset(FAMILIES, ("bert",)))
def test_maps_and_logits_match_eager(family: str) -> None:
    model = tiny_model(family)
    batch = padded_batch()
    sdpa_logits = model(**batch).logits
    model.set_attn_implementation("eager")
    eager = model(**batch, output_attentions=True)
    model.set_attn_implementation("sdpa")
    with capture(model) as cap:
        logits = model(**batch).logits
    torch.testing.assert_close(logits, sdpa_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cap.attentions, torch.stack(eager.attentions, 1), atol=0, rtol=0)
    layers, heads = model_shape(model)
    assert cap.attentions.shape == (3, layers, heads, 10, 10)
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("family", ["bert", "albert", "modernbert"])
def test_padded_batch_equals_single_examples(family: str) -> None:
    model = tiny_model(family)
    batch = padded_batch()
    with capture(model) as cap:
        model(**batch)
        full = cap.attentions
        for b in range(3):
            n = int(batch["attention_mask"][b].sum())
            model(input_ids=batch["input_ids"][b : b + 1, :n], attention_mask=batch["attention_mask"][b : b + 1, :n])
            torch.testing.assert_close(cap.attentions[0, :, :, :n, :n], full[b, :, :, :n, :n], atol=1e-6, rtol=1e-5)


def test_restores_mode_implementation_and_rng_even_on_error() -> None:
    model = tiny_model("bert").train()
    model.bert.encoder.layer[1].eval()
    before = {name: m.training for name, m in model.named_modules()}
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    with pytest.raises(RuntimeError, match="boom"):
        with capture(model):
            assert not model.training
            model(**padded_batch())
            torch.rand(5)
            raise RuntimeError("boom")
    assert {name: m.training for name, m in model.named_modules()} == before
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(torch.get_rng_state(), rng)


def test_unsupported_models_name_their_type_and_what_to_do() -> None:
    convbert = T.AutoModel.from_config(
        T.ConvBertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    )
    with pytest.raises(UnsupportedModelError, match="convbert.*AttentionInterface.*DropoutHookAdapter"):
        with capture(convbert):
            pass
    with pytest.raises(UnsupportedModelError, match="PreTrainedModel"):
        model_shape(torch.nn.Linear(2, 2))
    gpt2 = T.GPT2Model(T.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=20))
    with pytest.raises(UnsupportedModelError, match="gpt2.*causally") as refused:
        model_shape(gpt2)
    cause, families, train_on = str(refused.value).splitlines()  # the cause, what bertwatch watches, what to do
    assert "bidirectional encoders" in cause
    assert "bert, roberta" in families and "'Supported models' in bertwatch's README" in families
    assert train_on.startswith("To train this model without bertwatch, remove bertwatch.watch(trainer)")


def test_nested_capture_is_refused() -> None:
    model = tiny_model("bert")
    with capture(model):
        with pytest.raises(RuntimeError, match="nested"):
            with capture(model):
                pass


def test_wrong_spec_shape_is_refused() -> None:
    model = tiny_model("bert")
    with pytest.raises(ValueError, match="layers=3, heads=4"):
        with capture(model, intervention=Intervention.zero(torch.zeros(4, 3, dtype=torch.bool))):
            pass


def _manual_bert_logits(
    model: T.BertForSequenceClassification,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    uniform: torch.Tensor,
    scale: torch.Tensor,
) -> torch.Tensor:
    """BERT written out by hand in float64 from the weights, with per-head uniform/scale changes."""
    p = {k: v.double() for k, v in model.state_dict().items()}
    cfg = model.config
    heads, d = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads

    def ln(x: torch.Tensor, prefix: str) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + cfg.layer_norm_eps) * p[prefix + ".weight"] + p[prefix + ".bias"]

    def lin(x: torch.Tensor, prefix: str) -> torch.Tensor:
        return x @ p[prefix + ".weight"].T + p[prefix + ".bias"]

    batch, length = input_ids.shape
    positions = torch.arange(length)
    x = p["bert.embeddings.word_embeddings.weight"][input_ids]
    x = x + p["bert.embeddings.position_embeddings.weight"][positions]
    x = x + p["bert.embeddings.token_type_embeddings.weight"][torch.zeros_like(input_ids)]
    x = ln(x, "bert.embeddings.LayerNorm")
    out = torch.zeros(batch, 2, dtype=torch.float64)
    for b in range(batch):
        n = int(attention_mask[b].sum())
        h = x[b, :n]
        for layer in range(cfg.num_hidden_layers):
            pre = f"bert.encoder.layer.{layer}."
            q = lin(h, pre + "attention.self.query").view(n, heads, d)
            k = lin(h, pre + "attention.self.key").view(n, heads, d)
            v = lin(h, pre + "attention.self.value").view(n, heads, d)
            context = torch.zeros(n, heads, d, dtype=torch.float64)
            for head in range(heads):
                scores = q[:, head] @ k[:, head].T / math.sqrt(d)
                probs = torch.softmax(scores, -1)
                if uniform[layer, head]:
                    probs = torch.full((n, n), 1.0 / n, dtype=torch.float64)
                context[:, head] = scale[layer, head] * (probs @ v[:, head])
            attn = ln(
                lin(context.reshape(n, -1), pre + "attention.output.dense") + h, pre + "attention.output.LayerNorm"
            )
            inter = torch.nn.functional.gelu(lin(attn, pre + "intermediate.dense"))
            h = ln(lin(inter, pre + "output.dense") + attn, pre + "output.LayerNorm")
        pooled = torch.tanh(lin(h[0], "bert.pooler.dense"))
        out[b] = lin(pooled, "classifier")
    return out


@pytest.mark.fast
def test_interventions_match_hand_written_bert() -> None:
    model = tiny_model("bert")
    batch = padded_batch()
    g = torch.Generator().manual_seed(7)
    uniform = torch.rand(3, 4, generator=g) < 0.3
    scale = torch.rand(3, 4, generator=g) * 2
    scale[0, 1] = 0.0
    with capture(model, intervention=Intervention(uniform=uniform, scale=scale)) as cap:
        logits = model(**batch).logits
    expected = _manual_bert_logits(model, batch["input_ids"], batch["attention_mask"], uniform, scale)
    torch.testing.assert_close(logits.double(), expected, atol=1e-5, rtol=1e-5)
    n = int(batch["attention_mask"][1].sum())
    for layer, head in uniform.nonzero().tolist():
        row = cap.attentions[1, layer, head, 0]
        torch.testing.assert_close(row[:n], torch.full((n,), 1.0 / n))
        assert float(row[n:].sum()) == 0.0


def test_plain_model_matches_hand_written_bert() -> None:
    model = tiny_model("bert")
    batch = padded_batch()
    expected = _manual_bert_logits(
        model, batch["input_ids"], batch["attention_mask"], torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 4)
    )
    torch.testing.assert_close(model(**batch).logits.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.fast
def test_per_example_interventions_equal_separate_runs() -> None:
    model = tiny_model("roberta")
    batch = padded_batch()
    masks = torch.zeros(3, 3, 4, dtype=torch.bool)
    masks[0, 0, 0] = masks[1, 2] = masks[2, 1, 3] = True
    for mode in ("uniform", "zero"):
        with capture(model, intervention=Intervention.disable(masks, mode)):
            together = model(**batch).logits
        for b in range(3):
            with capture(model, intervention=Intervention.disable(masks[b], mode)):
                alone = model(**batch).logits[b]
            torch.testing.assert_close(together[b], alone, atol=1e-6, rtol=1e-5)


@pytest.mark.fast
def test_zero_equals_gate_zero_and_gate_gradients_are_finite_differences() -> None:
    model = tiny_model("bert")
    batch = padded_batch()
    labels = torch.tensor([0, 1, 1])
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[1, 2] = True
    with capture(model, intervention=Intervention.zero(mask)):
        zeroed = model(**batch).logits
    gates = torch.ones(3, 4, dtype=torch.float64)
    gates[1, 2] = 0
    with capture(model, gates=gates.float()):
        gated = model(**batch).logits
    torch.testing.assert_close(zeroed, gated)

    model = model.double()
    gates = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
    with capture(model, gates=gates):
        loss = model(**batch, labels=labels).loss
    (grad,) = torch.autograd.grad(loss, gates)
    assert all(p.grad is None for p in model.parameters())
    eps = 1e-6
    for layer, head in [(0, 0), (1, 2), (2, 3)]:
        bumped = []
        for sign in (1, -1):
            g = torch.ones(3, 4, dtype=torch.float64)
            g[layer, head] += sign * eps
            with capture(model, gates=g):
                bumped.append(model(**batch, labels=labels).loss)
        numeric = (bumped[0] - bumped[1]) / (2 * eps)
        assert abs(float(grad[layer, head]) - float(numeric.detach())) < 1e-6


def test_keep_graph_gives_attention_gradients() -> None:
    model = tiny_model("bert")
    batch = padded_batch()
    with capture(model, keep_graph=True) as cap:
        loss = model(**batch, labels=torch.tensor([0, 1, 0])).loss
        grads = torch.autograd.grad(loss, [cap.layer(l) for l in range(3)])
    assert all(g.shape == (3, 4, 10, 10) for g in grads)
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)
