"""The arguments the commands share (``cli.eval_data``): the model argument, which task ``--task`` names and what
it reads, and the class names a checkpoint gives."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from bertwatch.cli import eval_data

pytestmark = pytest.mark.fast


def _args(task: str, data: str | None = None, **rest) -> argparse.Namespace:
    return argparse.Namespace(task=task, data=data, glue_dir=None, split="dev", limit=rest.get("limit"))


def test_the_model_argument_says_where_minilm_fits() -> None:
    parser = argparse.ArgumentParser()
    eval_data.add_model_argument(parser, "model folder or Hub name")
    eval_data.add_model_argument(parser, "a checkpoint", required=False, flag="--reference", packaged=False)
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["model"] == "model folder or Hub name (or 'minilm': the packaged all-MiniLM-L6-v2)"
    assert helps["reference"] == "a checkpoint"
    assert parser.parse_args(["--model", "minilm"]).model == "minilm"
    assert parser.parse_args(["--model", "m"]).reference is None
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --model is required


def test_a_glue_name_is_sequence_classification_read_from_the_glue_folder() -> None:
    assert eval_data.task_type(_args("SST2")) == "sequence-classification"
    with pytest.raises(ValueError, match="is a GLUE task, read from --glue-dir; to evaluate on --data dev.tsv"):
        eval_data.task_type(_args("sst2", "dev.tsv"))


def test_a_task_type_reads_its_file_and_says_which_when_it_is_missing() -> None:
    assert eval_data.task_type(_args("ner", "dev.conll")) == "token-classification"
    assert eval_data.task_type(_args("mlm", "text.txt")) == "masked-lm"
    with pytest.raises(ValueError, match="--task qa reads its examples from --data: pass a SQuAD JSON file"):
        eval_data.task_type(_args("qa"))
    with pytest.raises(ValueError, match="or a task type read from --data: sequence-classification"):
        eval_data.task_type(_args("imdb"))


def test_the_examples_come_from_the_reader_of_the_task_type(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text("one line\n\nanother line\nthird\n", encoding="utf-8")
    rows = eval_data.read_examples(_args("mlm", str(text), limit=2), "masked-lm", None)
    assert rows == [{"text": "one line"}, {"text": "another line"}]  # blank lines skipped, file order, the limit
    labelled = tmp_path / "dev.tsv"
    labelled.write_text("a good film\tpos\na dull plot\tneg\n", encoding="utf-8")
    model = SimpleNamespace(config=SimpleNamespace(id2label={0: "neg", 1: "pos"}, num_labels=2))
    got = eval_data.read_examples(_args("sequence-classification", str(labelled)), "sequence-classification", model)
    assert [(r["text"], r["label"]) for r in got] == [("a good film", 1), ("a dull plot", 0)]
