"""``bertwatch prune``: the heads named on the command line removed for real, the smaller model saved and measured
against the full one (parameters, latency, the metric with its interval), a wrong head refused, and the report of
what it buys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers as T

from tests.support.models import tiny_classifier


def test_cli_prunes_saves_and_measures(tmp_path: Path) -> None:
    from bertwatch.cli.prune import cli_prune, parse_heads

    assert parse_heads("0:1,5;3:all") == {0: [1, 5], 3: [-1]}
    with pytest.raises(ValueError, match="LAYER:HEAD"):
        parse_heads("zero:one")
    model = tiny_classifier()
    folder = tmp_path / "full"
    model.save_pretrained(folder)
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghij"]))
    T.BertTokenizer(str(tmp_path / "vocab.txt")).save_pretrained(folder)
    data = tmp_path / "eval.jsonl"
    data.write_text(
        "".join(json.dumps({"text": t, "label": n % 2}) + "\n" for n, t in enumerate("abc def ghi ja bd".split()))
    )
    out = tmp_path / "small"
    code = cli_prune(
        [
            "--model",
            str(folder),
            "--heads",
            "0:1;1:all",
            "--out",
            str(out),
            "--data",
            str(data),
            "--repeats",
            "2",
            "--batch-size",
            "4",
        ]
    )
    assert code == 0
    gain = json.loads((out / "pruning_gain.json").read_text())
    assert gain["parameters"]["full"] > gain["parameters"]["pruned"] > 0
    assert gain["latency_s"]["pruned"] > 0 and gain["metric"]["num_examples"] == 5
    assert gain["metric"]["ci_low"] <= gain["metric"]["delta"] <= gain["metric"]["ci_high"]
    assert cli_prune(["--model", str(folder), "--heads", "0:9", "--out", str(tmp_path / "x")]) == 2
    from bertwatch.cli.report import cli_report

    assert cli_report([str(out)]) == 0
    page = (out / "report.html").read_text()
    assert f"{gain['parameters']['pruned']:,}" in page and "speed-up" in page and "95% CI" in page
