"""The stability statistics against float64 loops over their definitions (tests/support/stability_oracle.py), each
example alone, on every supported family; padded batches (both sides, sentence pairs) and generated neighbourhoods
must give each example its own values; the mask's large negatives never enter."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertwatch.core.stat_names import STABILITY_NAMES, STAT_GROUPS
from bertwatch.heads.capture import UnsupportedModelError, capture, model_shape
from bertwatch.heads.stability.logits import LOGIT_NAMES, allowed_pairs, logit_summary
from bertwatch.heads.stability.spectral_norms import head_qk_spectral_norms, qk_spectral_norms
from bertwatch.probe.probe_set import build_probe_set
from tests.heads.test_capture_support import tiny_encoder
from tests.support.property import ORDERS, PADDING_SIDES
from tests.support.stability_oracle import logits_alone, qk_norms
from tests.support.tiers import fast_subset
from tests.support.tiny_trainer import WORDS, tiny_tokenizer
from tests.support.tolerance import EPS64, assert_float32_close

FAMILIES = ("bert", "roberta", "distilbert", "albert", "electra", "mobilebert", "modernbert", "deberta-v2", "mpnet")
NO_SEGMENTS = ("distilbert", "mpnet", "modernbert", "deberta-v2")

_MODELS: dict[str, torch.nn.Module] = {}


def model_of(family: str) -> torch.nn.Module:
    if family not in _MODELS:
        _MODELS[family] = tiny_encoder(family)
    return _MODELS[family]


def padded(
    pairs: bool, seed: int = 3, pad_id: int | None = None
) -> tuple[dict[str, torch.Tensor], list[list[int]], list]:
    """Three examples of lengths 9, 6, 3 right-padded to 9 (left padding goes through the probe set's layout: see
    the generated test); pad positions hold random ids, not the pad id, so a pad key's scores differ from any
    real one (``pad_id``: the pad id there instead). Returns the batch, each example's ids and segments."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (3, 9), generator=g)
    lengths = [9, 6, 3]
    mask = torch.zeros(3, 9, dtype=torch.long)
    segments = torch.zeros(3, 9, dtype=torch.long)
    for b, n in enumerate(lengths):
        real = slice(0, n)
        mask[b, real] = 1
        if pairs:
            start = real.start + n // 2
            segments[b, start : real.stop] = 1
    if pad_id is not None:
        ids = ids.masked_fill(mask == 0, pad_id)
    batch = {"input_ids": ids, "attention_mask": mask}
    if pairs:
        batch["token_type_ids"] = segments
    rows = [ids[b][mask[b].bool()].tolist() for b in range(3)]
    segs = [segments[b][mask[b].bool()].tolist() if pairs else None for b in range(3)]
    return batch, rows, segs


@pytest.mark.parametrize("family", fast_subset(FAMILIES, ("bert", "deberta-v2", "mpnet", "modernbert")))
def test_logit_statistics_are_the_loop_over_each_example_alone(family):
    """max_logit and logit_std of a padded batch (sentence pairs where the family has segments) equal the float64
    loop over each example alone, relative-position terms and ModernBERT's local window included."""
    model = model_of(family)
    pairs = family not in NO_SEGMENTS
    # MobileBERT's embedding mixes each token with its neighbours (trigram input), so a pad token's id reaches the
    # last real token; padded with the pad id (a zero embedding) it does not.
    batch, rows, segs = padded(pairs, pad_id=0 if family == "mobilebert" else None)
    with torch.no_grad(), capture(model, record_logits=True) as cap:
        model(**batch)
    got = cap.logit_summary
    assert set(got) == set(LOGIT_NAMES)
    for b, (ids, segments) in enumerate(zip(rows, segs)):
        peak, spread, magnitude = logits_alone(model, ids, segments)
        msg = f"{family} example {b}"
        assert_float32_close(got["max_logit"][b], peak, scale=magnitude, msg=f"max_logit {msg}")
        assert_float32_close(got["logit_std"][b], spread, scale=magnitude, msg=f"logit_std {msg}")
    assert got["logit_std"].min() > 0


def test_the_masks_large_negatives_and_pad_scores_never_enter():
    """Pad positions whose embeddings are made 1000 times larger give pair scores far above every real one (seen
    without the mask); with the mask the statistics of the real pairs equal those with ordinary pads. An example
    with no real pair gives NaN."""
    model = model_of("bert")
    model_shape(model)  # the one-time capture check runs before the hook (its own input has no pad rows)
    batch, _, _ = padded(pairs=False)
    pad = (batch["attention_mask"] == 0)[..., None]
    found = {}
    for what, factor, mask in (
        ("quiet", 1.0, batch["attention_mask"]),
        ("loud", 1000.0, batch["attention_mask"]),
        ("unmasked", 1000.0, torch.ones_like(batch["attention_mask"])),
    ):
        handle = model.embeddings.register_forward_hook(lambda m, a, out, f=factor: torch.where(pad, out * f, out))
        try:
            with torch.no_grad(), capture(model, record_logits=True) as cap:
                model(input_ids=batch["input_ids"], attention_mask=mask)
        finally:
            handle.remove()
        found[what] = cap.logit_summary
    scale = float(found["quiet"]["max_logit"].abs().max())
    for name in LOGIT_NAMES:
        assert_float32_close(found["loud"][name], found["quiet"][name], scale=scale, msg=name)
    first_layer = found["unmasked"]["max_logit"][2, 0]
    assert bool((first_layer.abs() > 10 * found["quiet"]["max_logit"][2, 0].abs()).all())
    empty = logit_summary(torch.randn(1, 2, 3, 3), torch.zeros(1, 1, 3, 3, dtype=torch.bool))
    assert all(bool(torch.isnan(v).all()) for v in empty)
    scores = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    peak, spread = logit_summary(scores, None)  # no mask: every pair counts
    flat = scores.double().numpy().reshape(2, 3, -1)
    assert_float32_close(peak, flat.max(-1), msg="max without a mask")
    assert_float32_close(spread, flat.std(-1), msg="std without a mask")


def test_allowed_pairs_reads_every_mask_form_the_families_pass():
    """Additive float (BERT's eager mask, MPNet's [B, 1, 1, T]), boolean and 0/1 integer (DeBERTa's m_i m_j)
    masks give the same real pairs: real query and real key."""
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    want = (m[:, None, :, None] * m[:, None, None, :]).bool()
    additive = (1.0 - m[:, None, None, :].float()) * torch.finfo(torch.float32).min
    forms = {
        "additive key mask": additive,
        "additive 4D": additive.expand(-1, -1, 3, -1),
        "boolean": m[:, None, None, :].bool().expand(-1, -1, 3, -1),
        "0/1 pairs": m[:, None, :, None] * m[:, None, None, :],
    }
    for what, mask in forms.items():
        assert torch.equal(allowed_pairs(mask, 3).expand_as(want), want), what
    assert allowed_pairs(None, 3) is None


@pytest.mark.parametrize("family", fast_subset(FAMILIES, ("bert", "deberta-v2", "modernbert")))
def test_qk_spectral_norm_is_the_svd_of_the_full_product(family):
    """Every head's c·σ_max(W_Q^h W_K^hᵀ) equals numpy's SVD of the d_model × d_model product (float64)."""
    model = model_of(family)
    got = head_qk_spectral_norms(model)
    want = qk_norms(model)
    assert got.shape == want.shape == (model.config.num_hidden_layers, model.config.num_attention_heads)
    assert_float32_close(got, want, scale=float(np.abs(want).max()), roundings=4, msg=family)
    assert len(np.unique(np.round(want, 6))) > 1


def test_qk_spectral_norm_of_a_zeroed_head_is_zero_and_factors_are_exact():
    """A pruned (all-zero) query head gives 0, not an error; a random head equals the full SVD to float64
    rounding; the QR route never forms the hidden × hidden matrix yet gives its largest singular value."""
    g = torch.Generator().manual_seed(0)
    w_q, w_k = torch.randn(2, 12, 40, generator=g, dtype=torch.float64), torch.randn(2, 12, 40, generator=g)
    w_q[1, 4:8] = 0
    got = qk_spectral_norms(w_q, w_k, heads=3).numpy()
    for l in range(2):
        for h in range(3):
            rows = slice(4 * h, 4 * h + 4)
            full = w_q[l, rows].T.numpy() @ w_k[l, rows].double().numpy()
            want = np.linalg.svd(full, compute_uv=False)[0]
            assert_float32_close(got[l, h], want, scale=want, roundings=64, eps=EPS64, msg=f"{l},{h}")
    assert got[1, 1] == 0.0


def test_qk_spectral_norm_of_a_diverged_head_is_nan_and_the_others_exact():
    """A head with a NaN or infinite query or key weight (a run that diverged) gives NaN, not an error; every other
    head still equals the full product's largest singular value."""
    g = torch.Generator().manual_seed(1)
    w_q, w_k = torch.randn(2, 12, 40, generator=g, dtype=torch.float64), torch.randn(2, 12, 40, generator=g)
    w_q[0, 5] = float("nan")  # layer 0, head 1
    w_k[1, 9, 3] = float("inf")  # layer 1, head 2
    got = qk_spectral_norms(w_q, w_k, heads=3).numpy()
    for l in range(2):
        for h in range(3):
            if (l, h) in ((0, 1), (1, 2)):
                assert np.isnan(got[l, h]), (l, h)
                continue
            rows = slice(4 * h, 4 * h + 4)
            want = np.linalg.svd(w_q[l, rows].T.numpy() @ w_k[l, rows].double().numpy(), compute_uv=False)[0]
            assert_float32_close(got[l, h], want, scale=want, roundings=64, eps=EPS64, msg=f"{l},{h}")


def test_families_without_known_projections_are_refused():
    """A family bertwatch has no query/key table for raises UnsupportedModelError naming the statistic."""
    model = tiny_encoder("splinter")
    with pytest.raises(UnsupportedModelError, match="qk_spectral_norm"):
        head_qk_spectral_norms(model)


def test_the_names_form_the_stability_menu_group():
    assert dict(STAT_GROUPS)["Stability"] == STABILITY_NAMES == (*LOGIT_NAMES, "qk_spectral_norm")


# ------------------------------------------------------------------------------------------------ generated

PIECES = list(WORDS[:12]) + [".", ",", "[SEP]", "[CLS]"]
text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=14).map(" ".join)
examples = st.lists(st.one_of(text, st.tuples(text, text)), min_size=1, max_size=4)


@pytest.mark.fast
@given(
    family=st.sampled_from(("bert", "distilbert", "albert", "modernbert", "deberta-v2", "mpnet")),
    items=examples,
    side=PADDING_SIDES,
    batch_size=st.integers(1, 3),
    order=ORDERS,
)
def test_probe_batches_give_each_example_its_own_logit_statistics(family, items, side, batch_size, order):
    """Through the callback's probe set, whatever the padding side, batch size and order, each example's
    max_logit and logit_std equal the float64 loop over it alone."""
    items = list(items)
    order.shuffle(items)
    tok = tiny_tokenizer()
    tok.padding_side = side
    if family in ("distilbert", "mpnet", "modernbert"):
        tok.model_input_names = ["input_ids", "attention_mask"]
    model = model_of(family)
    probe = build_probe_set(tok, texts=items, batch_size=batch_size, max_length=40)
    row = 0
    for batch, roles in zip(probe.batches, probe.roles):
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        with torch.no_grad(), capture(model, record_logits=True) as cap:
            model(**inputs)
        got = cap.logit_summary
        for b in range(batch["input_ids"].shape[0]):
            ids = batch["input_ids"][b][roles.real[b]].tolist()
            segments = probe.segments[row]
            peak, spread, magnitude = logits_alone(model, ids, None if segments is None else list(segments))
            assert_float32_close(got["max_logit"][b], peak, scale=magnitude, msg=f"max_logit {family} row {row}")
            assert_float32_close(got["logit_std"][b], spread, scale=magnitude, msg=f"logit_std {family} row {row}")
            row += 1


@pytest.mark.parametrize("family", fast_subset(["bert", "deberta-v2"], ["bert"]))
def test_the_monitor_logs_the_stability_grids_as_the_loop_on_each_example_alone(family, tmp_path):
    """Through the current monitor's probe pass: max_logit and logit_std are the mean over examples of the loop on
    each example alone, qk_spectral_norm the SVD of the weights, next to an ordinary map statistic."""

    import transformers as T

    from bertwatch.options.settings import ProbeSettings
    from tests.support.models import OneMember
    from tests.support.tiny_trainer import toy_texts

    tok = tiny_tokenizer()
    if family in NO_SEGMENTS:
        tok.model_input_names = ["input_ids", "attention_mask"]
    model = model_of(family)
    texts = toy_texts(5, seed=3, pairs=True)
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    monitor = sub = OneMember(
        model,
        ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run")),
        STABILITY_NAMES + ("cls_mass",),
        args,
        T.TrainerState(),
        {"processing_class": tok},
    )
    monitor.run("begin", T.TrainerState())
    monitor.close()
    grids = sub.history[-1][1]
    assert set(grids) == {*STABILITY_NAMES, "cls_mass"}
    peaks, spreads, magnitude = [], [], 0.0
    for text in texts:
        enc = tok(text["text"], text.get("text_pair"))
        segments = enc.get("token_type_ids")
        peak, spread, size = logits_alone(model, enc["input_ids"], segments)
        peaks.append(peak)
        spreads.append(spread)
        magnitude = max(magnitude, size)
    assert_float32_close(grids["max_logit"], np.mean(peaks, axis=0), scale=magnitude, msg="max_logit")
    assert_float32_close(grids["logit_std"], np.mean(spreads, axis=0), scale=magnitude, msg="logit_std")
    want = qk_norms(model)
    assert_float32_close(grids["qk_spectral_norm"], want, scale=float(want.max()), msg="qk_spectral_norm")


def test_qk_spectral_norm_of_a_lora_model_includes_the_adapter_update():
    """peft's LoRA keeps the pretrained weight in ``base_layer`` and adds its update in forward: the statistic is
    that of the merged model (through the peft wrapper), not of the pretrained weight."""
    import copy

    from peft import LoraConfig, get_peft_model

    base = tiny_encoder("bert", seed=2)
    torch.manual_seed(3)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "key"], init_lora_weights=False)
    peft_model = get_peft_model(copy.deepcopy(base), config)
    got = head_qk_spectral_norms(peft_model)
    want = qk_norms(copy.deepcopy(peft_model).merge_and_unload())
    assert_float32_close(got, want, scale=float(want.max()), msg="LoRA")
    assert np.abs(qk_norms(base) - want).max() > 1e-3 * want.max()  # the update moves the statistic


@pytest.mark.parametrize("family", fast_subset(["bert", "deberta-v2", "mpnet"], ["bert"]))
def test_logit_statistics_under_bf16_autocast_are_the_float64_loop_to_bf16_rounding(family):
    """Under the training's bf16 autocast (as the monitor runs the probe pass) the scores are the low-precision
    ones the model used: each example's statistics stay within bf16 rounding, times the depth, of the float64 loop
    on it alone."""
    model = model_of(family)
    batch, rows, segs = padded(family not in NO_SEGMENTS)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), capture(model, record_logits=True) as cap:
        model(**batch)
    got = cap.logit_summary
    assert all(v.dtype == torch.float32 for v in got.values())
    eps, roundings = float(torch.finfo(torch.bfloat16).eps), 8 * model.config.num_hidden_layers
    for b, (ids, segments) in enumerate(zip(rows, segs)):
        peak, spread, magnitude = logits_alone(model, ids, segments)
        for name, want in (("max_logit", peak), ("logit_std", spread)):
            assert_float32_close(got[name][b], want, scale=magnitude, roundings=roundings, eps=eps, msg=name)
