"""The probe pass's units: rows of a probe batch run together within a memory bound, cut to their longest row. The
units partition the probe set, each holds at most its bound of maps (a longer row alone), each row's cut maps are
its own, and a pass over units of one row gives the grids and run-health signals of a pass over whole batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as T

import bertwatch.probe.probe_units as units_module
from bertwatch.callbacks import BertWatchCallback
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.probe_pass import execute, plan_pass
from tests.support.models import OneMember
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts
from tests.support.tolerance import assert_float32_close


@pytest.fixture(scope="module")
def tok() -> T.PreTrainedTokenizerBase:
    return tiny_tokenizer()


def _member(tok, tmp_path, texts: int = 9, batch: int = 4, pairs: bool = False) -> tuple[torch.nn.Module, OneMember]:
    """A tiny model (the watched run holds it weakly: the caller keeps it) and a member measuring the defaults."""
    examples = [{k: t[k] for k in ("text", "text_pair", "label") if k in t} for t in toy_texts(texts, 3, pairs)]
    settings = ProbeSettings(texts=examples, batch_size=batch, logging_dir=str(tmp_path / "run"))
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    model = tiny_bert(tok)
    return model, OneMember(model, settings, BertWatchCallback.default_stats, args, T.TrainerState(),
                            {"processing_class": tok})  # fmt: skip


def test_units_partition_the_probe_set_within_their_bound_and_cut_each_row_to_its_own_maps(tok, tmp_path, monkeypatch):
    layers, heads = 2, 4
    row_bytes = layers * heads * 16 * 16 * 4  # float32 maps of a row of 16 tokens
    monkeypatch.setattr(units_module, "UNIT_MAPS_BYTES", 2 * row_bytes)
    model, member = _member(tok, tmp_path)
    context, probe = member.context, member.probe
    units = context.units
    assert sorted(r for u in units for r in u.rows) == list(range(probe.size))
    for unit in units:
        first = probe.first_row(unit.batch)
        assert all(first <= r < first + len(probe.roles[unit.batch].real) for r in unit.rows)
        assert len(unit.rows) * layers * heads * unit.width**2 * 4 <= 2 * row_bytes or len(unit.rows) == 1
        assert unit.width == max(unit.lengths) and all(w is None for w in unit.positions)  # real tokens first
        real = probe.roles[unit.batch].real
        for k, row in enumerate(unit.rows):
            n = int(real[row - first].sum())
            assert unit.lengths[k] == n == len(probe.tokens[row])
            assert torch.equal(unit.inputs["input_ids"][k, :n], probe.batches[unit.batch]["input_ids"][row - first, :n])
    model.eval().set_attn_implementation("eager")  # the model's own maps, as it computes them (no dropout)
    with torch.no_grad():
        for unit in units:
            attn = torch.stack(model(**context.model_inputs(unit.inputs), output_attentions=True).attentions, 1)
            for row, maps in zip(unit.rows, unit.crop(attn), strict=True):
                batch, index = probe.batches[unit.batch], row - probe.first_row(unit.batch)
                n = len(probe.tokens[row])
                alone = {k: batch[k][index : index + 1, :n] for k in ("input_ids", "token_type_ids") if k in batch}
                want = torch.stack(model(**alone, output_attentions=True).attentions, 1)[0]
                assert maps.shape == want.shape
                assert_float32_close(maps.double().numpy(), want.double().numpy(), msg=f"row {row}")
    member.close()


@pytest.mark.parametrize("pairs", [False, True])
def test_a_pass_over_units_of_one_row_measures_what_a_pass_over_whole_batches_does(tok, tmp_path, monkeypatch, pairs):
    """Every default statistic, the drift from the reference and the run-health signals: each example's values
    depend on the example alone, so the units' size changes nothing but float rounding."""
    names = BertWatchCallback.default_stats
    found = {}
    for bound in (1, 2**30):  # every row alone; every batch whole
        monkeypatch.setattr(units_module, "UNIT_MAPS_BYTES", bound)
        model, member = _member(tok, tmp_path / str(bound), pairs=pairs)
        assert len(member.context.units) == (member.probe.size if bound == 1 else len(member.probe.batches))
        start = execute(plan_pass("begin", 0, names, names), member.context)
        member.context.reference.keep(start.references["drift"])
        with torch.no_grad():  # a model that moved from its reference
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        found[bound] = execute(plan_pass("step", 1, names, names, reference_ready=True), member.context)
        member.close()
    alone, whole = found[1], found[2**30]
    assert set(alone.grids) == set(whole.grids) == set(names)
    for name in names:
        scale = float(np.nanmax(np.abs(whole.grids[name]))) if np.isfinite(whole.grids[name]).any() else 1.0
        assert_float32_close(alone.grids[name], whole.grids[name], scale=scale, roundings=64, msg=name)
    assert alone.health.keys() == whole.health.keys()
    for name, value in whole.health.items():
        assert alone.health[name] == pytest.approx(value, rel=1e-4, abs=1e-7, nan_ok=True), name


def _labelled_batch(lengths: list[int], labelled: list[bool]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """A sequence-classification batch of rows of ``lengths`` real tokens (real tokens first), ``labels`` -100 on the
    rows not ``labelled``; and its real tokens."""
    real = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    labels = torch.tensor([1 if keep else -100 for keep in labelled])
    return {"input_ids": torch.where(real, 7, 0), "attention_mask": real.long(), "labels": labels}, real


def _planned(lengths: list[int], labelled: list[bool], device: str, maps_per_row: int = 8) -> list[tuple[list, int]]:
    batch, real = _labelled_batch(lengths, labelled)
    units = units_module.plan_batch(batch, real, "sequence-classification", torch.device(device), maps_per_row)
    assert sorted(r for rows, _ in units for r in rows) == list(range(len(lengths)))  # a partition of the batch
    for rows, width in units:
        assert width == max(lengths[r] for r in rows)
        assert len(rows) == 1 or len(rows) * maps_per_row * width**2 * 4 <= units_module.UNIT_MAPS_BYTES, rows
    return units


@pytest.mark.parametrize("device", ["cpu", "cuda"])  # length groups; rows sorted by length (nothing runs there)
def test_rows_without_labels_stay_within_the_bound_and_share_the_labelled_rows(monkeypatch, device):
    """A group of unlabelled rows whose maps together pass the bound comes out in several units within it (the code
    before ran such a batch whole: one unit of every row, past the bound), each with a labelled row where the batch
    has enough of them (the model's loss refuses a unit of unlabelled rows); a batch whose rows are all labelled is
    planned as before."""
    monkeypatch.setattr(units_module, "UNIT_MAPS_BYTES", 2 * 8 * 16 * 16 * 4)  # two rows of 16 tokens
    half = [False] * 4 + [True] * 4
    units = _planned([16] * 8, half, device)
    assert [rows for rows, _ in units] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert len(_planned([16] * 8, [False] * 8, device)) == 4  # no labelled row: bounded all the same
    # short unlabelled rows (a length group of their own on the CPU) beside labelled rows too long to share a unit
    units = _planned([16] * 6 + [40, 40], [False] * 6 + [True, True], device)
    assert len(units) == 5 and sorted(len(rows) for rows, _ in units) == [1, 1, 2, 2, 2]
    units = _planned([16] * 7 + [12], [True] * 8, device)  # every row labelled: the plan of before
    assert units == [([7, 0], 16), ([1, 2], 16), ([3, 4], 16), ([5, 6], 16)]
