"""Context mixing (bertwatch.heads.mixing.mixing_scores, .mixing_model) against float64 loops over each definition on
every supported family, each example alone over its real tokens (tests/support/mixing_oracle.py), with padding and
sentence pairs; the properties each definition promises; batch and padding invariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.core.stat_names import MIXING_HEAD_NAMES, MIXING_LAYER_NAMES, MIXING_NAMES
from bertwatch.heads.capture import UnsupportedModelError, capture
from bertwatch.heads.mixing.mixing_model import (
    block_weights,
    mixing_maps,
    mixing_stats,
    record_blocks,
    supports_mixing,
    value_zeroing,
)
from bertwatch.heads.mixing.mixing_scores import (
    alti_matrix,
    block_terms,
    compose,
    decomposition,
    mixing_ratio,
    mixing_ratios,
    rollout,
    value_zeroing_scores,
)
from bertwatch.heads.roles import TokenRoles
from tests.heads.norms.test_norms_contexts import adapter_model
from tests.support.mixing_oracle import alti_scale, block, example_measures, layer_terms, value_module
from tests.support.models import padded_batch, tiny_model
from tests.support.strict import strict
from tests.support.tiers import fast_subset
from tests.support.tolerance import assert_float32_close

FAMILIES = ["bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie", "distilbert", "albert", "deberta-v2",
            "mpnet"]  # fmt: skip
PAIRS = ("bert", "electra", "ernie", "albert", "deberta-v2")


def family_model(model_type: str):
    model = adapter_model(model_type) if model_type in ("deberta-v2", "mpnet") else tiny_model(model_type)
    if model_type not in ("deberta-v2", "mpnet"):
        torch.manual_seed(1)
        with torch.no_grad():  # peaked maps and uneven value norms, so the measures differ from the weights
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(8.0)
    return model


def batch_and_roles(model_type: str, length: int = 9):
    """Right-padded examples of lengths 9, 6, 3 (the first a pair where the family has segments), [CLS] first,
    [SEP] last (and mid-way in the pair)."""
    batch = padded_batch(batch=3, length=length, seed=3)
    real = batch["attention_mask"].bool()
    cls = torch.zeros_like(real)
    cls[:, 0] = True
    sep = torch.zeros_like(real)
    sep[torch.arange(3), real.sum(-1) - 1] = True
    sep[0, 4] = True
    if model_type in PAIRS:
        types = torch.zeros_like(batch["input_ids"])
        types[0, 5:] = 1
        batch["token_type_ids"] = types
    return batch, TokenRoles(real, cls & real, sep & real, torch.zeros_like(real))


def eager_outputs(model, batch):
    """The model's own hidden states and eager attention probabilities (independent of bertwatch's capture)."""
    if type(model).__name__.split("For")[0] not in ("DebertaV2", "MPNet"):  # these two only have eager attention
        model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True, output_attentions=True)
    return out.hidden_states, out.attentions


@pytest.mark.parametrize("model_type", fast_subset(FAMILIES, ("bert", "deberta-v2")))
def test_mixing_measures_match_float64_loops_on_each_example_alone(model_type):
    model = family_model(model_type)
    batch, roles = batch_and_roles(model_type)
    stats = mixing_stats_of(model, batch, roles)
    maps = mixing_maps(model, batch, roles.real)
    hidden, attentions = eager_outputs(model, batch)
    for b in range(3):
        index = torch.nonzero(roles.real[b]).squeeze(-1).numpy()
        cols = lambda mask: [k for k, j in enumerate(index) if mask[b, j]]  # noqa: E731
        want = example_measures(model, model_type, hidden, attentions, b, index, cols(roles.cls), cols(roles.sep))
        scale = alti_scale()
        for measure in ("alti", "alti_composed", "rollout"):
            got = maps[measure][b][:, index][:, :, index]
            assert_float32_close(got, want[measure], scale, msg=f"{model_type} {measure} example {b}")
            pad = ~roles.real[b]
            assert float(maps[measure][b][:, pad].abs().sum() + maps[measure][b][:, :, pad].abs().sum()) == 0.0
        for name in MIXING_NAMES:
            expect = want[name] if name in MIXING_HEAD_NAMES else np.asarray(want[name])[:, None]
            assert_float32_close(stats[name][b], expect, scale, msg=f"{model_type} {name} example {b}")


@pytest.mark.parametrize("model_type", fast_subset(FAMILIES, ("bert", "albert", "deberta-v2")))
def test_each_tokens_mixing_ratio_matches_the_float64_loop_from_every_input_path(model_type):
    """Per token and layer, from the recorded attention outputs (the gradient pass's path), from the heads'
    contexts (the shared forward's) and from the maps and values alone, against the loop on each example alone; the
    LayerNorms' γ uneven, since it enters through W_O."""
    from bertwatch.heads.norms.norm_based import attention_blocks

    model = family_model(model_type)
    torch.manual_seed(2)
    with torch.no_grad():
        for _, _, norm in attention_blocks(model):
            norm.weight.uniform_(0.25, 4.0)
    batch, roles = batch_and_roles(model_type)
    weights = block_weights(model)
    with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
        model(**batch)
    hidden, attentions = eager_outputs(model, batch)
    out_weights = torch.stack([w.out_weight for w in weights])
    gammas = torch.stack([w.ln_weight for w in weights])
    inputs = (cap.attentions, cap.values, blocks.residuals, out_weights, gammas, roles.real)
    paths = {
        "recorded": mixing_ratios(*inputs, mixed=blocks.mixed),
        "contexts": mixing_ratios(*inputs, contexts=cap.contexts),
        "maps": mixing_ratios(*inputs),
    }
    heads = attentions[0].shape[1]
    for b in range(3):
        index = torch.nonzero(roles.real[b]).squeeze(-1).numpy()
        for layer in range(len(attentions)):
            x = hidden[layer][b].double().numpy()[index]
            attn = attentions[layer][b].double().numpy()[:, index][:, :, index]
            want = layer_terms(x, attn, block(model, model_type, layer), heads)[3]
            for path, got in paths.items():
                assert_float32_close(got[b, layer, index], want, msg=f"{model_type} {path} example {b} layer {layer}")
                assert bool(torch.isnan(got[b, layer, ~roles.real[b]]).all())


def mixing_stats_of(model, batch, roles, names=MIXING_NAMES):
    weights = block_weights(model)
    with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
        model(**batch)
    return mixing_stats(cap.attentions, cap.values, blocks.residuals, weights, roles, names)


def terms_of(model, batch, roles, layer=1):
    """block_terms of one layer and the model's own post-attention LayerNorm output (a hook written here)."""
    from bertwatch.heads.norms.norm_based import attention_blocks

    seen = []
    norm = attention_blocks(model)[layer][2]
    handle = norm.register_forward_hook(lambda _m, _a, out: seen.append(out.detach()))
    weights = block_weights(model)
    try:
        with torch.no_grad(), capture(model, record_values=True) as cap, record_blocks(model) as blocks:
            model(**batch)
    finally:
        handle.remove()
    own = seen[layer if len(seen) > layer else 0]
    return cap, blocks, weights, own


@pytest.mark.fast
@pytest.mark.parametrize("model_type", ["bert", "albert", "mpnet"])
def test_decomposition_rebuilds_the_layer_norm_output_and_rows_sum_to_one(model_type):
    model = family_model(model_type)
    batch, roles = batch_and_roles(model_type)
    layer = 1
    cap, blocks, weights, own = terms_of(model, batch, roles, layer)
    terms = block_terms(
        cap.attentions[:, layer], cap.values[:, layer], blocks.residuals[:, layer], weights[layer], roles.real
    )
    w = terms.weights
    parts = decomposition(terms).sum(2) + terms.g(w.out_bias.expand_as(terms.residual)) + w.ln_bias
    real = roles.real
    scale = float(own[real].abs().max())
    assert_float32_close(parts[real], own[real], scale=scale, msg="Σ_j T_i(x_j) + g_i(b_O) + β = LN(z_i)")
    assert_float32_close(terms.output[real], own[real], scale=scale, msg="LN(z) rebuilt from its parts")
    for c in (alti_matrix(terms), alti_matrix(terms, per_head=True)):
        assert bool((c >= 0).all())
        sums = c.sum(-1) if c.dim() == 3 else c.sum(-1).transpose(1, 2)  # [B, T] or [B, T, H]
        assert_float32_close(sums[real], torch.ones(sums[real].shape))
        assert float(sums[~real].abs().sum()) == 0.0
    rolled = rollout(cap.attentions, real)
    assert_float32_close(rolled.sum(-1).permute(0, 2, 1)[real], torch.ones(int(real.sum()), rolled.shape[1]))


def test_rollout_of_identity_attention_is_the_identity_and_one_hot_heads_give_one_hot_alti():
    batch, roles = batch_and_roles("bert")
    real = roles.real
    eye = torch.eye(9).expand(3, 3, 4, 9, 9).clone()
    want = torch.where(real[:, None, :, None] & real[:, None, None, :], torch.eye(9), 0.0).expand(3, 3, 9, 9)
    assert torch.equal(rollout(eye, real), want)
    assert torch.equal(compose(want), want)
    model = family_model("bert")
    cap, blocks, weights, _ = terms_of(model, batch, roles)
    terms = block_terms(eye[:, 0], cap.values[:, 0], blocks.residuals[:, 0], weights[0], real)
    per_head = alti_matrix(terms, per_head=True)  # each head's only source is the query itself
    assert torch.equal(torch.where(torch.isnan(per_head), -1.0, per_head), want[:, :1].expand(3, 4, 9, 9))
    assert_float32_close(mixing_ratio(terms)[real], torch.zeros(int(real.sum())))


@pytest.mark.fast
def test_a_token_with_zero_attention_and_zeroed_value_changes_nothing():
    model = family_model("bert")
    batch, roles = batch_and_roles("bert")
    cap, blocks, weights, _ = terms_of(model, batch, roles)
    t, real = 2, roles.real
    attn = cap.attentions[:, 1].clone()
    attn[..., t] = 0.0
    attn = attn / attn.sum(-1, keepdim=True)
    values, zeroed = cap.values[:, 1], cap.values[:, 1].clone()
    zeroed[:, :, t] = 0.0
    plain = block_terms(attn, values, blocks.residuals[:, 1], weights[1], real)
    without = block_terms(attn, zeroed, blocks.residuals[:, 1], weights[1], real)
    others = real.clone()
    others[:, t] = False
    torch.testing.assert_close(without.output[others], plain.output[others], rtol=0, atol=0)
    c = alti_matrix(plain)
    assert float(c[:, :, t][others].abs().max()) == 0.0  # nobody takes anything from t
    torch.testing.assert_close(alti_matrix(without)[others], c[others], rtol=0, atol=0)
    torch.testing.assert_close(mixing_ratio(without)[others], mixing_ratio(plain)[others], rtol=0, atol=0)
    # value zeroing: zeroing t, whom nobody attends to, moves no other token's output, so t's column is 0
    variants = torch.stack([without.output[0] if k == t else plain.output[0] + 0.1 * k for k in range(9)])
    scores = value_zeroing_scores(variants, plain.output[0], real[0])
    assert float(scores[:, t].abs().max()) == 0.0
    assert_float32_close(scores.sum(-1)[real[0] & others[0]], torch.ones(int((real[0] & others[0]).sum())))


@pytest.mark.parametrize("model_type", fast_subset(["bert", "distilbert", "deberta-v2", "mpnet"], ("bert",)))
def test_value_zeroing_matches_one_zeroed_pass_per_layer_and_token(model_type):
    model = family_model(model_type)
    batch, roles = batch_and_roles(model_type)
    got = value_zeroing(model, batch, roles.real, max_batch=5)
    for b in (0, 2):
        index = torch.nonzero(roles.real[b]).squeeze(-1)
        example = {k: v[b : b + 1][:, index] for k, v in batch.items()}
        with torch.no_grad():
            original = model(**example, output_hidden_states=True).hidden_states
        for l in range(3):
            scores = np.zeros((len(index), len(index)))
            for t in range(len(index)):

                def zero(_m, _a, out, t=t):
                    out = out.clone()
                    out[:, t] = 0.0
                    return out

                handle = value_module(model, model_type, l).register_forward_hook(zero)
                try:
                    with torch.no_grad():
                        changed = model(**example, output_hidden_states=True).hidden_states[l + 1][0].double().numpy()
                finally:
                    handle.remove()
                plain = original[l + 1][0].double().numpy()
                for i in range(len(index)):
                    cos = changed[i] @ plain[i] / (np.linalg.norm(changed[i]) * np.linalg.norm(plain[i]))
                    scores[i, t] = max(0.0, 1.0 - cos)
            scores /= scores.sum(-1, keepdims=True)
            assert_float32_close(got[b, l][index][:, index], scores, msg=f"value zeroing example {b} layer {l}")
    assert float(got[2][:, ~roles.real[2]].abs().sum() + got[2][:, :, ~roles.real[2]].abs().sum()) == 0.0


@pytest.mark.fast
@pytest.mark.parametrize("model_type", ["bert", "deberta-v2"])
def test_mixing_statistics_do_not_depend_on_the_batch_or_its_padding(model_type):
    model = family_model(model_type)
    batch, roles = batch_and_roles(model_type)
    together = mixing_stats_of(model, batch, roles)
    for b in range(3):
        index = torch.nonzero(roles.real[b]).squeeze(-1)
        alone = {k: v[b : b + 1][:, index] for k, v in batch.items()}
        part = TokenRoles(*(m[b : b + 1][:, index] for m in (roles.real, roles.cls, roles.sep, roles.punct)))
        single = mixing_stats_of(model, alone, part)
        for name in MIXING_NAMES:
            assert_float32_close(together[name][b], single[name][0], msg=f"{name} example {b} alone vs batched")
    cap, blocks, weights, _ = terms_of(model, batch, roles)
    pad = ~roles.real
    attn = cap.attentions.clone()
    attn.masked_fill_(pad[:, None, None, :, None], 7.0)
    attn.masked_fill_(pad[:, None, None, None, :], 3.0)
    values = cap.values.masked_fill(pad[:, None, None, :, None], 5.0)
    residuals = blocks.residuals.masked_fill(pad[:, None, :, None], -4.0)
    noisy = mixing_stats(attn, values, residuals, weights, roles)
    for name in MIXING_NAMES:
        torch.testing.assert_close(noisy[name], together[name], rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("model_type", ["modernbert", "mobilebert"])
def test_families_the_decomposition_does_not_fit_are_refused_at_setup(model_type):
    model = tiny_model(model_type)
    assert not supports_mixing(model)
    with pytest.raises(UnsupportedModelError, match="leave the mixing statistics out"):
        block_weights(model)
    with pytest.raises(ValueError, match="unknown mixing statistic"):
        mixing_stats(torch.zeros(1, 1, 1, 2, 2), torch.zeros(1, 1, 1, 2, 4), None, [], None, ["x"])
    assert set(MIXING_LAYER_NAMES) < set(MIXING_NAMES)


@pytest.mark.parametrize("model_type", fast_subset(["bert", "albert"], ("bert",)))
def test_monitor_logs_mixing_statistics_as_the_loop_on_each_example_alone(model_type, tmp_path):

    import transformers as T

    from bertwatch.heads.roles import token_roles
    from bertwatch.options.settings import ProbeSettings
    from bertwatch.tb.writer.summary import layer_means
    from tests.support.models import OneMember, tiny_config
    from tests.support.tiny_trainer import SPECIAL, WORDS, toy_texts

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    tok = T.BertTokenizer(vocab=vocab)
    config = tiny_config(model_type)
    config.vocab_size = len(tok)
    torch.manual_seed(0)
    model = T.AutoModelForSequenceClassification.from_config(config).eval()
    texts = toy_texts(5, seed=3, pairs=True)
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    monitor = sub = OneMember(
        model,
        ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run")),
        MIXING_NAMES + ("cls_mass",),
        args,
        T.TrainerState(),
        {"processing_class": tok},
    )
    monitor.run("begin", T.TrainerState())
    monitor.close()
    grids = sub.history[-1][1]
    per_example = {name: [] for name in MIXING_NAMES}
    for text in texts:  # each example alone, unpadded, by the float64 loops
        enc = tok(text["text"], text.get("text_pair"), return_tensors="pt")
        roles = token_roles(enc["input_ids"], enc["attention_mask"], tok, enc.get("token_type_ids"))
        hidden, attentions = eager_outputs(model, enc)
        n = enc["input_ids"].shape[1]
        cols = lambda mask: [j for j in range(n) if mask[0, j]]  # noqa: E731
        want = example_measures(
            model, model_type, hidden, attentions, 0, np.arange(n), cols(roles.cls), cols(roles.sep)
        )
        for name in MIXING_NAMES:
            per_example[name].append(want[name] if name in MIXING_HEAD_NAMES else np.asarray(want[name])[:, None])
    scale = alti_scale()
    for name in MIXING_NAMES:
        shape = (3, 4) if name in MIXING_HEAD_NAMES else (3, 1)
        assert grids[name].shape == shape, name
        assert_float32_close(grids[name], np.mean(per_example[name], axis=0), scale, msg=name)
    assert layer_means(grids["mixing_ratio"]).shape == (3,)


def test_report_compares_weight_norm_alti_and_rollout_masses_per_layer():
    from bertwatch.report.html import build_html

    weight = np.array([[0.8, 0.6], [0.1, 0.3]], np.float32)
    norm = np.array([[0.2, 0.1], [0.05, 0.25]], np.float32)
    alti = np.array([[0.1, 0.3], [np.nan, 0.2]], np.float32)
    layer = np.array([[0.15], [0.05]], np.float32)
    rollout = np.array([[0.3], [0.4]], np.float32)
    named = {"sep_mass": weight, "sep_mass_norm": norm, "sep_mass_alti": alti, "sep_mass_alti_layer": layer}
    named["sep_mass_rollout"] = rollout
    grids = {name: {"first": (0, g), "last": (9, g)} for name, g in named.items()}
    page = build_html([], training={"grids": grids, "source": "a run"}).replace(' class=""', "")
    assert "mass on [CLS] and [SEP] per layer, step 9" in page
    assert "<th>[SEP] ALTI per head</th><th>[SEP] ALTI of the layer</th><th>[SEP] rollout</th>" in page
    for layer_index in range(2):  # the mean over heads (NaN skipped) of each measure, then weights minus each
        means = [float(np.nanmean(g[layer_index])) for g in named.values()]
        cells = [f"{v:.3f}" for v in means + [means[0] - m for m in means[1:]]]
        assert f"<td>{layer_index}</td>" + "".join(f"<td>{c}</td>" for c in cells) in page


@pytest.mark.parametrize("requested", [True, False])
def test_watch_refuses_requested_mixing_statistics_on_a_pre_ln_family_and_keeps_rollout(requested, tmp_path):
    import transformers as T

    from bertwatch.callbacks._safe import SetupError
    from bertwatch.callbacks.watch import BertWatchCallback
    from tests.support.tiny_trainer import SPECIAL, WORDS, toy_texts

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    tok = T.BertTokenizer(vocab=vocab, model_input_names=["input_ids", "attention_mask"])
    config = tiny_config_sized("modernbert", len(tok))
    model = T.AutoModelForSequenceClassification.from_config(config).eval()
    names = ("sep_mass_alti", "sep_mass_rollout", "cls_mass")
    # not requested: a callback whose defaults they are, dropped quietly on this family, rollout kept
    kind = BertWatchCallback if requested else type("MixingDefaults", (BertWatchCallback,), {"default_stats": names})
    callback = strict(kind, names if requested else None, probe_texts=toy_texts(3), logging_dir=str(tmp_path / "run"))
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    events = {"model": model, "processing_class": tok}
    if requested:
        with pytest.raises(SetupError, match="pre-LN"):
            callback.on_train_begin(args, T.TrainerState(), T.TrainerControl(), **events)
    else:
        callback.on_train_begin(args, T.TrainerState(), T.TrainerControl(), **events)
        assert callback.stat_names == {"sep_mass_rollout", "cls_mass"}
    callback.disable()


def tiny_config_sized(model_type: str, vocab_size: int):
    from tests.support.models import tiny_config

    config = tiny_config(model_type)
    config.vocab_size = vocab_size
    return config
