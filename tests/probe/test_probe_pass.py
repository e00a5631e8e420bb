"""The probe pass's contracts: measurements and riders checked against their protocols, the plan of a pass
computed from what the due callbacks want, the run's context built once per watched, and a new statistic family
plugged in as one measurement (its grid checked against a float64 loop over each example alone)."""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T

import bertwatch.callbacks.watched_run as watched_module
from bertwatch.callbacks import BertWatchCallback
from bertwatch.callbacks.riders import WordClassPass
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME
from bertwatch.heads.maps.stats import DRIFT_NAMES
from bertwatch.options.settings import ALL_STATS, ProbeSettings
from bertwatch.probe.measurements import (
    MEASUREMENTS,
    CaptureNeeds,
    Measurement,
    MeasurementPass,
    ProbeBatch,
    measurement_of,
)
from bertwatch.probe.probe_context import ProbeContext
from bertwatch.probe.probe_pass import execute, plan_pass
from bertwatch.probe.records import Rider
from tests.support.models import OneMember
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts
from tests.support.tolerance import assert_float32_close

# ------------------------------------------------------------------------------------------------ protocols


def test_every_rider_is_a_rider():
    assert isinstance(WordClassPass([["[CLS]"]]), Rider)


def test_every_statistic_has_exactly_one_measurement_and_every_measurement_is_one():
    for measurement in MEASUREMENTS:
        assert isinstance(measurement, Measurement), type(measurement).__name__
        assert measurement.stage in ("before", "forward", "after")
        assert set(measurement.names) <= set(ALL_STATS)
    given = [n for m in MEASUREMENTS for n in m.names]
    assert sorted(given) == sorted(ALL_STATS) and len(given) == len(set(given))
    assert measurement_of("norm_ratio").needs(["norm_ratio"]) == CaptureNeeds(maps=True, values=True)
    with pytest.raises(KeyError, match="no bertwatch measurement gives 'nope'"):
        measurement_of("nope")


def test_capture_needs_union_and_arguments():
    both = CaptureNeeds(maps=True) | CaptureNeeds(values=True, hidden_states=True)
    assert both == CaptureNeeds(maps=True, values=True, hidden_states=True)
    assert both.capture_arguments() == {"record_values": True, "record_logits": False}
    assert CaptureNeeds(logits=True).capture_arguments() == {"record_values": False, "record_logits": True}
    assert both.forward_arguments() == {"output_hidden_states": True}
    assert CaptureNeeds(maps=True).beyond_maps is False and both.beyond_maps is True
    assert CaptureNeeds().any is False and CaptureNeeds(maps=True).any is True


# ------------------------------------------------------------------------------------------------ the plan


def _groups(plan) -> dict[str, tuple[str, ...]]:
    return {type(m).__name__: names for m, names in plan.work}


def test_the_plan_is_the_union_of_the_due_callbacks_wants_in_logging_order():
    a, b = {"entropy", "head_importance", "cls_mass_norm"}, {"cls_mass", "drift_js", IG_NAME}
    plan = plan_pass("step", 10, a | b, a | b, num_maps=4, reference_ready=True)
    assert plan.names == tuple(n for n in ALL_STATS if n in a | b)
    assert _groups(plan) == {
        "GradientStatistics": ("head_importance",),
        "NormStatistics": ("cls_mass_norm",),
        "MapStatistics": ("cls_mass", "entropy", "drift_js"),
        "IntegratedGradientsStatistic": (IG_NAME,),
    }
    assert plan.num_maps == 4 and plan.uses_reference and not plan.build_reference and not plan.empty
    assert plan.needs == CaptureNeeds(maps=True, values=True) and plan.shared_forward

    again = plan_pass("evaluate", 10, a | b, a | b, num_maps=4, measured=set(plan.names), maps_done=True,
                      reference_ready=True)  # fmt: skip
    assert again.names == () and again.num_maps == 0 and again.empty


def test_the_plan_skips_the_shared_forward_when_only_gradients_are_due():
    plan = plan_pass("step", 2, GRADIENT_NAMES, GRADIENT_NAMES, reference_ready=False)
    assert not plan.shared_forward and not plan.build_reference and plan.needs == CaptureNeeds(maps=True)
    maps_only = plan_pass("step", 2, (), (), num_maps=3, reference_ready=False)
    assert maps_only.num_maps == 3 and not maps_only.shared_forward and not maps_only.empty


def test_a_plan_without_the_gradient_statistics_is_the_plan_made_without_them():
    """``ProbePlan.without``: the start pass's plan once the loss is refused, as ``plan_pass`` plans it without the
    gradient statistics (the same maps, reference and riders); a drift statistic stays."""
    gradients = {*GRADIENT_NAMES, IG_NAME}
    names = {"entropy", "cls_mass", *DRIFT_NAMES, *gradients}
    rider = WordClassPass([["[CLS]"]])
    args = dict(num_maps=2, reference_ready=False, riders=[rider])
    full = plan_pass("begin", 0, names, names, **args)
    assert full.without(gradients) == plan_pass("begin", 0, names - gradients, names, **args)
    only = plan_pass("begin", 0, gradients, gradients, reference_ready=True)
    assert only.without(gradients).empty and only.without(()) == only
    with pytest.raises(ValueError, match="drift"):
        full.without(DRIFT_NAMES)


@pytest.mark.parametrize(
    ("event", "due_drift", "ready", "model", "from_model", "build"),
    [
        ("begin", False, False, False, False, True),  # a drift statistic watched: the reference is step 0's maps
        ("begin", False, False, True, True, False),  # ... or the reference model's
        ("begin", False, True, False, False, False),  # cached: nothing to take
        ("step", True, False, False, False, True),  # resumed without cache: drift from the model now
        ("step", True, False, True, True, False),
        ("step", False, False, False, False, False),  # no drift due after begin: no reference taken
    ],
)
def test_the_plan_takes_the_reference_once_and_from_the_right_model(event, due_drift, ready, model, from_model, build):
    watched = {*DRIFT_NAMES, "entropy"}
    due = DRIFT_NAMES if due_drift else ("entropy",)
    plan = plan_pass(event, 0, due, watched, reference_ready=ready, reference_model=model)
    assert (plan.reference_from_model, plan.build_reference) == (from_model, build)


# ------------------------------------------------------------------------------------------------ the context


@pytest.fixture(scope="module")
def tok() -> T.PreTrainedTokenizerBase:
    return tiny_tokenizer()


def _settings(tmp_path, texts=None) -> ProbeSettings:
    texts = texts or [{"text": t["text"], "label": t["label"]} for t in toy_texts(5, seed=4)]
    return ProbeSettings(texts=texts, batch_size=2, logging_dir=str(tmp_path / "run"))


def _attached(tok, tmp_path, names=(), texts=None, maps=0):
    """A tiny model and a one-member watched over it (``tests.support.models.OneMember``)."""
    model = tiny_bert(tok)
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    member = OneMember(model, _settings(tmp_path, texts), names, args, T.TrainerState(), {"processing_class": tok},
                       maps=maps)  # fmt: skip
    return model, member


def test_the_context_is_built_once_per_watched_run_and_no_attribute_is_born_later(tok, tmp_path, monkeypatch):
    built = []
    original = watched_module.build_probe_context
    monkeypatch.setattr(watched_module, "build_probe_context", lambda *a: built.append(1) or original(*a))
    model = tiny_bert(tok)
    args = T.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    state, settings, event = T.TrainerState(), _settings(tmp_path), {"processing_class": tok}
    a = OneMember(model, settings, ["entropy"], args, state, event, maps=1)
    watched, context = a.watched, a.context
    fresh = set(vars(watched))
    b = OneMember(model, _settings(tmp_path), DRIFT_NAMES, args, state, event)  # equal settings, the same run
    assert b.watched is watched and len(built) == 1 and isinstance(context, ProbeContext)
    assert context.encoder is model
    a.run("begin", state)
    b.run("begin", state)
    state.global_step = 1
    a.run("step", state)
    b.run("step", state)
    assert set(vars(watched)) == fresh
    assert [s for s, _ in a.history] == [0, 1] == [s for s, _ in b.history] and context.reference.ready
    a.close()
    b.close()

    again = OneMember(model, settings, ["entropy"], args, T.TrainerState(), event)  # a new run
    assert len(built) == 2 and again.watched is not watched
    again.close()


def test_the_default_statistics_and_the_cheap_mixing_ones_cost_one_forward_per_probe_batch(tok, tmp_path):
    """The gradient pass records the maps, value states, contexts, logit summary and attention blocks the other
    default statistics, the mixing ratio and rollout's masses read, so no shared no-grad forward follows it; without
    the gradient statistics the shared forward (hidden states and contexts) gives the same grids: bit for bit from
    the same maps and states, the mixing ratio to float32 rounding (its attention outputs formed through W_O)."""
    mixing = ("mixing_ratio", "cls_mass_rollout", "sep_mass_rollout")
    names = [*BertWatchCallback.default_stats, *mixing]
    model, monitor = _attached(tok, tmp_path, names)
    calls = []
    handle = model.register_forward_pre_hook(lambda *_: calls.append(1))
    start = execute(plan_pass("begin", 0, DRIFT_NAMES, names, reference_ready=False), monitor.context)
    assert not monitor.context.reference.ready  # the pass returns the reference it took; the watched run keeps it
    monitor.context.reference.keep(start.references["drift"])
    calls.clear()
    plan = plan_pass("step", 3, names, names, reference_ready=True)
    assert plan.needs.blocks
    one = execute(plan, monitor.context)
    batches = len(monitor.context.probe.batches)
    assert len(calls) == batches and set(one.grids) == set(names)
    calls.clear()
    alone = [n for n in names if n not in GRADIENT_NAMES]
    shared = plan_pass("step", 3, alone, alone, reference_ready=True)
    two = execute(shared, monitor.context)
    handle.remove()
    monitor.close()
    assert len(calls) == batches
    same = [n for n in alone if n != "mixing_ratio"]
    assert all(np.array_equal(one.grids[n], two.grids[n], equal_nan=True) for n in same)
    assert_float32_close(one.grids["mixing_ratio"], two.grids["mixing_ratio"], msg="mixing_ratio")


def test_the_gradient_pass_records_the_blocks_and_the_logit_summary_only_for_a_statistic_that_reads_them(tok, tmp_path):
    """Each block's input and output cost 2·rows·layers·T·d numbers per batch, the logit summary a reduction of every
    layer's scores: taken only when a watched statistic reads them."""
    model, monitor = _attached(tok, tmp_path, BertWatchCallback.default_stats)  # the context holds the model weakly
    cases = (
        (BertWatchCallback.default_stats, False, True),
        ((*GRADIENT_NAMES, "mixing_ratio"), True, False),
        ((*GRADIENT_NAMES, "entropy"), False, False),
    )
    for names, recorded, logits in cases:
        plan = plan_pass("step", 3, names, names, reference_ready=True)
        gradients = next(m for m, _ in plan.work if m.stage == "before")
        unit = monitor.context.units[0]
        batch = ProbeBatch(index=0, rows=unit.rows, inputs=unit.inputs, roles=unit.roles)
        states = gradients.start(GRADIENT_NAMES, monitor.context, plan.needs).measure(batch).states
        assert (states.blocks is not None) == recorded, names
        assert bool(states.logit_summary) == logits, names
    monitor.close()


def test_a_pass_that_only_keeps_maps_runs_the_kept_examples_alone_and_their_maps_are_their_own(tok, tmp_path):
    """With no statistic due (the end of a run whose last step was measured), the forward serves the kept maps
    only: it runs those rows and no other; each kept map is the example's own, as the eager model gives it alone."""
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(5, seed=4)]
    model, monitor = _attached(tok, tmp_path, (), texts, maps=3)
    rows: list[int] = []
    handle = model.register_forward_pre_hook(lambda _, args, kwargs: rows.append(kwargs["input_ids"].shape[0]),
                                             with_kwargs=True)  # fmt: skip
    result = execute(plan_pass("end", 7, (), (), num_maps=3, reference_ready=True), monitor.context)
    handle.remove()
    monitor.close()
    assert [len(b["input_ids"]) for b in monitor.context.probe.batches] == [2, 2, 1]
    assert rows == [2, 1] and len(result.examples) == 3
    eager = copy.deepcopy(model).eval()
    eager.set_attn_implementation("eager")
    for (tokens, maps, _), text in zip(result.examples, texts):
        enc = tok(text["text"], return_tensors="pt")
        with torch.no_grad():
            alone = torch.stack(eager(**enc, output_attentions=True).attentions, 1)[0].double()
        assert tokens == tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        assert_float32_close(maps.double().numpy(), alone.numpy(), msg="kept map")


# ------------------------------------------------------------------------------------------------ a new family


class _DiagonalMass:
    """A toy family: (1/n) Σ_i A[i, i] under the name "self", computed in this test, not by bertwatch, plus a
    weights-only grid under "cls_entropy" (layer index + head index / 100) produced when the pass finishes."""

    names = ("self", "cls_entropy")
    stage = "forward"

    def __init__(self) -> None:
        self.started = 0

    def needs(self, names: Collection[str]) -> CaptureNeeds:
        return CaptureNeeds(maps=True)

    def start(self, names: tuple[str, ...], context: ProbeContext, shared: CaptureNeeds) -> MeasurementPass:
        self.started += 1
        layers, heads = context.layers, context.heads

        class Pass:
            def measure(self, batch: ProbeBatch) -> dict[str, torch.Tensor]:
                if "self" not in names:
                    return {}
                real = batch.roles.real.float()
                diagonal = torch.diagonal(batch.attentions.float(), dim1=-2, dim2=-1)  # [B, L, H, T]
                return {"self": (diagonal * real[:, None, None]).sum(-1) / real.sum(-1)[:, None, None]}

            def finish(self, grids: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
                if "cls_entropy" in names:
                    grid = torch.arange(layers)[:, None] + torch.arange(heads)[None, :] / 100
                    grids = {**grids, "cls_entropy": grid.double()}
                return grids

        return Pass()


def _alone_diagonal(model, tok, texts) -> np.ndarray:
    """(1/n) Σ_i A[i, i] by loops over eager maps, float64, each example alone (no padding), averaged."""
    model = copy.deepcopy(model).eval()
    model.set_attn_implementation("eager")
    per = []
    for text in texts:
        enc = tok(text["text"], text.get("text_pair"), return_tensors="pt")
        with torch.no_grad():
            attn = torch.stack(model(**enc, output_attentions=True).attentions, 1)[0].double().numpy()
        layers, heads, n, _ = attn.shape
        per.append([[sum(attn[l, h, i, i] for i in range(n)) / n for h in range(heads)] for l in range(layers)])
    return np.mean(per, axis=0)


def test_a_new_family_is_one_measurement_and_its_grid_is_the_loop_on_each_example_alone(tok, tmp_path):
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(5, seed=4)]
    names = ["self", "cls_entropy", "entropy"]
    model, monitor = _attached(tok, tmp_path, ["entropy"], texts)
    family = _DiagonalMass()
    measurements = (family, measurement_of("entropy"))
    plan = plan_pass("step", 3, names, names, reference_ready=True, measurements=measurements)
    assert _groups(plan) == {"_DiagonalMass": ("self", "cls_entropy"), "MapStatistics": ("entropy",)}
    with pytest.raises(ValueError, match=r"no measurement gives \['cls_mass'\]"):
        plan_pass("step", 3, ["cls_mass"], [], measurements=(family,))
    result = execute(plan, monitor.context)
    monitor.close()
    assert family.started == 1 and list(result.grids) == ["self", "entropy", "cls_entropy"]
    assert_float32_close(result.grids["self"], _alone_diagonal(model, tok, texts), msg="self")
    layers, heads = result.grids["cls_entropy"].shape
    assert [[result.grids["cls_entropy"][l, h] for h in range(heads)] for l in range(layers)] == [
        [np.float32(l + h / 100) for h in range(heads)] for l in range(layers)
    ]


# ------------------------------------------------------------------------------------------------ host reads


class _HostReads:
    """Counts the calls of bertwatch's own code that read a tensor's values back to the host (on a GPU each waits
    for the device): ``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``float(t)``, ``int(t)``, ``bool(t)``,
    ``.nonzero()``. A call counts when the first frame outside torch that made it is in the ``bertwatch`` package
    (the model's own forward, in transformers, reads its mask back once: not bertwatch's to count)."""

    METHODS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__", "nonzero")

    def __init__(self, monkeypatch) -> None:
        import bertwatch

        self.root = str(Path(bertwatch.__file__).resolve().parent)
        self.torch_root = str(Path(torch.__file__).resolve().parent)
        self.calls: list[tuple[str, str]] = []
        self.on = False
        for name in self.METHODS:
            monkeypatch.setattr(torch.Tensor, name, self._counting(name, getattr(torch.Tensor, name)))

    def _counting(self, name, original):
        def counted(tensor, *args, **kwargs):
            if self.on:
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_filename.startswith(self.torch_root):
                    frame = frame.f_back
                where = "" if frame is None else frame.f_code.co_filename
                if where.startswith(self.root):
                    self.calls.append((name, f"{Path(where).name}:{frame.f_lineno}"))
            return original(tensor, *args, **kwargs)

        return counted

    def during(self, fn):
        self.calls, self.on = [], True
        try:
            return fn()
        finally:
            self.on = False


def _pass_reads(tok, tmp_path, texts: int, reads: _HostReads) -> tuple[list, int]:
    """The host reads of one pass at the defaults over ``texts`` probe texts in batches of 2 (the drift reference
    taken at the start, so the pass streams it), and how many units it ran."""
    texts = [{"text": t["text"], "label": t["label"]} for t in toy_texts(texts, seed=4)]
    names = BertWatchCallback.default_stats
    _, monitor = _attached(tok, tmp_path, names, texts)
    start = execute(plan_pass("begin", 0, names, names), monitor.context)
    monitor.context.reference.keep(start.references["drift"])
    context = dataclasses.replace(monitor.context, outlier_dims=start.references["outlier_dims"])
    plan = plan_pass("step", 3, names, names, reference_ready=True)
    result = reads.during(lambda: execute(plan, context))
    units = len(monitor.context.units)
    monitor.close()
    assert set(result.grids) == set(names) and result.health
    return reads.calls, units


def test_a_pass_reads_back_to_the_host_once_whatever_its_number_of_batches(tok, tmp_path, monkeypatch):
    """With the CPU taken for a device whose reads stall it (``heads.host.HOST_DEVICES`` emptied: the path a GPU
    takes), a pass at the defaults over 3 probe batches and one over 8 read the same values back, in one copy
    (``.cpu()`` once): nothing is read per batch. The calls after that copy read host tensors (grids to numpy)."""
    import bertwatch.heads.host as host

    monkeypatch.setattr(host, "HOST_DEVICES", ())
    reads = _HostReads(monkeypatch)
    few, few_units = _pass_reads(tok, tmp_path / "few", 6, reads)
    many, many_units = _pass_reads(tok, tmp_path / "many", 16, reads)
    assert many_units > few_units >= 3
    assert sorted(few) == sorted(many), (few, many)
    copies = [where for name, where in many if name == "cpu"]
    assert len(copies) == 1 and copies[0].startswith("probe_pass.py:")  # _to_host's one copy
