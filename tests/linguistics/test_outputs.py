"""The JSON files of ``probe-syntax`` (``linguistics.outputs``): strict JSON (no NaN) that reads back as written,
grids on one line, the best heads by a plain sort, and the word-class summary with its reference side by side."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bertwatch.linguistics.outputs import (
    best_grid,
    dumps,
    relation_marks,
    safe_tag,
    top_heads,
    wordclass_json,
    write_json,
)
from bertwatch.linguistics.scan import Scan

pytestmark = pytest.mark.fast


def test_the_files_are_strict_json_with_each_grid_on_one_line(tmp_path: Path) -> None:
    grid = np.array([[0.5, np.nan], [1 / 3, 2.0]])
    doc = {"model": "m", "relations": {"nsubj": {"count": 3, "grid": grid}}, "small": {"a": 1, "b": math.inf}}
    path = write_json(tmp_path / "syntax.json", doc)
    text = path.read_text(encoding="utf-8")
    back = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert back["relations"]["nsubj"]["grid"] == [[0.5, None], [0.333333, 2.0]]  # six decimals, NaN as null
    assert back["small"] == {"a": 1, "b": None}
    assert '"grid": [[0.5,null],[0.333333,2.0]]' in text  # one line
    assert dumps({"a": [{"x": 1}, {"x": 2}]}) == '{\n  "a": [\n    {"x": 1},\n    {"x": 2}\n  ]\n}'


def test_the_best_heads_are_those_of_a_plain_sort_nan_last() -> None:
    rng = np.random.default_rng(0)
    grid = rng.random((4, 5))
    grid[1, 2] = np.nan
    cells = sorted(((float(grid[l, h]), l, h) for l in range(4) for h in range(5) if not np.isnan(grid[l, h])),
                   key=lambda c: -c[0])  # fmt: skip
    assert top_heads(grid, 4) == [{"layer": l, "head": h, "value": v} for v, l, h in cells[:4]]
    assert top_heads(np.full((1, 2), np.nan), 1)[0]["value"] == -math.inf


def test_tags_file_names_and_the_best_direction() -> None:
    assert safe_tag("obl:tmod/x y") == "obl_tmod_x_y" and safe_tag("det-1.a") == "det-1.a"
    entry = {"direction": "head->dep", "accuracy": {"head->dep": [[0.1, 0.9]], "dep->head": [[0.5, 0.5]]}}
    assert best_grid(entry).tolist() == [[np.float32(0.1), np.float32(0.9)]]


def test_relation_marks_only_heads_that_beat_the_baseline_on_enough_words() -> None:
    relations = {
        "all": {"count": 100, "best_layer": 0, "best_head": 0, "best_accuracy": 0.9, "baseline_accuracy": 0.1},
        "nsubj": {"count": 20, "best_layer": 1, "best_head": 2, "best_accuracy": 0.7, "baseline_accuracy": 0.5},
        "obj": {"count": 20, "best_layer": 1, "best_head": 2, "best_accuracy": 0.65, "baseline_accuracy": 0.5},
        "det": {"count": 20, "best_layer": 0, "best_head": 3, "best_accuracy": 0.55, "baseline_accuracy": 0.5},
        "iobj": {"count": 2, "best_layer": 3, "best_head": 0, "best_accuracy": 1.0, "baseline_accuracy": 0.0},
    }
    assert relation_marks(relations, min_count=10) == {(1, 2): "nsubj/obj"}


def test_the_word_class_summary_puts_the_reference_beside_the_model() -> None:
    main = Scan(classes={"pron": np.array([[0.2, 0.4], [0.6, np.nan]])}, cls_targets={"neg": np.ones((2, 2))})
    ref = Scan(classes={"pron": np.full((2, 2), 0.1)}, cls_targets={"neg": np.full((2, 2), 0.5)})
    out = wordclass_json("m", main, ref, "ref-model")
    pron = out["classes"]["pron"]
    assert pron["mean"] == pytest.approx(0.4) and pron["reference_mean"] == pytest.approx(0.1)
    np.testing.assert_allclose(pron["difference"], [[0.1, 0.3], [0.5, np.nan]])
    assert pron["top_heads"][0] == {"layer": 1, "head": 0, "value": 0.6}
    assert out["cls_targets"]["neg"]["last_layer_mean"] == 1.0 and out["cls_targets_layer"] == 1
    assert out["cls_targets"]["neg"]["reference_last_layer_mean"] == 0.5
    alone = wordclass_json("m", main, None, None)
    assert "reference_mean" not in alone["classes"]["pron"] and alone["reference"] is None
