"""``WatchSettings``: a front of a dozen options and five nested values, every input checked at construction (a
property test feeds every option wrong types and out-of-range values), the probe part a projection of its fields,
the docs' option tables matching the fields, and monitors shared by equal settings (by value, not by list object)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bertwatch.callbacks import BertWatchCallback, EntropyCallback, GradientImportanceCallback
from bertwatch.core.schema import default_of
from bertwatch.options.settings import (
    ALL_STATS,
    GROUPS,
    PROBE_PART,
    AblationOptions,
    AlertSettings,
    ExpertOptions,
    ProbeOptions,
    ProbeSettings,
    VerdictSettings,
    WatchSettings,
    check_options,
    option_specs,
)
from tests.support.tiny_trainer import tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
FRONT = [f.name for f in dataclasses.fields(WatchSettings)]


@pytest.mark.fast
def test_the_front_is_small_and_the_rest_is_nested() -> None:
    groups = {name for name, _, _ in GROUPS}
    assert len([name for name in FRONT if name not in groups]) <= 12 and len(groups) <= 5
    assert {"probe_texts", "stats", "every_n_steps", "logging_dir", "ablate_on_end", "on_alert"} <= set(FRONT)
    assert WatchSettings().quiet is False and WatchSettings(quiet=True).quiet is True
    s = WatchSettings()
    assert (s.probing, s.alerts, s.verdict, s.ablation, s.expert) == (
        ProbeOptions(), AlertSettings(), VerdictSettings(), AblationOptions(), ExpertOptions())  # fmt: skip
    assert "strict" not in FRONT and all("strict" not in [f.name for f in dataclasses.fields(c)] for _, c, _ in GROUPS)


# ------------------------------------------------------------------------------------------------ names


@pytest.mark.fast
def test_unknown_names_are_refused_with_the_closest_and_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"unknown option 'num_mapz' \(did you mean 'num_maps'\?\); valid: probe_texts"):
        WatchSettings().replace(num_mapz=2)
    with pytest.raises(TypeError, match="BertWatchCallback: unknown option 'num_mapz'.*valid: .*expert"):
        BertWatchCallback(num_mapz=2)
    with pytest.raises(TypeError, match="EntropyCallback: unknown option 'num_maps'; valid: (?!.*num_maps)"):
        EntropyCallback(num_maps=2)  # a BertWatchCallback option, not one of this callback's
    with pytest.raises(TypeError, match=r"EntropyCallback: unknown option 'word_classes'; valid: "):
        EntropyCallback(word_classes=True)  # an option of expert=ExpertOptions(...), which this callback does not take
    with pytest.raises(TypeError, match="EntropyCallback: unknown option 'expert.head_clusters'"):
        EntropyCallback(expert=ExpertOptions(head_clusters=True))
    assert EntropyCallback(expert=ExpertOptions(log_to_trackers=False)).log_to_trackers is False
    assert GradientImportanceCallback(expert=ExpertOptions(ig_steps=3)).probe_settings.ig_steps == 3
    with pytest.raises(TypeError, match="unknown options 'a', 'b'"):
        check_options(["a", "b"], ("x",))
    with pytest.raises(TypeError, match=r"settings must be a WatchSettings, e.g. settings=WatchSettings\("):
        BertWatchCallback(settings={"num_maps": 2})


# ------------------------------------------------------------------------------------------------ checks


@pytest.mark.fast
@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: WatchSettings(probe_texts="a good film, and a dull plot ."), TypeError,
         r'^probe_texts must be a list of texts, e.g. \["a good film"\]; got the string'),
        (lambda: WatchSettings(probe_texts=b"bytes"), TypeError, "probe_texts must be a list of texts"),
        (lambda: WatchSettings(probe_texts=[]), ValueError, "probe_texts must hold at least one text"),
        (lambda: WatchSettings(probe_texts=["fine", 3]), TypeError, r"^probe_texts\[1\] is int 3: a probe text is"),
        (lambda: WatchSettings(probe_texts=[("a", 2)]), TypeError, r"probe_texts\[0\] is tuple.*\(text, text_pair\)"),
        (lambda: WatchSettings(probe_texts=[{"label": 1}]), TypeError, r"probe_texts\[0\] is dict.*'text'"),
        (lambda: WatchSettings(probe_texts=[["a", "b"]]), TypeError, r"probe_texts\[0\] is list.*a tuple \(text, "),
        (lambda: WatchSettings(stats=["entropie"]), ValueError,
         r"stats: unknown bertwatch statistic 'entropie' \(did you mean 'entropy'\?\); valid .*: cls_mass, sep_mass"),
        (lambda: WatchSettings(stats="entropy"), TypeError, "stats must be a list of statistic names"),
        (lambda: WatchSettings(stats=[]), ValueError, "stats must name at least one statistic"),
        (lambda: WatchSettings(every_n_steps=-1), ValueError, r"every_n_steps must be >= 0 \(0 = only at start"),
        (lambda: WatchSettings(every_n_steps=2.5), TypeError, "every_n_steps must be a whole number or None, not 2.5"),
        (lambda: WatchSettings(overhead_budget=1.5), ValueError, r"overhead_budget must be in \(0, 1\]"),
        (lambda: WatchSettings(probe_dataset={"train": [1]}), TypeError, r"pass one split, e.g. probe_dataset=data"),
        (lambda: WatchSettings(on_alert="halt"), ValueError, "on_alert must be one of 'warn', 'stop', 'none'"),
        (lambda: ProbeOptions(max_length=1), ValueError, r"ProbeOptions.max_length must be >= 2 \(or None"),
        (lambda: ProbeOptions(at_start="no"), TypeError, "ProbeOptions.at_start must be True or False"),
        (lambda: ProbeOptions(tokenizer="bert-base-uncased"), TypeError, "ProbeOptions.tokenizer must be a tokenizer"),
        (lambda: AblationOptions(mode="mean"), ValueError, "unknown AblationOptions.mode 'mean'"),
        (lambda: AblationOptions(kwargs={"n_resample": 3}), TypeError, r"did you mean 'n_resamples'"),
        (lambda: AblationOptions(kwargs={"mode": "zero"}), ValueError, r"give it as AblationOptions\(mode=\.\.\.\)"),
        (lambda: ExpertOptions(word_classes=3), TypeError, "word_classes must be True"),
        (lambda: WatchSettings(probing={"seed": 1}), TypeError, r"probing must be a ProbeOptions, e.g. probing="),
    ],
)  # fmt: skip
def test_a_wrong_input_is_refused_with_what_to_pass(build, error, message) -> None:
    with pytest.raises(error, match=message):
        build()


def _wrong_values(name: str, default: object) -> st.SearchStrategy:
    """Values no option of this kind takes: of a wrong type, or out of its range (by the option's meaning)."""
    never = st.sampled_from([object(), 1j, {1, 2}])
    if name in WRONG:
        return st.one_of(WRONG[name], never)
    if isinstance(default, bool) or name in SWITCHES:
        return st.one_of(never, st.text(), st.integers(2, 10**6), st.floats(0.1, 0.9), st.lists(st.booleans()))
    raise AssertionError(f"no wrong values for option {name}: add it to WRONG")


def _counts(lowest: int, optional: bool = False) -> st.SearchStrategy:
    wrong = [st.integers(max_value=lowest - 1), st.floats(0.1, 1e6).filter(lambda x: not x.is_integer()),
             st.text(max_size=4), st.booleans()]  # fmt: skip
    return st.one_of(*wrong) if optional else st.one_of(*wrong, st.none())


def _objects() -> st.SearchStrategy:
    return st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.lists(st.integers(), max_size=2))


SWITCHES = {"probing.at_start", "probing.on_evaluate", "probing.at_end"}
WRONG = {  # option (as spelled in option_specs) -> values it refuses
    "probe_texts": st.one_of(st.text(), st.binary(), st.just([]), st.lists(st.integers(), min_size=1),
                             st.dictionaries(st.text(), st.text()), st.integers()),
    "probe_dataset": st.one_of(st.text(), st.integers(), st.dictionaries(st.text(), st.integers(), min_size=1)),
    "num_probe_examples": _counts(1),
    "stats": st.one_of(st.text(), st.just([]), st.lists(st.text(min_size=1).filter(lambda s: s not in ALL_STATS),
                                                        min_size=1), st.integers()),
    "every_n_steps": _counts(0, optional=True),
    "overhead_budget": st.one_of(st.floats(1.01, 1e6), st.floats(-1e6, 0.0), st.text(), st.booleans()),
    "logging_dir": st.one_of(st.just(""), st.integers(), st.lists(st.text(), min_size=1), st.booleans()),
    "loss_fn": st.one_of(st.text(), st.integers(), st.lists(st.integers())),
    "num_maps": _counts(0),
    "on_alert": st.one_of(st.text().filter(lambda s: s not in ("warn", "stop", "none")), st.integers()),
    "probing": _objects(),
    "alerts": _objects(),
    "verdict": _objects(),
    "ablation": _objects(),
    "expert": _objects(),
    "probing.seed": _counts(0),
    "probing.batch_size": _counts(1),
    "probing.max_length": _counts(2, optional=True),
    "probing.tokenizer": st.one_of(st.text(), st.integers(), st.booleans()),
    "probing.data_collator": st.one_of(st.text(), st.integers(), st.booleans()),
    "probing.reference_model": st.one_of(st.just(""), st.integers(), st.booleans(), st.lists(st.text())),
    "probing.compat_length": _counts(1, optional=True),
    "alerts.logit_multiple": st.one_of(st.floats(-1e6, 1.0), st.text(), st.booleans()),
    "alerts.outlier_multiple": st.one_of(st.floats(-1e6, 1.0), st.text(), st.booleans()),
    "alerts.logit_bound": st.one_of(st.floats(-1e6, 0.0), st.text(), st.booleans()),
    "alerts.entropy_fraction": st.one_of(st.floats(1.0, 1e6), st.floats(-1e6, 0.0), st.text()),
    "alerts.entropy_min_drop": st.one_of(st.floats(-1e6, 0.0), st.text(), st.booleans()),
    "alerts.sink_fraction": st.one_of(st.floats(1.0, 1e6), st.floats(-1e6, 0.0), st.text()),
    "alerts.sink_min_change": st.one_of(st.floats(1.0, 1e6), st.floats(-1e6, 0.0), st.text()),
    "alerts.patience": _counts(1),
    **{f"verdict.{name}": st.one_of(st.floats(1.01, 1e6), st.floats(-1e6, 0.0), st.text(), st.booleans())
       for name in ("collapse_share", "spread_fraction", "vanish_fraction", "risk_fraction", "lower_share",
                    "loss_line", "hold_share")},
    "verdict.confidence": st.one_of(st.floats(1.0, 1e6), st.floats(-1e6, 0.0), st.text(), st.booleans()),
    "verdict.alerts_at_risk": _counts(1),
    "ablation.mode": st.one_of(st.text().filter(lambda s: s not in ("uniform", "zero")), st.integers()),
    "ablation.kwargs": st.one_of(st.text(), st.lists(st.text()), st.just({"no_such_keyword": 1})),
    "expert.ig_steps": _counts(1),
    "expert.word_classes": st.one_of(st.integers(2, 99), st.floats(0.1, 0.9), st.just("")),
    "expert.cluster_examples": _counts(1),
    "expert.maps_every_n_steps": _counts(0, optional=True),
}  # fmt: skip
SPECS = [s for s in option_specs()] + [  # the nested values themselves are options too
    type(option_specs()[0])(None, g, None, "", ()) for g, _, _ in GROUPS
]


@pytest.mark.fast
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.spelled)
@given(data=st.data())
def test_every_option_refuses_wrong_types_and_out_of_range_values_by_name(spec, data) -> None:
    value = data.draw(_wrong_values(spec.spelled, spec.default), label=spec.spelled)
    cls = dict((g, c) for g, c, _ in GROUPS).get(spec.group, WatchSettings)
    with pytest.raises((TypeError, ValueError)) as refused:
        cls(**{spec.name: value})
    assert spec.name in str(refused.value), (spec.spelled, value, str(refused.value))


@pytest.mark.fast
def test_every_option_has_wrong_values_in_the_property_test() -> None:
    spelled = {s.spelled for s in SPECS}
    assert set(WRONG) | SWITCHES | {s.spelled for s in option_specs() if isinstance(s.default, bool)} >= spelled
    assert set(WRONG) <= spelled, set(WRONG) - spelled


# ------------------------------------------------------------------------------------------------ values


@pytest.mark.fast
def test_settings_compare_by_value_and_objects_by_identity() -> None:
    texts = ["a good film", ("the plot", "is dull"), {"text": "fine", "label": 1}]
    a = WatchSettings(probe_texts=texts, every_n_steps=20.0)
    b = WatchSettings(probe_texts=[t for t in texts], every_n_steps=20)
    assert a == b and hash(a) == hash(b) and a.every_n_steps == 20 and type(a.every_n_steps) is int
    assert a != b.replace(probe_texts=texts[:2]) and a != b.replace(every_n_steps=21)
    tok = tiny_tokenizer()
    assert WatchSettings(probing=ProbeOptions(tokenizer=tok)) == WatchSettings(probing=ProbeOptions(tokenizer=tok))
    assert WatchSettings(probing=ProbeOptions(tokenizer=tok)) != WatchSettings(probing=ProbeOptions(tokenizer=print))
    assert a.replace(probing=ProbeOptions(seed=1)) == b.replace(probing=ProbeOptions(seed=1)) != a
    assert a.replace() is a and a.replace(num_maps=1).num_maps == 1 and a.num_maps == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.num_maps = 2  # type: ignore[misc]
    assert {a: 1}[b] == 1


@pytest.mark.fast
def test_keywords_and_settings_are_the_same_thing() -> None:
    s = WatchSettings(every_n_steps=10, num_maps=2, expert=ExpertOptions(integrated_gradients=True))
    by_keywords = BertWatchCallback(every_n_steps=10, num_maps=2, expert=ExpertOptions(integrated_gradients=True))
    by_value = BertWatchCallback(settings=s)
    assert by_keywords.settings == by_value.settings == s
    for cb in (by_keywords, by_value):
        assert cb.every_n_steps == 10 and cb.num_maps == 2 and cb.maps_every_n_steps == 40
        assert "head_attribution_ig" in cb.stat_names and cb.requested is not None
    mixed = BertWatchCallback(["entropy"], settings=s, num_maps=1)  # keywords replace the value's fields
    assert mixed.stat_names == {"entropy"} and mixed.num_maps == 1 and mixed.every_n_steps == 10
    assert GradientImportanceCallback(normalize_by_layer=True).probe_settings.normalize_importance
    assert EntropyCallback(settings=s).stat_names == {"entropy", "cls_entropy"}  # IG is not its option


@pytest.mark.fast
def test_equal_settings_in_different_list_objects_are_equal_probe_settings() -> None:
    """Callbacks of one run share a watched (one probe pass) exactly when their probe settings are equal."""
    tok = tiny_tokenizer()
    probing = ProbeOptions(tokenizer=tok)
    a = EntropyCallback(probe_texts=["good film", "dull plot"], probing=probing)
    b = BertWatchCallback(probe_texts=["good film", "dull plot"], probing=ProbeOptions(tokenizer=tok), num_maps=1)
    assert a.probe_settings == b.probe_settings and isinstance(a.probe_settings, ProbeSettings)
    assert hash(a.probe_settings) == hash(b.probe_settings) and b.settings.probe() == a.probe_settings
    assert EntropyCallback(probe_texts=["good film"], probing=probing).probe_settings != a.probe_settings
    assert EntropyCallback(probe_texts=["good film", "dull plot"]).probe_settings != a.probe_settings  # tokenizer


@pytest.mark.fast
def test_probe_settings_are_a_projection_of_the_watch_settings() -> None:
    """Each field of ``ProbeSettings`` is an option of ``WatchSettings``: its default, check and help are that
    option's, and ``probe()`` copies its value."""
    fields = {f.name: f for f in dataclasses.fields(ProbeSettings)}
    assert list(fields) == list(PROBE_PART)
    for name, spelled in PROBE_PART.items():
        group, _, option = spelled.rpartition(".")
        owner = next(c for g, c, _ in GROUPS if g == group) if group else WatchSettings
        source = next(f for f in dataclasses.fields(owner) if f.name == option)
        assert dict(fields[name].metadata) == dict(source.metadata) and fields[name].default == default_of(source)
    s = WatchSettings(
        probe_texts=["a good film"], logging_dir="runs/a", probing=ProbeOptions(seed=3, compat_length=100),
        expert=ExpertOptions(ig_steps=5), verdict=VerdictSettings(layer_gradients=False),
    )  # fmt: skip
    probe = s.probe()
    assert all(getattr(probe, name) == s.value(spelled) for name, spelled in PROBE_PART.items())
    assert probe.seed == 3 and probe.ig_steps == 5 and probe.layer_gradients is False
    assert ProbeSettings() == WatchSettings().probe() and s.replace(num_maps=1, quiet=True).probe() == probe
    with pytest.raises(ValueError, match=r"^ProbeSettings.batch_size must be >= 1, got 0$"):
        ProbeSettings(batch_size=0)


# ------------------------------------------------------------------------------------------------ docs


@pytest.mark.fast
def test_every_settings_value_the_readme_names_is_importable_from_bertwatch() -> None:
    import bertwatch

    named = set(re.findall(r"\b([A-Z]\w*(?:Settings|Options))\(", (ROOT / "README.md").read_text(encoding="utf-8")))
    assert named >= {"ProbeOptions", "AlertSettings", "AblationOptions", "ExpertOptions"}, named
    values = (WatchSettings, ProbeOptions, AlertSettings, VerdictSettings, AblationOptions, ExpertOptions)
    assert all(getattr(bertwatch, cls.__name__) is cls for cls in values)
    assert named <= set(dir(bertwatch)), named - set(dir(bertwatch))


def _table_row(spec) -> str:
    flags = ", ".join(f"`{name}`" for flag in spec.flags for name in flag.names) or "(Python only)"
    default = {} if spec.default == {} else spec.default
    return f"| `{spec.name}` | {flags} | `{default!r}` | {spec.help} |"


@pytest.mark.fast
def test_the_docs_option_tables_list_every_option_as_the_settings_declare_it() -> None:
    doc = (ROOT / "docs" / "callbacks.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if re.match(r"\| `\w+` \| (`--|\(Python only\))", line)]
    front = [s for s in option_specs() if s.group is None]
    nested = [s for s in option_specs() if s.group is not None]
    nested_rows = [f"| `{g}` | (Python only) | `{c.__name__}()` | {_help(g)} |" for g, c, _ in GROUPS]
    expected = [_table_row(s) for s in front] + nested_rows + [_table_row(s) for s in nested]
    assert rows == expected, "docs/callbacks.md's option tables should read:\n" + "\n".join(expected)


def _help(group: str) -> str:
    return next(f.metadata["help"] for f in dataclasses.fields(WatchSettings) if f.name == group)
