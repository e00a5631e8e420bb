"""The drift reference kept as maps or as a frozen model: which one a run keeps, that either gives each unit the
maps the model had when it was taken (to float16 rounding for maps; a frozen copy that later steps do not reach),
and the cache of each kind."""

from __future__ import annotations

import pytest
import torch
import transformers as T

import bertwatch.probe.reference as reference
from bertwatch.callbacks import BertWatchCallback
from bertwatch.heads.capture import capture
from bertwatch.options.settings import ProbeSettings
from bertwatch.probe.probe_pass import execute, plan_pass
from bertwatch.probe.probe_set import ReferenceCache
from tests.support.models import OneMember
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts
from tests.support.tolerance import assert_float32_close


@pytest.fixture(scope="module")
def tok() -> T.PreTrainedTokenizerBase:
    return tiny_tokenizer()


def _member(tok, tmp_path) -> tuple[torch.nn.Module, OneMember]:
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(7, 2)]
    settings = ProbeSettings(texts=texts, batch_size=3, logging_dir=str(tmp_path / "run"))
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    model = tiny_bert(tok)
    names = BertWatchCallback.default_stats
    return model, OneMember(model, settings, names, args, T.TrainerState(), {"processing_class": tok})


def _maps(model, unit, context) -> torch.Tensor:
    with torch.no_grad(), capture(model) as cap:
        model(**context.model_inputs(unit.inputs))
    return cap.attentions


def test_the_reference_is_kept_where_it_costs_the_device_least(tok, tmp_path) -> None:
    model, member = _member(tok, tmp_path)
    context, probe = member.context, member.probe

    def taking(device: str) -> reference.ReferenceTaking:
        return reference.ReferenceTaking(model, probe, (2, 4), torch.device(device), None, ())

    weights = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )
    assert sum(probe.maps_bytes(2, 4)) < weights and taking("cpu").kept is None  # short texts: maps
    probe.tokens = [t * 40 for t in probe.tokens]  # as if each text were 40 times longer: 1600 times the maps
    assert sum(probe.maps_bytes(2, 4)) > weights
    kept = taking("cpu").kept
    assert isinstance(kept, reference.ModelReference) and kept.model is not model
    assert taking("cuda").kept is None  # maps in host memory cost a GPU nothing (nothing is pinned until used)
    assert context.device.type == "cpu"
    member.close()


@pytest.mark.parametrize("keeping", ["maps", "model"])
def test_either_keeping_gives_each_unit_the_maps_of_the_model_it_was_taken_from(tok, tmp_path, monkeypatch, keeping):
    monkeypatch.setattr(reference, "_keeps_model", lambda *_: keeping == "model")
    model, member = _member(tok, tmp_path)
    context = member.context
    before = [_maps(model, unit, context) for unit in context.units]
    names = BertWatchCallback.default_stats
    taking = execute(plan_pass("begin", 0, names, names), context).references["drift"]
    context.reference.keep(taking)
    kept = context.reference.current
    assert kept.kind == keeping
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # training moves the model, not its reference
    if keeping == "model":
        assert all(not p.requires_grad and p.grad is None for p in kept.model.parameters())
        assert kept.model is not model
    for unit, want in zip(context.units, before, strict=True):
        got = kept.for_unit(unit)
        assert got.shape == want.shape
        real = unit.roles.real
        pairs = (real[:, None, None, :, None] & real[:, None, None, None, :]).expand_as(want)
        assert torch.all(got[~pairs] == 0) or keeping == "model"  # maps are zero where a row has no token
        if keeping == "maps":  # stored in float16: half a unit in its last place (2^-11 relative)
            torch.testing.assert_close(got.double()[pairs], want.double()[pairs], rtol=2**-11, atol=2**-25)
        else:
            assert_float32_close(got.double()[pairs], want.double()[pairs])
    member.close()


def test_the_cache_holds_one_kind_and_a_first_version_cache_still_loads_as_maps(tmp_path) -> None:
    cache = ReferenceCache(tmp_path / "bertwatch" / "reference.pt")
    state = {"w": torch.randn(3, 2), "b": torch.zeros(2)}
    cache.save_model(state, 2, 3, "test")
    assert cache.load("abc", 2, 3) is None and cache.load_model(2, 4) is None
    loaded = cache.load_model(2, 3)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    maps = [torch.rand(2, 3, 4, 4)]
    cache.save(maps, "abc", 2, 3, "test")
    assert cache.load_model(2, 3) is None and torch.allclose(cache.load("abc", 2, 3)[0].float(), maps[0], atol=1e-3)
    torch.save({"version": 1, "fingerprint": "abc", "layers": 2, "heads": 3, "source": "old", "maps": maps},
               cache.path)  # fmt: skip
    assert torch.equal(cache.load("abc", 2, 3)[0], maps[0]) and cache.load_model(2, 3) is None
