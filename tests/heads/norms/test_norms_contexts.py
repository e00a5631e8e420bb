"""Recorded contexts (``Capture.contexts``) against a float64 loop over the recorded maps and values, and the
norm-based statistics of the adapter families (DeBERTa-v2/v3, MPNet) against a float64 numpy loop over Kobayashi
et al.'s definition, with the value vectors recomputed from the hidden states and the output projection sliced."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.heads.capture import Intervention, capture
from bertwatch.heads.norms.norm_based import (
    NORM_NAMES,
    gram_factors,
    head_grams,
    norm_stats,
    output_projections,
    supports_norms,
    transformed_norms,
)
from tests.heads.norms.test_norm_based import batch_and_roles  # noqa: E402
from tests.support.models import COMMON, OneMember, tiny_model  # noqa: E402
from tests.support.norm_oracle import reference  # noqa: E402


def adapter_model(model_type: str, vocab_size: int = 120) -> T.PreTrainedModel:
    """A 3-layer, 4-head random DeBERTa-v2 (shaped like v3: relative c2p+p2c attention) or MPNet classifier."""
    sizes = {**COMMON, "vocab_size": vocab_size}
    if model_type == "deberta-v2":
        config = T.DebertaV2Config(
            **sizes,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_buckets=16,
            max_relative_positions=64,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            type_vocab_size=2,
        )
    else:
        config = T.MPNetConfig(**sizes)
    config.initializer_range = 0.3  # peaked maps and uneven value norms: the weighting matters
    torch.manual_seed(0)
    return T.AutoModelForSequenceClassification.from_config(config).eval()


def loop_contexts(attn, values, real) -> np.ndarray:
    """Σ_{j real} A[i, j] v_j for every real query i (float64 loops), NaN on pad queries: ``[B, L, H, T, d]``."""
    a, v = attn.double().numpy(), values.double().numpy()
    batch, layers, heads, length, d = v.shape
    out = np.full((batch, layers, heads, length, d), np.nan)
    for b in range(batch):
        keys = [j for j in range(length) if real[b, j]]
        for l in range(layers):
            for h in range(heads):
                for i in keys:
                    out[b, l, h, i] = sum(a[b, l, h, i, j] * v[b, l, h, j] for j in keys)
    return out


@pytest.mark.parametrize("model_type", ["bert", "distilbert", "deberta-v2", "mpnet"])
def test_recorded_contexts_equal_attention_times_values_over_real_keys(model_type):
    model = adapter_model(model_type) if model_type in ("deberta-v2", "mpnet") else tiny_model(model_type)
    batch, roles = batch_and_roles()
    assert not bool(roles.real.all())  # padded: the model's context also runs over pad keys
    with torch.no_grad(), capture(model, record_values=True) as cap:
        model(**batch)
    contexts = cap.contexts
    assert contexts is not None and contexts.shape == cap.values.shape
    want = loop_contexts(cap.attentions, cap.values, roles.real)
    queries = roles.real.numpy()
    got = contexts.double().numpy()
    for b in range(queries.shape[0]):
        np.testing.assert_allclose(got[b][:, :, queries[b]], want[b][:, :, queries[b]], rtol=1e-5, atol=1e-6)
    # a pass that scales heads, or drops attention, records no context (it is not A·V of the recorded maps)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    mask[1, 2] = True
    with torch.no_grad(), capture(model, record_values=True, intervention=Intervention.zero(mask)) as cap:
        model(**batch)
    assert cap.values is not None and cap.contexts is None
    with torch.no_grad(), capture(model, record_values=True, train_mode=True) as cap:
        model(**batch)
    assert cap.values is not None and cap.contexts is None
    with torch.no_grad(), capture(model) as cap:
        model(**batch)
    assert cap.values is None and cap.contexts is None


@pytest.mark.parametrize("model_type", ["deberta-v2", "mpnet"])
def test_norm_statistics_of_adapter_families_match_a_loop_over_the_definition(model_type):
    model = adapter_model(model_type)
    assert supports_norms(model) and len(output_projections(model)) == 3
    batch, roles = batch_and_roles()
    with torch.no_grad(), capture(model, record_values=True) as cap:
        out = model(**batch, output_hidden_states=True)
    attn, values, contexts = cap.attentions, cap.values, cap.contexts
    assert values.shape == (*attn.shape[:4], 32 // 4)
    want = reference(attn, out.hidden_states, model, model_type, roles)
    for given in (contexts, None):  # the recorded contexts (the monitor's path) and the sum over real keys
        got = norm_stats(attn, values, head_grams(model), roles, contexts=given)
        for name in NORM_NAMES:
            np.testing.assert_allclose(got[name].numpy(), want[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "distilbert"])
def test_norm_ratio_from_recorded_contexts_equals_the_recomputed_one(model_type):
    model = tiny_model(model_type)
    batch, roles = batch_and_roles()
    with torch.no_grad(), capture(model, record_values=True) as cap:
        model(**batch)
    grams = head_grams(model)
    recorded = norm_stats(cap.attentions, cap.values, grams, roles, contexts=cap.contexts)
    recomputed = norm_stats(cap.attentions, cap.values, grams, roles)
    for name in NORM_NAMES:
        torch.testing.assert_close(recorded[name], recomputed[name], rtol=1e-5, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="shaped like values"):
        norm_stats(cap.attentions, cap.values, grams, roles, contexts=cap.values[..., :1])


@pytest.mark.parametrize("prune", [False, True])
def test_transformed_norms_equal_the_quadratic_form_also_for_a_pruned_head(prune):
    model = tiny_model("bert")
    if prune:  # a head whose output columns are zero: its Gram matrix is singular
        with torch.no_grad():
            output_projections(model)[1].weight[:, 8:16] = 0.0
    grams = head_grams(model)
    factors = gram_factors(grams)
    torch.testing.assert_close(factors @ factors.mT, grams, atol=1e-5, rtol=1e-5)
    values = torch.randn(2, 3, 4, 5, 8, generator=torch.Generator().manual_seed(0))
    got = transformed_norms(values, grams).double().numpy()
    g, v = grams.double().numpy(), values.double().numpy()
    want = np.sqrt(np.maximum(np.einsum("blhtd,lhde,blhte->blht", v, g, v), 0.0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert bool((got[:, 1, 1] < 1e-6).all()) == prune  # layer 1, head 1 moves nothing once pruned


def test_a_head_with_non_finite_weights_gets_nan_norms_and_the_others_exact():
    """A diverged run: one head's output projection holds a NaN. Its factor and norms are NaN (no linear-algebra
    error stops the pass); every other head's norms are still the quadratic form's."""
    model = tiny_model("bert")
    with torch.no_grad():
        output_projections(model)[0].weight[3, 8] = float("nan")  # layer 0, head 1 (columns 8..15)
    grams = head_grams(model)
    factors = gram_factors(grams)
    assert bool(factors[0, 1].isnan().all())
    values = torch.randn(2, 3, 4, 5, 8, generator=torch.Generator().manual_seed(1))
    got = transformed_norms(values, grams, factors).double().numpy()
    assert np.isnan(got[:, 0, 1]).all()
    g, v = grams.double().numpy(), values.double().numpy()
    want = np.sqrt(np.maximum(np.einsum("blhtd,lhde,blhte->blht", v, g, v), 0.0))
    keep = np.ones(got.shape, dtype=bool)
    keep[:, 0, 1] = False
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_type", ["deberta-v2", "mpnet"])
def test_monitor_logs_norm_statistics_of_adapter_families_as_the_loop_on_each_example_alone(model_type, tmp_path):

    from bertwatch.heads.roles import token_roles
    from bertwatch.options.settings import ProbeSettings
    from tests.support.tiny_trainer import SPECIAL, WORDS, toy_texts

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if model_type == "deberta-v2" else [])
    tok = T.BertTokenizer(vocab=vocab, model_input_names=inputs)
    model = adapter_model(model_type, vocab_size=len(tok))
    texts = toy_texts(5, seed=3, pairs=True)
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    monitor = sub = OneMember(
        model,
        ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run")),
        NORM_NAMES + ("cls_mass",),
        args,
        T.TrainerState(),
        {"processing_class": tok},
    )
    monitor.run("begin", T.TrainerState())
    monitor.close()
    grids = sub.history[-1][1]
    per_example = {name: [] for name in NORM_NAMES}
    for text in texts:  # each example alone, unpadded
        enc = tok(text["text"], text.get("text_pair"), return_tensors="pt")
        roles = token_roles(enc["input_ids"], enc["attention_mask"], tok, enc.get("token_type_ids"))
        with torch.no_grad(), capture(model) as cap:
            out = model(**enc, output_hidden_states=True)
        want = reference(cap.attentions, out.hidden_states, model, model_type, roles)
        for name in NORM_NAMES:
            per_example[name].append(want[name][0])
    for name in NORM_NAMES:
        assert np.isfinite(grids[name]).all()
        np.testing.assert_allclose(grids[name], np.mean(per_example[name], axis=0), rtol=1e-4, atol=1e-6, err_msg=name)
