"""``WatchSettings``: one checked value for every monitoring option, the ``bertwatch run`` flags generated from it,
the docs' option table matching it, and monitors shared by equal settings (by value, not by list object)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from bertwatch.callbacks import BertWatchCallback, EntropyCallback, GradientImportanceCallback
from bertwatch.callbacks.monitor import monitor_for
from bertwatch.callbacks.settings import ProbeSettings, WatchSettings, check_options
from bertwatch.cli import main
from bertwatch.cli.run import run_parser, settings_from_options
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
FIELDS = dataclasses.fields(WatchSettings)
PYTHON_ONLY = {"probe_dataset", "tokenizer", "data_collator", "loss_fn"}  # objects: no command-line form

# Every flag `bertwatch run` had before WatchSettings, with the option it sets: these names must keep working.
EARLIER_FLAGS = {
    "--every-n-steps": "every_n_steps",
    "--probe-every": "every_n_steps",
    "--stats": "stats",
    "--num-probe-examples": "num_probe_examples",
    "--probe-texts": "probe_texts",
    "--num-maps": "num_maps",
    "--logdir": "logging_dir",
    "--ablate": "ablate_on_end",
    "--ablate-on-end": "ablate_on_end",
    "--ablation-mode": "ablation_mode",
    "--word-classes": "word_classes",
    "--word-classes-from": "word_classes",
    "--head-clusters": "head_clusters",
    "--no-trackers": "log_to_trackers",
}


def _sample(flag, field, tmp_path) -> tuple[list[str], object]:
    """Command-line words for ``flag`` and the option value they must give (never the default)."""
    if flag.kind == "true":
        return [], True
    if flag.kind == "false":
        return [], False
    if flag.kind in ("int", "int_or_none"):
        return ["7"], 7
    if flag.kind == "float":  # in range for every threshold: 3/4 of its default
        return [repr(0.75 * field.default)], 0.75 * field.default
    if flag.kind == "choice":
        value = next(c for c in flag.choices if c != field.default)
        return [value], value
    if flag.kind == "names":
        return ["entropy, cls_mass"], ("entropy", "cls_mass")
    if flag.kind == "lines":
        path = tmp_path / "probe.txt"
        path.write_text("a good film\n\nthe plot\tis dull\n", encoding="utf-8")
        return [str(path)], ["a good film", ("the plot", "is dull")]
    if flag.kind == "json":
        return [json.dumps({"metric": "accuracy", "n_resamples": 10})], {"metric": "accuracy", "n_resamples": 10}
    assert flag.kind == "str", flag.kind
    return ["some/path"], "some/path"


@pytest.mark.fast
def test_every_option_has_a_flag_and_every_flag_sets_its_option(tmp_path) -> None:
    flagless = {f.name for f in FIELDS if not f.metadata["flags"]}
    assert flagless == PYTHON_ONLY
    parser = run_parser()
    for field in FIELDS:
        for flag in field.metadata["flags"]:
            for name in flag.names:
                words, expected = _sample(flag, field, tmp_path)
                given = settings_from_options(parser.parse_args([name, *words, "train.py"]))
                assert set(given) == {field.name}, (name, given)
                value = getattr(WatchSettings.from_kwargs(**given), field.name)
                assert value == expected and value != field.default, (name, value)
                assert getattr(BertWatchCallback(**given).settings, field.name) == value
    assert settings_from_options(parser.parse_args(["train.py"])) == {}


@pytest.mark.fast
def test_the_earlier_flags_still_set_the_same_options(tmp_path) -> None:
    parser = run_parser()
    for name, option in EARLIER_FLAGS.items():
        field = next(f for f in FIELDS if f.name == option)
        flag = next(f for f in field.metadata["flags"] if name in f.names)
        words, expected = _sample(flag, field, tmp_path)
        given = settings_from_options(parser.parse_args([name, *words, "x.py"]))
        assert set(given) == {option} and getattr(WatchSettings(**given), option) == expected, name
    both = parser.parse_args(["--word-classes-from", "dev.conllu", "--word-classes", "x.py"])
    assert settings_from_options(both) == {"word_classes": "dev.conllu"}  # the treebank wins, as before
    assert settings_from_options(parser.parse_args(["--probe-max-length", "none", "x.py"])) == {
        "probe_max_length": None
    }


@pytest.mark.fast
def test_run_help_is_generated_from_the_settings(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["run", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for field in FIELDS:
        for flag in field.metadata["flags"]:
            assert all(name in text for name in flag.names), flag.names
            help_text = " ".join((flag.help or field.metadata["help"]).split())
            assert help_text in text, help_text
    assert "--no-on-evaluate turn off: measure at every evaluation" in text
    assert "--num-probe-examples N size of the seeded sample of the evaluation set (default 32)" in text


@pytest.mark.fast
def test_unknown_names_are_refused_with_the_valid_ones() -> None:
    message = r"unknown option 'probe_max_lenght' \(did you mean 'probe_max_length'\?\); valid: stats, every_n_steps"
    with pytest.raises(TypeError, match=message):
        WatchSettings.from_kwargs(probe_max_lenght=64)
    with pytest.raises(TypeError, match=message):
        WatchSettings().replace(probe_max_lenght=64)
    with pytest.raises(TypeError, match="BertWatchCallback: unknown option 'num_mapz'.*valid: .*cluster_examples"):
        BertWatchCallback(num_mapz=2)
    with pytest.raises(TypeError, match="EntropyCallback: unknown option 'num_maps'; valid: (?!.*num_maps)"):
        EntropyCallback(num_maps=2)  # a BertWatchCallback option, not one of this callback's
    with pytest.raises(TypeError, match="unknown options 'a', 'b'"):
        check_options(["a", "b"], ("x",))
    with pytest.raises(TypeError, match="settings must be a WatchSettings"):
        BertWatchCallback(settings={"num_maps": 2})


@pytest.mark.fast
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"every_n_steps": -1}, ValueError, "every_n_steps must be >= 0 \\(0 = only at start"),
        ({"probe_max_length": 1}, ValueError, "probe_max_length must be >= 2 \\(or None"),
        ({"num_probe_examples": 0}, ValueError, "num_probe_examples must be >= 1"),
        ({"probe_batch_size": 0}, ValueError, "probe_batch_size must be >= 1"),
        ({"num_maps": -2}, ValueError, "num_maps must be >= 0"),
        ({"ig_steps": 0}, ValueError, "ig_steps must be >= 1"),
        ({"every_n_steps": 2.5}, TypeError, "every_n_steps must be a whole number or None, not 2.5"),
        ({"overhead_budget": 0}, ValueError, r"overhead_budget must be in \(0, 1\]"),
        ({"overhead_budget": 1.5}, ValueError, r"overhead_budget must be in \(0, 1\]"),
        ({"overhead_budget": "2%"}, TypeError, r"overhead_budget must be a number in \(0, 1\]"),
        ({"num_maps": "4"}, TypeError, "num_maps must be a whole number"),
        ({"maps_every_n_steps": True}, TypeError, "maps_every_n_steps must be a whole number or None"),
        ({"at_start": "no"}, TypeError, "at_start must be True or False"),
        ({"stats": "entropy"}, TypeError, "stats must be a list of statistic names"),
        ({"stats": ["entropie"]}, ValueError, "unknown bertwatch statistic"),
        ({"stats": []}, ValueError, "stats must name at least one statistic"),
        ({"ablation_mode": "mean"}, ValueError, "unknown ablation_mode 'mean'"),
        ({"ablation_kwargs": ["metric"]}, TypeError, "ablation_kwargs must be a mapping"),
    ],
)
def test_out_of_range_or_mistyped_options_are_refused(options, error, message) -> None:
    with pytest.raises(error, match=message):
        WatchSettings(**options)


@pytest.mark.fast
def test_settings_compare_by_value_and_objects_by_identity() -> None:
    texts = ["a good film", ("the plot", "is dull"), {"text": "fine", "label": 1}]
    a = WatchSettings(probe_texts=texts, every_n_steps=20.0)
    b = WatchSettings(probe_texts=[t for t in texts], every_n_steps=20)
    assert a == b and hash(a) == hash(b) and a.every_n_steps == 20 and type(a.every_n_steps) is int
    assert a != b.replace(probe_texts=texts[:2]) and a != b.replace(every_n_steps=21)
    tok = object()
    assert WatchSettings(tokenizer=tok) == WatchSettings(tokenizer=tok)
    assert WatchSettings(tokenizer=tok) != WatchSettings(tokenizer=object())
    assert a.replace() is a and a.replace(num_maps=1).num_maps == 1 and a.num_maps == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.num_maps = 2  # type: ignore[misc]
    assert {a: 1}[b] == 1


@pytest.mark.fast
def test_keywords_and_settings_are_the_same_thing() -> None:
    s = WatchSettings(every_n_steps=10, num_maps=2, integrated_gradients=True)
    by_keywords = BertWatchCallback(every_n_steps=10, num_maps=2, integrated_gradients=True)
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
def test_equal_settings_in_different_list_objects_share_a_monitor() -> None:
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    a = EntropyCallback(probe_texts=["good film", "dull plot"], tokenizer=tok)
    b = BertWatchCallback(probe_texts=["good film", "dull plot"], tokenizer=tok, num_maps=1)
    assert a.settings.probe_texts is not b.settings.probe_texts
    assert a.probe_settings == b.probe_settings and isinstance(a.probe_settings, ProbeSettings)
    shared = monitor_for(model, a.probe_settings)
    assert monitor_for(model, b.probe_settings) is shared and monitor_for(model, b.settings) is shared
    assert monitor_for(model, EntropyCallback(probe_texts=["good film"], tokenizer=tok).probe_settings) is not shared
    assert monitor_for(model, EntropyCallback(probe_texts=["good film", "dull plot"]).probe_settings) is not shared
    assert monitor_for(tiny_bert(tok), a.probe_settings) is not shared  # the same model object, not an equal one


def _table_row(field: dataclasses.Field) -> str:
    default = {} if field.default is dataclasses.MISSING else field.default
    flags = ", ".join(f"`{name}`" for flag in field.metadata["flags"] for name in flag.names) or "(Python only)"
    return f"| `{field.name}` | {flags} | `{default!r}` | {field.metadata['help']} |"


@pytest.mark.fast
def test_the_docs_option_table_lists_every_field_as_the_settings_declare_it() -> None:
    doc = (ROOT / "docs" / "callbacks.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if re.match(r"\| `\w+` \| (`--|\(Python only\))", line)]
    expected = [_table_row(f) for f in FIELDS]
    assert rows == expected, "docs/callbacks.md's option table should read:\n" + "\n".join(expected)
