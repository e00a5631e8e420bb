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


def _ablation(folder: Path) -> Path:
    """An ablation output of 3 layers of 4 heads whose importance orders layer 1's heads first."""
    folder.mkdir()
    importance = [[12, 11, 10, 9], [4, 3, 2, 1], [8, 7, 6, 5]]
    (folder / "ablation.json").write_text(json.dumps({"importance": importance}))
    return folder


def test_fraction_takes_the_least_important_heads_of_an_ablation_output(tmp_path: Path, capsys) -> None:
    """``--fraction`` (declared once, ``ablation.physical.PruneShare``): needed with --from-ablation, a share in
    [0, 1], the least important heads removed."""
    from bertwatch.cli.prune import cli_prune

    folder = tmp_path / "full"
    tiny_classifier().save_pretrained(folder)
    ablation = str(_ablation(tmp_path / "abl"))
    argv = ["--model", str(folder), "--from-ablation", ablation, "--no-measure"]
    assert cli_prune([*argv, "--out", str(tmp_path / "a")]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the saving's progress bar
    assert last == "bertwatch prune: --from-ablation needs --fraction (share of all heads to remove, e.g. 0.5)"
    assert cli_prune([*argv, "--fraction", "1.5", "--out", str(tmp_path / "b")]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "bertwatch prune: the fraction of heads to prune must be in [0, 1], got 1.5"
    with pytest.raises(SystemExit):
        cli_prune([*argv, "--fraction", "half", "--out", str(tmp_path / "c")])
    assert "argument --fraction: invalid float value: 'half'" in capsys.readouterr().err
    assert cli_prune([*argv, "--fraction", "0.34", "--out", str(tmp_path / "d")]) == 0
    assert capsys.readouterr().out == f"removed 4 heads; pruned model saved to {tmp_path / 'd'}\n"
    kept = json.loads((tmp_path / "d" / "config.json").read_text())["bertwatch_kept_heads"]
    assert {int(layer): heads for layer, heads in kept.items()} == {0: [0, 1, 2, 3], 1: [], 2: [0, 1, 2, 3]}
