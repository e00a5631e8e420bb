"""Every command's flags are whole words: no flag is taken for an abbreviation of another (``--every-n-step`` is
not ``--every-n-steps``), and an unknown flag is refused with the closest one, as the Python API suggests the
closest option name; the flags after ``bertwatch run``'s script stay the script's own."""

from __future__ import annotations

import pytest

from bertwatch.cli import main

pytestmark = pytest.mark.fast

#: The arguments each command requires, so that parsing reaches the flag under test.
REQUIRED = {
    "analyze": ["--model", "m", "--texts", "t.txt", "--out", "o"],
    "ablate": ["--model", "m", "--task", "mrpc", "--out", "o"],
    "report": ["run_folder"],
    "sweep": ["logs"],
    "probe-syntax": ["--model", "m", "--conllu", "dev.conllu", "--out", "o"],
    "demo": [],
    "prune": ["--model", "m", "--out", "o", "--heads", "0:1"],
    "ship": [],
    "run": [],
    "stats": [],
}


def _refusal(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        main(list(argv))
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    return err.splitlines()[-1]


def _commands(capsys) -> set[str]:
    with pytest.raises(SystemExit):
        main(["--help"])
    listing = capsys.readouterr().out.split("COMMAND", 2)[2]
    return {line.split()[0] for line in listing.splitlines() if line.startswith("    ") and line[4] != " "}


def test_every_command_refuses_an_abbreviation_and_suggests_the_flag(capsys) -> None:
    assert set(REQUIRED) == _commands(capsys)
    for command, required in REQUIRED.items():
        said = _refusal(capsys, command, *required, "--hel")  # once an abbreviation of --help
        assert said == f"bertwatch {command}: error: unrecognized arguments: --hel (did you mean --help?)", said


def test_a_misspelt_flag_gets_the_closest_flag_of_its_command(capsys) -> None:
    said = _refusal(capsys, "run", "--probe-examples", "8", "train.py")
    assert said == "bertwatch run: error: unrecognized arguments: --probe-examples (did you mean --num-probe-examples?)"
    said = _refusal(capsys, "run", "--every-n-step", "20", "train.py")
    assert said.endswith("unrecognized arguments: --every-n-step (did you mean --every-n-steps?)"), said
    said = _refusal(capsys, "run", "--probe-sed=3", "train.py")  # a group flag, hidden from the short help
    assert said.endswith("--probe-sed=3 (did you mean --probe-seed?)"), said
    said = _refusal(capsys, "ablate", *REQUIRED["ablate"], "--resample", "10", "--sed", "3")
    assert said.endswith("--resample 10 --sed 3 (did you mean --resamples for --resample, --seed for --sed?)")
    assert _refusal(capsys, "ship", "--zzz").endswith("unrecognized arguments: --zzz")  # nothing close: no guess
    assert _refusal(capsys, "abalte") == "bertwatch: error: unknown command 'abalte' (did you mean ablate?)"


def test_the_flags_after_the_script_are_the_scripts_own(tmp_path, capsys) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint(sys.argv[1:])\n")
    assert main(["run", str(script), "--every-n-step", "20", "--your", "--flags"]) == 0
    assert capsys.readouterr().out == "['--every-n-step', '20', '--your', '--flags']\n"
