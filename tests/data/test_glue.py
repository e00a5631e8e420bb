"""GLUE loading against the documented row counts and quirks (quoting off, BOM dropped, file order), and the text
files of `bertwatch analyze`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertwatch.data.glue import glue_task, load_glue, read_texts

DEV_ROWS = {"cola": 1043, "sst2": 872, "mrpc": 408, "rte": 277, "stsb": 1500, "qnli": 5463}


@pytest.mark.parametrize("task,rows", DEV_ROWS.items())
def test_dev_files_have_the_documented_rows(glue_dir: Path, task: str, rows: int) -> None:
    examples = load_glue(task, "dev", glue_dir)
    assert len(examples) == rows
    spec = glue_task(task)
    assert all((e["text_pair"] is not None) == spec.pair for e in examples)
    labels = {e["label"] for e in examples}
    if spec.is_regression:
        assert min(labels) >= 0 and max(labels) <= 5
    else:
        assert labels == {0, 1}


def test_quoting_is_off_and_bom_dropped(glue_dir: Path) -> None:
    mrpc = load_glue("MRPC", "dev", glue_dir)
    assert mrpc[0]["text_pair"].startswith('" The foodservice')
    assert mrpc[0]["label"] == 1
    train = load_glue("rte", "train", glue_dir)
    assert len(train) == 2490
    assert sum('"' in e["text"] for e in train) > 50


def test_limit_keeps_file_order(glue_dir: Path) -> None:
    first = load_glue("sst-2", "dev", glue_dir, limit=3)
    assert [e["text"] for e in first] == [e["text"] for e in load_glue("sst2", "dev", glue_dir)[:3]]
    assert first[0]["text"] == "it 's a charming and often affecting journey ."


def test_bad_task_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown GLUE task"):
        glue_task("squad")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_glue("sst2", "dev", tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="SST-2"):
        load_glue("sst2", "dev", tmp_path)


def test_read_texts(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_text("a b\n\nfirst\tsecond\n", encoding="utf-8")
    assert read_texts(f) == [("a b", None), ("first", "second")]
    (tmp_path / "e.txt").write_text("\n \n")
    with pytest.raises(ValueError, match="no examples"):
        read_texts(tmp_path / "e.txt")
