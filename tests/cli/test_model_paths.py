"""Every command that takes a model names a local-looking path that is missing as missing, before any call to the
Hub: ``out/checkpoint-80`` is a folder the user expected, not a Hub model to retry five times."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from bertwatch.cli import main
from bertwatch.core.warnings import SetupError
from bertwatch.heads.loading import resolve_model
from bertwatch.probe.reference import check_reference_model

pytestmark = pytest.mark.fast


def _no_hub(*args, **kwargs):
    raise AssertionError(f"asked the Hub for {args[-1] if args else kwargs}")


@pytest.fixture
def offline(monkeypatch, tmp_path: Path) -> Path:
    """A working directory whose ``out/`` holds two checkpoints, and every loader of transformers refusing."""
    for auto in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModel):
        monkeypatch.setattr(auto, "from_pretrained", _no_hub)
    monkeypatch.chdir(tmp_path)
    for step in (120, 40):
        (tmp_path / "out" / f"checkpoint-{step}").mkdir(parents=True)
    (tmp_path / "texts.txt").write_text("a text\n")
    return tmp_path


COMMANDS = {
    "ablate": ["--task", "mrpc", "--out", "abl"],
    "ship": ["--task", "mrpc", "--out", "shp"],
    "analyze": ["--texts", "texts.txt", "--out", "ana"],
    "prune": ["--heads", "0:1", "--out", "prn"],
    "probe-syntax": ["--conllu", "dev.conllu", "--out", "syn"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_a_missing_checkpoint_folder_as_missing(offline: Path, command: str, capsys) -> None:
    assert main([command, "--model", "out/checkpoint-80", *COMMANDS[command]]) == 2
    err = capsys.readouterr().err
    assert "no such folder: out/checkpoint-80 (out/ holds checkpoint-40, checkpoint-120). Pass the folder" in err
    assert "huggingface.co" not in err and "Traceback" not in err, err


def test_what_looks_local_is_checked_here_and_a_hub_name_is_left_to_the_hub(offline: Path) -> None:
    for name in ("out/checkpoint-80", "nowhere/checkpoint-3", "out/model", "./model", "a/b/c", "~/model", "texts.txt"):
        with pytest.raises(FileNotFoundError, match=f"{name}"):
            resolve_model(name)
    with pytest.raises(FileNotFoundError, match="is a file, not a folder: texts.txt"):
        resolve_model("texts.txt")
    with pytest.raises(FileNotFoundError, match=r"no such folder: nowhere/checkpoint-3 \(looked in .*the Hub was not"):
        resolve_model("nowhere/checkpoint-3")
    for name in ("bert-base-uncased", "google-bert/bert-base-uncased", "org/checkpoint"):
        assert resolve_model(name) == name  # may be on the Hub: transformers says if it is not
    assert resolve_model("out/checkpoint-40") == str(Path("out/checkpoint-40"))
    with pytest.raises(SetupError, match="no such folder: out/checkpoint-80"):  # bertwatch run --reference-model
        check_reference_model("out/checkpoint-80")
