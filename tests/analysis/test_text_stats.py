"""`bertwatch analyze` on the packaged MiniLM against an independent loop implementation of docs/statistics.md."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from bertwatch.cli import main
from tests.support.stats_oracle import reference_stats, roles_from_strings
from tests.support.tolerance import assert_float32_close

TEXTS = [
    "the lighthouse keeper counted forty - one ships , then slept .",
    "nobody expected the marmalade to win , least of all the judges .",
    "she sold the violin.\tthe violin was sold by her .",
    "rain fell on the quiet harbour town all night\tthe town was dry .",
    "short",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z , and again a b c d e f g h i j k l m n o p .",
]


def test_analyze_matches_independent_definitions(tmp_path: Path, minilm_path: str) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="1 of 6 examples were longer than 24 tokens"):
        assert (
            main(
                [
                    "analyze",
                    "--model",
                    minilm_path,
                    "--texts",
                    str(texts),
                    "--out",
                    str(out),
                    "--max-length",
                    "24",
                    "--batch-size",
                    "4",
                ]
            )
            == 0
        )
    result = json.loads((out / "stats.json").read_text())
    assert (result["num_layers"], result["num_heads"], result["num_examples"]) == (6, 12, 6)
    assert result["model"] == minilm_path
    assert (out / "special_tokens.png").stat().st_size > 1000
    assert all((out / f"{name}.png").is_file() for name in result["stats"])

    model = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    per_example = []
    for line in TEXTS:
        first, _, second = line.partition("\t")
        enc = tokenizer(first, second or None, truncation=True, max_length=24, return_tensors="pt")
        with torch.no_grad():
            maps = torch.stack(model(**enc, output_attentions=True).attentions, dim=1)
        per_example.append(reference_stats(maps.numpy(), roles_from_strings(tokenizer, enc)))
    for name, grid in result["stats"].items():
        got = np.array([[np.nan if x is None else x for x in row] for row in grid])
        want = np.nanmean(np.concatenate([p[name] for p in per_example]), axis=0)
        assert_float32_close(got, want, msg=name)


@pytest.mark.fast
def test_analyze_errors_exit_non_zero(tmp_path: Path, minilm_path: str, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    assert main(["analyze", "--model", minilm_path, "--texts", str(empty), "--out", str(tmp_path)]) == 2
    assert "holds no examples" in capsys.readouterr().err
    assert main(["analyze", "--model", minilm_path, "--texts", str(tmp_path / "missing.txt"), "--out", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n", encoding="utf-8")
    assert main(["analyze", "--model", str(tmp_path / "no-model"), "--texts", str(texts), "--out", "x"]) == 2
    assert f"no such folder: {tmp_path / 'no-model'}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["analyze", "--texts", str(texts)])


def test_python_api_accepts_strings_and_pairs(minilm_path: str) -> None:
    from bertwatch import analyze

    result = analyze(minilm_path, ["one sentence .", ("a premise .", "a hypothesis .")], progress=False)
    assert result["num_examples"] == 2
    sep_to_sep = np.array(result["stats"]["sep_to_sep"], dtype=float)
    assert np.isfinite(sep_to_sep).all() and (sep_to_sep <= 1 + 1e-6).all()
    assert len(result["labels"]) == 6 and len(result["patterns"][0]) == 12
