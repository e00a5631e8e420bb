"""How an option is checked (``core.schema``): each check keeps a good value (converted where a user's spelling
differs, ``20.0`` steps are 20) and refuses a bad one with an error that names the option and says what to pass;
settings values compare plain data by value and objects by identity."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bertwatch.core import schema as C

pytestmark = pytest.mark.fast


def test_a_switch_takes_booleans_numpys_and_0_or_1() -> None:
    check = C.switch()
    assert check("x", np.bool_(True)) is True and check("x", 0) is False and check("x", 1) is True
    assert C.switch(optional=True)("x", None) is None
    with pytest.raises(TypeError, match=r"^quiet must be True or False, not 2$"):
        check("quiet", 2)
    with pytest.raises(TypeError, match=r"\(or None: automatic\)"):
        C.switch(optional=True)("x", "yes")


def test_a_whole_number_from_an_int_or_a_whole_float_at_least_its_lowest() -> None:
    check = C.whole(1, meaning=" (1 = every step)")
    assert check("n", 20.0) == 20 and type(check("n", np.int64(3))) is int
    assert C.whole(0, optional=True)("n", None) is None
    with pytest.raises(TypeError, match="n must be a whole number, not 2.5"):
        check("n", 2.5)
    with pytest.raises(TypeError, match="not True"):
        check("n", True)
    with pytest.raises(ValueError, match=r"^n must be >= 1 \(1 = every step\), got 0$"):
        check("n", 0)


def test_a_number_is_finite_and_inside_its_range() -> None:
    fraction, multiple = C.number(0.0, below=1.0), C.number(1.0)
    assert fraction("f", np.float32(0.5)) == 0.5 and type(multiple("m", 3)) is float
    assert C.number(0.0, at_most=1.0)("s", 1) == 1.0
    for bad in (0, 1.0, float("nan")):
        with pytest.raises(ValueError, match=r"^f must be a number in \(0, 1\), got"):
            fraction("f", bad)
    with pytest.raises(ValueError, match=r"^m must be a finite number > 1, got inf$"):
        multiple("m", float("inf"))
    for bad in ("2", True, None):
        with pytest.raises(TypeError, match=r"^m must be a number, not"):
            multiple("m", bad)


def test_paths_callables_and_instances() -> None:
    assert C.path_or_none("dir", Path("a")) == Path("a") and C.path_or_none("dir", None) is None
    with pytest.raises(ValueError, match="dir must not be empty"):
        C.path_or_none("dir", "")
    with pytest.raises(TypeError, match="dir must be a path"):
        C.path_or_none("dir", 3)
    assert C.callable_or_none("a loss")("loss_fn", len) is len
    with pytest.raises(TypeError, match="loss_fn must be a loss \\(or None\\), not str 'x'"):
        C.callable_or_none("a loss")("loss_fn", "x")
    with pytest.raises(TypeError, match="probing must be a Path, e.g. probing=Path\\('x'\\), not str"):
        C.instance_of(Path, "Path('x')")("probing", "x")


def test_a_dataset_has_a_length_and_examples_by_index() -> None:
    rows = [{"input_ids": [1, 2]}]
    assert C.sized_dataset("d", rows) is rows and C.sized_dataset("d", None) is None
    with pytest.raises(TypeError, match="not a mapping of them \\(a DatasetDict\\?\\)"):
        C.sized_dataset("d", {"validation": rows})
    for bad in ("text", 3, iter(rows)):
        with pytest.raises(TypeError, match="d must be a dataset with a length"):
            C.sized_dataset("d", bad)


def test_probe_texts_are_strings_pairs_or_dicts_and_a_lone_string_is_refused() -> None:
    texts = ["a film", ("a premise", "a hypothesis"), {"text": "t", "text_pair": "u", "label": 1}]
    assert C.check_probe_texts("p", texts) == tuple(texts) and C.check_probe_texts("p", None) is None
    with pytest.raises(TypeError, match=r'p must be a list of texts, e.g. \["a good film"\]; got the string'):
        C.check_probe_texts("p", "a good film")
    with pytest.raises(ValueError, match="at least one text"):
        C.check_probe_texts("p", [])
    with pytest.raises(TypeError, match=r"p\[1\] is list .*a sentence pair is a tuple"):
        C.check_probe_texts("p", ["ok", ["a", "b"]])
    with pytest.raises(TypeError, match=r"p\[0\] is dict .*needs a 'text' string"):
        C.check_probe_texts("p", [{"sentence": "x"}])


def test_statistic_names_are_checked_against_the_valid_ones_with_the_closest() -> None:
    check = C.check_stats(("entropy", "cls_mass"))
    assert check("stats", ["entropy"]) == ("entropy",) and check("stats", None) is None
    with pytest.raises(ValueError, match="unknown bertwatch statistic 'entropie' \\(did you mean 'entropy'\\?\\)"):
        check("stats", ["entropie"])
    with pytest.raises(TypeError, match="not the string 'entropy'"):
        check("stats", "entropy")
    with pytest.raises(ValueError, match="at least one statistic"):
        check("stats", [])


def test_unknown_option_names_get_the_closest() -> None:
    with pytest.raises(TypeError) as error:
        C.check_options(["num_mapz", "xyz"], ["num_maps", "stats"])
    assert str(error.value) == (
        "WatchSettings: unknown options 'num_mapz' (did you mean 'num_maps'?), 'xyz'; valid: num_maps, stats"
    )
    C.check_options(["stats"], ["num_maps", "stats"])  # all known: nothing raised


@dataclass(frozen=True, eq=False, init=False)
class _Demo(C.Checked):
    count: int = C.option(1, "how many", C.whole(1), C.Flag(("--count",), "int"))
    thing: object = C.option(None, "any object", None)


def test_a_checked_value_runs_its_checks_and_compares_data_by_value_objects_by_identity() -> None:
    assert _Demo(count=4.0).count == 4 and _Demo() == _Demo(count=1, thing=None)
    with pytest.raises(
        TypeError, match=r"^_Demo: unknown option 'cont' \(did you mean 'count'\?\); valid: count, thing$"
    ):
        _Demo(cont=2)
    with pytest.raises(ValueError, match=r"^_Demo.count must be >= 1, got 0$"):  # the option named as a user spells it
        _Demo(count=0)
    field = next(f for f in dataclasses.fields(_Demo) if f.name == "count")
    assert field.metadata["help"] == "how many" and field.metadata["flags"][0].names == ("--count",)
    a, b = object(), object()
    assert _Demo(thing=[1, 2]) == _Demo(thing=[1, 2]) and hash(_Demo(thing=[1, 2])) == hash(_Demo(thing=[1, 2]))
    assert _Demo(thing=a) == _Demo(thing=a) and _Demo(thing=a) != _Demo(thing=b)
    assert _Demo(thing={"k": [1]}) == _Demo(thing={"k": [1]})
    assert C.frozen_value(Path("x")) == "x" and C.frozen_value((1, [2])) == ("seq", (1, ("seq", (2,))))
