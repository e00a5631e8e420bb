"""Units of bertwatch.callbacks: probe set, reference cache, the callbacks' statistics and cadence, and the shared
pass checked against plain loops over eager attention (containment: test_safe.py; the run folder: test_context.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.callbacks import (
    AttentionDriftCallback,
    BertWatchCallback,
    EntropyCallback,
    ExpertOptions,
    GradientImportanceCallback,
    ProbeOptions,
    SetupError,
    SpecialTokenMassCallback,
)
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.probe_set import ReferenceCache, build_probe_set, crop_maps, sample_indices
from tests.support.models import OneMember
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_texts


@pytest.fixture(scope="module")
def tok() -> T.PreTrainedTokenizerBase:
    return tiny_tokenizer()


# ------------------------------------------------------------------------------------------------ probe set


def test_sample_indices_are_seeded_sorted_and_capped() -> None:
    a = sample_indices(1000, 32, seed=3)
    assert a == sample_indices(1000, 32, seed=3)
    assert a != sample_indices(1000, 32, seed=4)
    assert a == sorted(a) and len(set(a)) == 32 and all(0 <= i < 1000 for i in a)
    assert sample_indices(5, 32, seed=0) == [0, 1, 2, 3, 4]
    with pytest.raises(SetupError):
        sample_indices(10, 0, seed=0)


def test_probe_set_from_texts_keeps_order_labels_tokens_and_segments(tok) -> None:
    texts = [
        {"text": "good movie .", "label": 1},
        {"text": "bad , dull plot", "label": 0},
        {"text": "fun film", "text_pair": "great music", "label": 1},
    ]
    probe = build_probe_set(tok, texts=texts, batch_size=2)
    assert probe.size == 3 and len(probe.batches) == 2 and probe.has_labels
    assert probe.tokens[0] == ["[CLS]", "good", "movie", ".", "[SEP]"]
    assert probe.tokens[2] == ["[CLS]", "fun", "film", "[SEP]", "great", "music", "[SEP]"]
    assert probe.segments[2] == [0, 0, 0, 0, 1, 1, 1]
    assert probe.batches[0]["labels"].tolist() == [1, 0]
    roles = probe.roles[0]
    assert roles.punct[1].tolist() == [False, False, True, False, False, False]  # "[CLS] bad , dull plot [SEP]"
    assert roles.sep[0].tolist() == [False, False, False, False, True, False]  # padded to 6
    assert not build_probe_set(tok, texts=["no labels here"]).has_labels


def test_probe_set_from_dataset_samples_drops_unused_columns_and_leaves_rng_alone(tok) -> None:
    dataset = toy_dataset(tok, 50, seed=0)
    model = tiny_bert(tok)
    seen = []

    def noisy_collator(features):
        seen.append(sorted(features[0]))
        torch.rand(3)
        np.random.rand()
        return T.DataCollatorWithPadding(tok)(features)

    torch.manual_seed(11)
    np.random.seed(11)
    before = torch.get_rng_state(), np.random.get_state()[1].copy()
    probe = build_probe_set(tok, dataset=dataset, collator=noisy_collator, model=model, num_examples=8, seed=5)
    assert torch.equal(torch.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1])
    assert "text" not in seen[0] and "input_ids" in seen[0]
    indices = sample_indices(50, 8, 5)
    assert probe.tokens[0] == tok.convert_ids_to_tokens(dataset[indices[0]]["input_ids"])
    assert probe.batches[0]["labels"].tolist() == [dataset[i]["label"] for i in indices]
    again = build_probe_set(tok, dataset=dataset, collator=noisy_collator, model=model, num_examples=8, seed=5)
    assert again.fingerprint == probe.fingerprint


def test_empty_or_tokenizerless_probe_set_fails_clearly(tok) -> None:
    with pytest.raises(SetupError, match="empty"):
        build_probe_set(tok, texts=[])
    with pytest.raises(SetupError, match="tokenizer"):
        build_probe_set(None, texts=["a"])
    with pytest.raises(SetupError, match="no probe examples"):
        build_probe_set(tok)


def pad_maps(maps: list[torch.Tensor], real: torch.Tensor) -> torch.Tensor:
    """Per example ``[L, H, n, n]`` -> ``[batch, L, H, T, T]``, zeros at pad positions (inverse of ``crop_maps``)."""
    batch, length = real.shape
    layers, heads = maps[0].shape[:2]
    out = maps[0].new_zeros(batch, layers, heads, length, length)
    for row, m in enumerate(maps):
        idx = real[row].nonzero().squeeze(-1).to(m.device)
        out[row, :, :, idx[:, None], idx[None, :]] = m
    return out


def test_crop_and_pad_maps_are_inverse() -> None:
    real = torch.tensor([[True, True, True, False], [True, True, False, False]])
    attn = torch.rand(2, 3, 2, 4, 4)
    cropped = crop_maps(attn, real)
    assert [tuple(c.shape) for c in cropped] == [(3, 2, 3, 3), (3, 2, 2, 2)]
    padded = pad_maps(cropped, real)
    keep = (real[:, None, None, :, None] & real[:, None, None, None, :]).expand_as(attn)
    assert torch.equal(padded[keep], attn[keep]) and torch.all(padded[~keep] == 0)


def test_reference_cache_round_trip_in_float16(tmp_path) -> None:
    cache = ReferenceCache(tmp_path / "bertwatch" / "reference.pt")
    maps = [torch.rand(2, 3, 4, 4), torch.rand(2, 3, 2, 2)]
    assert cache.load("abc", 2, 3) is None
    cache.save(maps, "abc", 2, 3, "test")
    loaded = cache.load("abc", 2, 3)
    assert all(m.dtype == torch.float16 for m in loaded)
    assert all(torch.allclose(a.float(), b, atol=1e-3) for a, b in zip(loaded, maps))
    assert cache.load("other", 2, 3) is None and cache.load("abc", 2, 4) is None
    assert not list(cache.path.parent.glob("*.tmp*"))


# ------------------------------------------------------------------------------------------------ configuration


def test_statistics_are_selectable_and_validated() -> None:
    assert EntropyCallback().stat_names == {"entropy", "cls_entropy"}
    assert AttentionDriftCallback().stat_names == {"drift_cosine", "drift_js"}
    assert "sep_mass_kovaleva" in SpecialTokenMassCallback().stat_names
    assert GradientImportanceCallback(expert=ExpertOptions(integrated_gradients=True)).stat_names >= {
        "head_importance",
        "head_attribution_ig",
    }
    full = BertWatchCallback().stat_names
    assert {"drift_cosine", "head_importance", "attn_grad_other", "prev"} <= full
    assert "head_attribution_ig" not in full
    assert BertWatchCallback(stats=["entropy"]).stat_names == {"entropy"}
    with pytest.raises(ValueError, match="unknown bertwatch statistic"):
        BertWatchCallback(stats=["entropie"])
    with pytest.raises(ValueError):
        BertWatchCallback(every_n_steps=-1)


def test_cadence() -> None:
    cb = BertWatchCallback(every_n_steps=50, probing=ProbeOptions(on_evaluate=False))
    due = cb.pacing.due
    assert due("begin", 0) and due("step", 100) and not due("step", 75)
    assert not due("evaluate", 10) and due("end", 73)
    maps = cb._member(cb.stat_names, None).maps
    assert maps.count("begin", 0, 0) == 4 and maps.count("step", 200, 0) == 4 and maps.count("step", 100, 0) == 0
    assert EntropyCallback()._member(frozenset(), None).maps is None


def test_one_watched_run_only_for_equal_probe_settings() -> None:
    """Callbacks of one run share a watched when their probe settings are equal (the training test checks the
    sharing itself)."""
    a, b = BertWatchCallback(), EntropyCallback()
    assert a.probe_settings == b.probe_settings and hash(a.probe_settings) == hash(b.probe_settings)
    assert EntropyCallback(num_probe_examples=8).probe_settings != a.probe_settings


def test_lazy_exports_from_package_root() -> None:
    import bertwatch
    import bertwatch.callbacks as cbs

    assert bertwatch.BertWatchCallback is cbs.BertWatchCallback
    assert bertwatch.GradientImportanceCallback is cbs.GradientImportanceCallback
    from bertwatch.callbacks.ablate_on_end import AblationCallback

    assert cbs.AblationCallback is AblationCallback and bertwatch.AblationCallback is AblationCallback


# ------------------------------------------------------------------------------------------------ the pass


def _eager_maps(model, probe) -> list[np.ndarray]:
    """Per probe example, the eager implementation's cropped maps [L, H, n, n] as float64."""
    model.set_attn_implementation("eager")
    out = []
    with torch.no_grad():
        for batch, roles in zip(probe.batches, probe.roles):
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            attn = torch.stack(model.eval()(**inputs, output_attentions=True).attentions, 1).double().numpy()
            for b in range(attn.shape[0]):
                idx = np.flatnonzero(roles.real[b].numpy())
                out.append(attn[b][:, :, idx][:, :, :, idx])
    model.set_attn_implementation("sdpa")
    return out


def _plain_grids(maps, ref_maps, tokens) -> dict[str, np.ndarray]:
    """cls/sep/punct mass, entropy and drift_cosine by loops, then an unweighted mean over examples."""
    layers, heads = maps[0].shape[:2]
    names = ("cls_mass", "sep_mass", "punct_mass", "entropy", "drift_cosine")
    per = {k: np.zeros((len(maps), layers, heads)) for k in names}
    for e, (a_all, r_all, toks) in enumerate(zip(maps, ref_maps, tokens)):
        n = len(toks)
        for l in range(layers):
            for h in range(heads):
                a, r = a_all[l, h], r_all[l, h]
                col = lambda keep: sum(a[i, j] for i in range(n) for j in range(n) if keep(toks[j])) / n
                per["cls_mass"][e, l, h] = col(lambda t: t == "[CLS]")
                per["sep_mass"][e, l, h] = col(lambda t: t == "[SEP]")
                per["punct_mass"][e, l, h] = col(lambda t: t in (".", ","))
                ent = 0.0
                for i in range(n):
                    for j in range(n):
                        p = 0.9999 * a[i, j] + 0.0001 / n
                        ent -= p * math.log(p)
                per["entropy"][e, l, h] = ent / n
                per["drift_cosine"][e, l, h] = (a * r).sum() / math.sqrt((a * a).sum() * (r * r).sum())
    return {k: v.mean(0) for k, v in per.items()}


def test_probe_pass_grids_match_plain_loops_and_drift_uses_the_step0_reference(tok, tmp_path) -> None:
    model = tiny_bert(tok)
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(6, seed=2)]
    settings = ProbeSettings(texts=texts, batch_size=4, logging_dir=str(tmp_path / "run"))
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state = T.TrainerState()
    names = ["cls_mass", "sep_mass", "punct_mass", "entropy", "drift_cosine", "head_importance"]
    monitor = sub = OneMember(model, settings, names, args, state, {"processing_class": tok}, maps=2)
    reference = _eager_maps(model, monitor.probe)
    monitor.run("begin", state)
    step0 = sub.history[-1][1]
    np.testing.assert_allclose(step0["drift_cosine"], 1.0, atol=1e-4)
    assert (tmp_path / "bertwatch" / "reference.pt").is_file()

    with torch.no_grad():
        for p in model.bert.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    state.global_step = 1
    monitor.run("step", state)
    got = sub.history[-1][1]
    expected = _plain_grids(_eager_maps(model, monitor.probe), reference, monitor.probe.tokens)
    for name, grid in expected.items():
        np.testing.assert_allclose(got[name], grid, rtol=2e-3, atol=2e-4, err_msg=name)
    assert got["drift_cosine"].max() < 0.999
    assert got["head_importance"].shape == (2, 4) and np.all(got["head_importance"] >= 0)
    assert all(p.grad is None for p in model.parameters())
    assert model.config._attn_implementation == "sdpa"
    monitor.close()
