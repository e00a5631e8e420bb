"""``bertwatch ship`` end to end on a tiny checkpoint and a labelled file: what it prints first and last, the
table, ship.json and the ONNX files; pruning from an ablation output; errors that say what to do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import transformers as T

from bertwatch.cli import main
from tests.support.models import bert_with_head
from tests.support.ship_models import save_checkpoint, write_examples
from tests.support.tiny_trainer import tiny_tokenizer


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ship")
    return save_checkpoint(root / "ckpt"), write_examples(root / "dev.jsonl", 40)


FAST = ["--repeats", "2", "--resamples", "100", "--threads", "1", "--quiet"]


def test_ship_prints_a_table_and_writes_the_files(inputs, tmp_path: Path, capsys) -> None:
    ckpt, data = inputs
    out = tmp_path / "out"
    assert main(["ship", "--model", str(ckpt), "--data", str(data), "--out", str(out), *FAST]) == 0
    lines = capsys.readouterr().out.splitlines()
    result = json.loads((out / "ship.json").read_text())
    constant = result["trivial_baseline"]
    assert lines[0] == (
        f"bertwatch ship: exporting {ckpt} to ONNX as fp32, int8, int8 with the layer its error comes from most (on 40 "
        f"examples) kept in fp32, and measuring each in ONNX Runtime on 40 examples of sequence-classification "
        f"(accuracy, one request at a time); always answering '{constant['constant_name']}' scores accuracy "
        f"{constant['value']:.3f} on them -> {out}"
    )
    layer = result["attribution"]["kept_fp32"]
    mixed = [] if layer is None else [f"model.int8.layer{layer}fp32.onnx"]
    inputs = ["tokenizer.json", "tokenizer_config.json", "examples.jsonl"]
    assert result["files"]["tokenizer"] == inputs[:2]
    assert lines[-1] == f"-> {out}/ ({', '.join(['model.onnx', 'model.int8.onnx', *mixed, *inputs, 'ship.json'])})"
    assert any(line.startswith("variant  ") and "accuracy" in line for line in lines)
    assert any(line.startswith("int8: ") and "of predictions unchanged" in line for line in lines)
    assert any(line.startswith("where the INT8 error comes from (40 examples one request at a time") for line in lines)
    assert "accuracy measured one request at a time (batch 1, each example at its own length, no padding)" in "".join(
        lines
    )
    names = ["fp32", "int8"] + ([] if layer is None else [f"int8, layer {layer} fp32"])
    assert [v["name"] for v in result["variants"]] == names
    assert result["checkpoint"] == str(ckpt) and result["data"] == str(data) and result["num_examples"] == 40
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["model.int8.onnx", "model.onnx", *mixed, *inputs, "ship.json"]
    )


def test_ship_prunes_from_an_ablation_output(inputs, tmp_path: Path, capsys) -> None:
    ckpt, data = inputs
    ablation = tmp_path / "abl"
    ablation.mkdir()
    importance = np.arange(8, dtype=float).reshape(2, 4)[::-1].tolist()  # layer 1 least important
    (ablation / "ablation.json").write_text(json.dumps({"importance": importance}))
    out = tmp_path / "out"
    argv = [
        "ship",
        "--model",
        str(ckpt),
        "--data",
        str(data),
        "--out",
        str(out),
        "--limit",
        "20",
        "--attribution-examples",
        "0",
    ]
    assert main([*argv, "--prune-from", str(ablation), "--fraction", "0.5", "--serve-batch", "4", *FAST]) == 0
    printed = capsys.readouterr().out
    assert "as fp32, int8, pruned, pruned+int8 (4 heads removed)" in printed and "export check, pruned" in printed
    assert "(accuracy, at batch 4)" in printed and "accuracy, batch 4" in printed
    result = json.loads((out / "ship.json").read_text())
    assert result["batching"]["metric"] == {"batch_size": 4, "padded": True, "sorted": False}
    assert result["removed_heads"] == {"1": [0, 1, 2, 3]} and result["num_examples"] == 20
    assert result["attribution"] is None and [v["name"] for v in result["variants"]] == [
        "fp32", "int8", "pruned", "pruned+int8"
    ]  # fmt: skip
    assert (out / "model.pruned.int8.onnx").is_file()


def test_errors_say_what_to_do(inputs, tmp_path: Path, capsys, monkeypatch) -> None:
    ckpt, data = inputs
    out = str(tmp_path / "out")
    assert main(["ship", "--model", str(tmp_path / "none"), "--data", str(data), "--out", out]) == 2
    assert f"no such folder: {tmp_path / 'none'} ({tmp_path}/ holds no checkpoint-N folder). Pass the folder a " in (
        capsys.readouterr().err
    )
    assert main(["ship", "--model", str(ckpt), "--out", out]) == 2
    assert "pass --task GLUE_NAME (read from --glue-dir) or --data FILE" in capsys.readouterr().err
    assert main(["ship", "--model", str(ckpt), "--task", "ner", "--data", str(data), "--out", out]) == 2
    assert "measures sequence classifiers; --task ner is not one" in capsys.readouterr().err
    assert main(["ship", "--model", str(ckpt), "--data", str(data), "--fraction", "0.5", "--out", out]) == 2
    assert "--fraction goes with --prune-from" in capsys.readouterr().err
    encoder = tmp_path / "encoder"
    tokenizer = tiny_tokenizer()
    bert_with_head(T.BertForMaskedLM, tokenizer).save_pretrained(encoder)
    tokenizer.save_pretrained(encoder)
    assert main(["ship", "--model", str(encoder), "--data", str(data), "--out", out]) == 2
    assert "without a sequence-classification head" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert main(["ship", "--model", str(ckpt), "--data", str(data), "--out", out]) == 2
    assert "pip install 'bertwatch[ship]'" in capsys.readouterr().err
    assert not Path(out).exists()


def test_fraction_is_needed_with_prune_from_and_is_a_share(inputs, tmp_path: Path, capsys) -> None:
    """``--fraction`` (declared once for ``prune`` and ``ship``: ``ablation.physical.PruneShare``)."""
    ckpt, data = inputs
    ablation = tmp_path / "abl"
    ablation.mkdir()
    (ablation / "ablation.json").write_text(json.dumps({"importance": [[1, 2, 3, 4], [5, 6, 7, 8]]}))
    out = tmp_path / "out"
    argv = ["ship", "--model", str(ckpt), "--data", str(data), "--out", str(out), "--prune-from", str(ablation)]
    capsys.readouterr()
    assert main(argv) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the loading's progress bar
    assert last == "bertwatch ship: --prune-from needs --fraction (share of all heads to remove, e.g. 0.5)"
    assert main([*argv, "--fraction", "1.5"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == "bertwatch ship: the fraction of heads to prune must be in [0, 1], got 1.5"
    assert not out.exists()


@pytest.mark.fast
def test_the_model_is_named_with_model_as_in_every_command(inputs, tmp_path: Path, capsys) -> None:
    _, data = inputs
    out = str(tmp_path / "out")
    missing = str(tmp_path / "none")
    assert main(["ship", "--model", missing, "--data", str(data), "--out", out]) == 2
    assert f"no such folder: {missing}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ship", "--data", str(data), "--out", out])
    assert "the following arguments are required: --model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ship", "--model", missing, missing, "--data", str(data), "--out", out])  # no bare path besides
    assert "unrecognized arguments" in capsys.readouterr().err
    assert main(["ship", "--model", "minilm", "--data", str(data), "--out", out]) == 2  # found, then refused
    assert "BertModel checkpoint without a sequence-classification head" in capsys.readouterr().err
    assert not Path(out).exists()
