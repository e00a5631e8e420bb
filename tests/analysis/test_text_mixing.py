"""`bertwatch analyze --mixing` on the packaged MiniLM: every measure's files, and the per-layer [CLS]/[SEP] shares
against the float64 loops of tests/_mixing_oracle.py on each example alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import transformers

from bertwatch.cli import main
from bertwatch.core.stat_names import MIXING_NAMES
from tests.support.mixing_oracle import alti_scale, example_measures
from tests.support.tolerance import assert_float32_close

TEXTS = ["the keeper counted ships , then slept .", "she sold the violin .\tthe violin was sold by her .", "short"]


def test_analyze_mixing_writes_every_measure_and_matches_the_loops(tmp_path: Path, minilm_path: str) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["analyze", "--model", minilm_path, "--texts", str(texts), "--out", str(out), "--batch-size", "2"]
    assert main([*args, "--mixing", "--value-zeroing", "1", "--no-figures"]) == 0
    result = json.loads((out / "stats.json").read_text())
    summary = json.loads((out / "mixing.json").read_text())
    assert summary == result["mixing"]
    assert summary["measures"] == ["weights", "norms", "alti", "alti_composed", "rollout", "value_zeroing"]
    assert summary["value_zeroing_examples"] == 1
    for name in MIXING_NAMES:
        assert np.asarray(result["stats"][name]).shape[0] == 6, name
    maps = np.load(out / "mixing.npz")
    assert "value_zeroing/0000" in maps and "value_zeroing/0001" not in maps

    model = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    want: dict[str, list] = {"alti": [], "rollout": []}
    scales = []
    for k, line in enumerate(TEXTS):
        first, _, second = line.partition("\t")
        enc = tokenizer(first, second or None, return_tensors="pt")
        ids = enc["input_ids"][0].tolist()
        cls = [j for j, t in enumerate(ids) if t == tokenizer.cls_token_id]
        sep = [j for j, t in enumerate(ids) if t == tokenizer.sep_token_id]
        out_ = model(**enc, output_hidden_states=True, output_attentions=True)
        measures = example_measures(
            model, "bert", out_.hidden_states, out_.attentions, 0, np.arange(len(ids)), cls, sep
        )
        scale = alti_scale()
        assert_float32_close(maps[f"alti_composed/{k:04d}"], measures["alti_composed"], scale, msg=f"example {k}")
        scales.append(scale)
        want["alti"].append((measures["cls_mass_alti_layer"], measures["sep_mass_alti_layer"]))
        want["rollout"].append((measures["cls_mass_rollout"], measures["sep_mass_rollout"]))
    for measure, pairs in want.items():
        for idx, key in enumerate(("cls", "sep")):
            expect = np.mean([p[idx] for p in pairs], axis=0)
            scale = max(scales) if measure == "alti" else 1.0
            assert_float32_close(summary["layers"][measure][key], expect, scale, msg=f"{measure} {key}")
