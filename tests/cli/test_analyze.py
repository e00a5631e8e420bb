"""``bertwatch analyze`` as a user types it: the packaged model by its alias, a reference model for drift, what it
prints and writes, and the usage errors (the numbers themselves: tests/analysis/test_text_stats.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertwatch.cli import main


def test_minilm_by_its_alias_against_itself_has_no_drift(tmp_path: Path, capsys) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("a good film .\nthe plot is dull .\tbut the actors are fine .\n", encoding="utf-8")
    out = tmp_path / "out"
    argv = ["analyze", "--model", "minilm", "--reference", "minilm", "--texts", str(texts), "--out", str(out)]
    assert main([*argv, "--no-figures"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"bertwatch: 2 examples, 6 layers x 12 heads -> {out}/stats.json"
    doc = json.loads((out / "stats.json").read_text())
    assert (doc["num_examples"], doc["num_layers"], doc["num_heads"]) == (2, 6, 12)
    assert sorted(p.name for p in out.iterdir()) == ["stats.json"]  # --no-figures: no PNG
    np.testing.assert_allclose(doc["stats"]["drift_js"], np.zeros((6, 12)), atol=1e-6)  # a model against itself
    np.testing.assert_allclose(doc["stats"]["drift_cosine"], np.ones((6, 12)), atol=1e-5)
    cls = np.asarray(doc["stats"]["cls_mass"])
    assert cls.shape == (6, 12) and ((0 <= cls) & (cls <= 1)).all()


@pytest.mark.fast
def test_a_missing_argument_or_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["analyze", "--model", "minilm", "--out", str(tmp_path)])
    assert stop.value.code == 2 and "--texts" in capsys.readouterr().err
    assert main(["analyze", "--model", str(tmp_path / "none"), "--texts", "t.txt", "--out", str(tmp_path)]) == 2
    assert "bertwatch analyze: error:" in capsys.readouterr().err
