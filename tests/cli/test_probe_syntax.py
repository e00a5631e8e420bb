"""The probe-syntax command end to end on tiny saved models: every output, the reference model side by side."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertwatch.cli.probe_syntax import cli_probe_syntax as main
from bertwatch.linguistics.syntax import training_treebank as _train_file
from bertwatch.report.syntax_section import html_section
from tests.support.models import tiny_model
from tests.support.treebank import CONLLU, tiny_tokenizer


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ling")
    for name, seed in (("model", 0), ("pretrained", 1)):
        tiny_model("bert", seed=seed).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    (root / "tiny-dev.conllu").write_text(CONLLU, encoding="utf-8")
    (root / "tiny-train.conllu").write_text(CONLLU * 3, encoding="utf-8")
    code = main(
        [
            "--model",
            str(root / "model"),
            "--reference",
            str(root / "pretrained"),
            "--conllu",
            str(root / "tiny-dev.conllu"),
            "--out",
            str(root / "out"),
            "--min-count",
            "1",
            "--quiet",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    return root


def test_outputs_and_probes_on_the_auto_detected_train_file(run: Path) -> None:
    out = run / "out"
    syntax = json.loads((out / "syntax.json").read_text())
    assert syntax["num_sentences"] == 3 and syntax["relations"]["all"]["count"] == 26
    assert syntax["relations"]["nmod"]["count"] == 1 and "nmod:poss" not in syntax["relations"]
    probes = json.loads((out / "probes.json").read_text())
    assert probes["train_conllu"].endswith("tiny-train.conllu") and probes["train_sentences"] == 9
    assert set(probes["uas"]) == {"attention", "attention+embeddings", "right-branching"}
    clustering = json.loads((out / "clustering.json").read_text())
    assert np.asarray(clustering["coords"]).shape == (12, 2) and clustering["tokens"] == 10 + 14 + 15
    distances = np.load(out / "clustering_distances.npy")
    assert distances.shape == (12, 12) and np.allclose(distances, distances.T)


def test_reference_model_side_by_side(run: Path) -> None:
    wordclass = json.loads((run / "out" / "wordclass.json").read_text())
    assert wordclass["reference"].endswith("pretrained")
    noun = wordclass["classes"]["noun"]
    np.testing.assert_allclose(
        np.asarray(noun["difference"]), np.asarray(noun["grid"]) - np.asarray(noun["reference_grid"]), atol=2e-6
    )
    assert not np.allclose(noun["grid"], noun["reference_grid"])
    assert set(wordclass["cls_targets"]) == {
        "cls",
        "sep",
        "punct",
        "other",
        "noun",
        "verb",
        "pron",
        "subj",
        "obj",
        "neg",
    }

    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    runs = EventMultiplexer().AddRunsFromDirectory(str(run / "out"))
    runs.Reload()
    assert {"bertwatch/heads/wordclass_noun", "bertwatch/heads/syntax_det", "bertwatch/clustering/js_mds"} <= set(
        runs.Runs()["."]["tensors"]
    )
    assert "bertwatch/heads/wordclass_noun" in runs.Runs()["reference"]["tensors"]


def test_html_section_lists_every_analysis(run: Path) -> None:
    section = html_section(run / "out")
    for heading in ("Syntactic heads", "Attention probes", "word classes", "[CLS] targets", "Head clustering"):
        assert heading in section
    assert section.count("data:image/png;base64,") == 4
    assert "<script" not in section


def test_train_file_detection(tmp_path: Path) -> None:
    (tmp_path / "en_ewt-ud-train.conllu").write_text("")
    assert _train_file(tmp_path / "en_ewt-ud-dev.conllu") == tmp_path / "en_ewt-ud-train.conllu"
    assert _train_file(tmp_path / "en_ewt-ud-test.conllu") == tmp_path / "en_ewt-ud-train.conllu"
    assert _train_file(tmp_path / "other.conllu") is None
