"""``bertwatch run``: its options are generated from ``WatchSettings`` (the front options in ``--help``, every one in
``--help-all``, in the user's words). An unchanged training script (it never imports bertwatch) run through
``python -m bertwatch run`` in a subprocess trains the same weights, gets bertwatch's event file, and keeps its argv, output and exit
status; the script's own exception is reported as Python would."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bertwatch.callbacks import BertWatchCallback
from bertwatch.cli import main
from bertwatch.cli.run import run_parser, settings_from_options
from bertwatch.options.settings import GROUPS, ExpertOptions, ProbeOptions, WatchSettings, option_specs
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts
from tests.support.torchrun import torchrun

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys

import torch
import transformers as T
from datasets import Dataset

model_dir, out_dir, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ARGV " + json.dumps(sys.argv))
tok = T.AutoTokenizer.from_pretrained(model_dir)
model = T.AutoModelForSequenceClassification.from_pretrained(model_dir)
rows = json.load(open(model_dir + "/texts.json"))


def encode(part):
    return Dataset.from_dict({**tok([r["text"] for r in part], truncation=True), "label": [r["label"] for r in part]})


class MyTrainer(T.Trainer):
    pass


args = T.TrainingArguments(
    output_dir=out_dir, max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=2,
    save_strategy="no", report_to="none", seed=7, use_cpu=True, disable_tqdm=True,
)
trainer = MyTrainer(
    model=model, args=args, train_dataset=encode(rows[:24]), eval_dataset=encode(rows[24:]), processing_class=tok,
    data_collator=T.DataCollatorWithPadding(tok),
)
trainer.train()
torch.save(model.state_dict(), out_dir + "/weights.pt")
sys.exit(code)
"""


def _run(tmp_path, *command):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(
        [sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def _setup(tmp_path) -> tuple[Path, Path]:
    tok = tiny_tokenizer()
    model_dir = tmp_path / "tiny"
    tiny_bert(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    (model_dir / "texts.json").write_text(json.dumps(toy_texts(32, seed=3)))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return model_dir, script


def test_bertwatch_run_watches_an_unchanged_script(tmp_path) -> None:
    model_dir, script = _setup(tmp_path)
    plain = _run(tmp_path, str(script), str(model_dir), str(tmp_path / "plain"), "0")
    assert plain.returncode == 0, plain.stderr[-3000:]

    watched = _run(
        tmp_path,
        "-m", "bertwatch", "run", "--every-n-steps", "2", "--stats", "entropy,cls_mass", "--num-probe-examples", "4",
        "--word-classes", "--head-clusters", str(script), str(model_dir), str(tmp_path / "watched"), "3",
    )  # fmt: skip
    assert watched.returncode == 3, watched.stderr[-3000:]
    argv = json.loads(next(line for line in watched.stdout.splitlines() if line.startswith("ARGV "))[5:])
    assert argv == [str(script), str(model_dir), str(tmp_path / "watched"), "3"]
    files = glob.glob(str(tmp_path / "watched" / "runs" / "*" / "*.bertwatch"))
    assert len(files) == 1
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("bertwatch/heads/entropy")] == [0, 2, 4]
    assert "bertwatch/heads/drift_cosine" not in acc.Tags()["tensors"]
    tags = acc.Tags()["tensors"]
    assert any(t.startswith("bertwatch/heads/wordclass_") for t in tags), tags  # --word-classes
    assert any(t.startswith("bertwatch/clustering/") for t in tags), tags  # --head-clusters
    a = torch.load(tmp_path / "plain" / "weights.pt")
    b = torch.load(tmp_path / "watched" / "weights.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bertwatch_run_reports_the_scripts_exception_as_python_does(tmp_path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nraise ValueError('boom from the script')\n")
    failed = _run(tmp_path, "-m", "bertwatch", "run", "--every-n-steps", "0", "--", str(script), "--flag", "--", "x")
    assert failed.returncode == 1 and failed.stdout == "['--flag', '--', 'x']\n"
    assert failed.stderr.rstrip().endswith("ValueError: boom from the script")
    trace = failed.stderr[failed.stderr.index("Traceback") :]
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    assert frames == [f'File "{script}", line 3, in <module>']  # the script's frame alone, as Python prints it
    missing = _run(tmp_path, "-m", "bertwatch", "run", "nowhere.py")
    assert missing.returncode == 2 and "no such script: nowhere.py" in missing.stderr


def test_bertwatch_run_dash_m_runs_a_module_as_python_does(tmp_path) -> None:
    model_dir, script = _setup(tmp_path)
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        script.read_text().replace('print("ARGV "', 'print("PATH0 " + sys.path[0])\nprint("ARGV "')
    )
    out = tmp_path / "watched"
    watched = _run(
        tmp_path,
        "-m", "bertwatch", "run", "--every-n-steps", "2", "--stats", "entropy", "--num-probe-examples", "4",
        "-m", "mypkg.train", str(model_dir), str(out), "5", "--stats",
    )  # fmt: skip
    assert watched.returncode == 5, watched.stderr[-3000:]
    argv = json.loads(next(line for line in watched.stdout.splitlines() if line.startswith("ARGV "))[5:])
    assert argv == [str(package / "train.py"), str(model_dir), str(out), "5", "--stats"]  # as python -m gives it
    assert f"PATH0 {tmp_path}" in watched.stdout.splitlines()
    files = glob.glob(str(out / "runs" / "*" / "*.bertwatch"))
    assert len(files) == 1
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("bertwatch/heads/entropy")] == [0, 2, 4]
    missing = _run(tmp_path, "-m", "bertwatch", "run", "-m", "nosuch.module")
    assert missing.returncode == 2 and "no module named nosuch.module" in missing.stderr
    bare = _run(tmp_path, "-m", "bertwatch", "run", "--stats", "entropy")
    assert bare.returncode == 2 and "name the training script (or -m MODULE)" in bare.stderr


@pytest.mark.distributed
def test_torchrun_two_processes_through_bertwatch_run(tmp_path) -> None:
    model_dir, script = _setup(tmp_path)
    launch = torchrun(
        "-m", "bertwatch", "run", "--every-n-steps", "2", "--num-probe-examples", "4",
        str(script), str(model_dir), str(tmp_path / "out"), "0",
    )  # fmt: skip
    proc = _run(tmp_path, *launch[1:])  # _run gives the interpreter
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert sum(line.startswith("ARGV ") for line in proc.stdout.splitlines()) == 2  # each rank ran the script
    files = glob.glob(str(tmp_path / "out" / "runs" / "*" / "*.bertwatch"))
    assert len(files) == 1  # world process zero alone writes
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("bertwatch/heads/entropy")] == [0, 2, 4]


# ------------------------------------------------------------------------------------------------ the options


def _sample(flag, spec, tmp_path) -> tuple[list[str], object]:
    """Command-line words for ``flag`` and the option value they must give (never the default)."""
    if flag.kind in ("true", "false"):
        return [], flag.kind == "true"
    if flag.kind in ("int", "int_or_none"):
        return ["7"], 7
    if flag.kind == "float":  # in range for every threshold and the budget: 3/4 of its default
        return [repr(0.75 * spec.default)], 0.75 * spec.default
    if flag.kind == "choice":
        value = next(c for c in flag.choices if c != spec.default)
        return [value], value
    if flag.kind == "names":
        return ["entropy, cls_mass"], ("entropy", "cls_mass")
    if flag.kind == "lines":
        path = tmp_path / "probe.txt"
        path.write_text("a good film\n\nthe plot\tis dull\n", encoding="utf-8")
        return [str(path)], ("a good film", ("the plot", "is dull"))
    if flag.kind == "json":
        return [json.dumps({"metric": "accuracy", "n_resamples": 10})], {"metric": "accuracy", "n_resamples": 10}
    assert flag.kind == "str", flag.kind
    return ["some/path"], "some/path"


def _value(settings: WatchSettings, spec) -> object:
    return getattr(settings if spec.group is None else getattr(settings, spec.group), spec.name)


@pytest.mark.fast
def test_every_option_has_a_flag_and_every_flag_sets_its_option(tmp_path) -> None:
    flagless = {s.spelled for s in option_specs() if not s.flags}
    assert flagless == {"probe_dataset", "loss_fn", "probing.tokenizer", "probing.data_collator"}  # objects
    parser = run_parser()
    for spec in option_specs():
        for flag in spec.flags:
            for name in flag.names:
                words, expected = _sample(flag, spec, tmp_path)
                given = settings_from_options(parser.parse_args([name, *words, "train.py"]))
                assert set(given) == {spec.group or spec.name}, (name, given)
                value = _value(WatchSettings(**given), spec)
                assert value == expected and value != spec.default, (name, value)
                assert _value(BertWatchCallback(**given).settings, spec) == value
    assert settings_from_options(parser.parse_args(["train.py"])) == {}
    both = parser.parse_args(["--word-classes-from", "dev.conllu", "--word-classes", "x.py"])
    assert settings_from_options(both) == {"expert": ExpertOptions(word_classes="dev.conllu")}  # the treebank wins
    no_limit = settings_from_options(parser.parse_args(["--probe-max-length", "none", "x.py"]))
    assert no_limit == {"probing": ProbeOptions(max_length=None)}


@pytest.mark.fast
def test_the_flags_of_earlier_versions_still_work(tmp_path, capsys) -> None:
    parser = run_parser()
    kept = ["--every-n-steps", "--stats", "--num-probe-examples", "--probe-texts", "--num-maps", "--logdir",
            "--ablate", "--ablate-on-end", "--ablation-mode", "--word-classes", "--word-classes-from",
            "--head-clusters", "--no-trackers", "--probe-seed", "--probe-max-length", "--alert-patience"]  # fmt: skip
    for name in kept:
        spec, flag = next((s, f) for s in option_specs() for f in s.flags if name in f.names)
        words, expected = _sample(flag, spec, tmp_path)
        assert (
            _value(WatchSettings(**settings_from_options(parser.parse_args([name, *words, "x.py"]))), spec) == expected
        )
    assert capsys.readouterr().err == ""


def _help(capsys, monkeypatch, flag: str = "--help") -> str:
    monkeypatch.setenv("COLUMNS", "80")  # a small terminal
    with pytest.raises(SystemExit) as stop:
        main(["run", flag])
    assert stop.value.code == 0
    return capsys.readouterr().out


def _titles(text: str) -> list[str]:
    """The section titles of a help text, after ``options:`` (the option groups)."""
    titles = [b.splitlines()[0] for b in text.split("\n\n") if b.strip() and not b.startswith(" ")]
    return [t.split(" (")[0] for t in titles[titles.index("options:") + 1 :] if t.endswith(":")]


def _front_flags() -> list[str]:
    return [f.names[0] for s in option_specs() if s.group is None for f in s.flags]


@pytest.mark.fast
def test_run_help_shows_the_front_options_on_one_screen(capsys, monkeypatch) -> None:
    text = _help(capsys, monkeypatch)
    lines = text.splitlines()
    assert len(lines) <= 50, len(lines)
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert _titles(text) == ["bertwatch options"]
    front = next(b for b in text.split("\n\n") if b.startswith("bertwatch options"))
    assert [line.split()[0].rstrip(",") for line in front.splitlines()[1:] if line.startswith("  --")] == _front_flags()
    assert "bertwatch stats" in front  # where the valid statistic names are
    hidden = [n for s in option_specs() if s.group is not None for f in s.flags for n in f.names]
    assert not [name for name in hidden if f"{name} " in text or f"{name}\n" in text]
    more = [f for s in option_specs() if s.group is not None for f in s.flags]
    assert lines[-2:] == [
        f"{len(more)} more options (probe tuning, stability alerts, run verdict, ablation at the",
        "end, expert): bertwatch run --help-all",
    ]
    for word in (".py)", "for tests", "turn off"):
        assert word not in text, word
    flat = " ".join(text.split())
    assert "--num-probe-examples N how many examples the probe set samples (default 32)" in flat


@pytest.mark.fast
def test_run_help_all_shows_every_flag_with_its_help_from_the_settings(capsys, monkeypatch) -> None:
    text = _help(capsys, monkeypatch, "--help-all")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert _titles(text) == ["bertwatch options", *(title for _, _, title in GROUPS)]
    assert "--help-all" in text and "more options" not in text
    flat = " ".join(text.split())
    for spec in option_specs():
        for flag in spec.flags:
            assert all(name in flat for name in flag.names), flag.names
            help_text = " ".join((flag.help or spec.help).split())
            assert help_text in flat, help_text
        if any(f.kind == "false" for f in spec.flags):
            assert all(f.help for f in spec.flags if f.kind == "false"), spec.spelled  # said the right way round
    assert "--no-on-evaluate do not measure at evaluations" in flat
    assert "(default 0.333)" in flat  # the verdict's lower_share, 1/3, shown as a person writes it
    for word in ("tau", "QK", "MDS", "budgeted"):  # words of the code, not of a user
        assert word not in text, word


@pytest.mark.fast
def test_a_value_the_settings_refuse_is_a_usage_error_before_the_script_runs(tmp_path, capsys) -> None:
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('the script ran')\n")
    for words, message in (
        (["--stats", "entropie"], "unknown bertwatch statistic 'entropie' (did you mean 'entropy'?)"),
        (["--ablation-kwargs", '{"n_resample": 3}'], "did you mean 'n_resamples'?"),
        (["--num-probe-examples", "0"], "num_probe_examples must be >= 1"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["run", *words, str(script)])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err and "the script ran" not in err, err


@pytest.mark.fast
def test_a_script_that_builds_no_trainer_is_told_nothing_was_watched(tmp_path, capsys) -> None:
    script = tmp_path / "no_trainer.py"
    script.write_text("import sys\nprint('trained by hand')\nsys.exit(int(sys.argv[1]))\n")
    for code in (0, 3):
        assert main(["run", str(script), str(code)]) == code  # the script's own exit status
        out, err = capsys.readouterr()
        assert out == "trained by hand\n"
        lines = err.splitlines()
        assert (
            lines[0]
            == "bertwatch: no_trainer.py built no transformers Trainer in this process, so nothing was watched."
        )
        assert "bertwatch.watch(trainer)" in lines[1] and len(lines) == 2, lines


GPT2_SCRIPT = """
import transformers as T

model = T.GPT2ForSequenceClassification(T.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, pad_token_id=0))
data = [{"input_ids": [1, 2, 3, 4], "attention_mask": [1, 1, 1, 1], "labels": i % 2} for i in range(8)]
args = T.TrainingArguments("out", max_steps=2, per_device_train_batch_size=4, report_to="none", use_cpu=True,
                           disable_tqdm=True, save_strategy="no")
T.Trainer(model=model, args=args, train_dataset=data).train()
print("trained")
"""


def test_a_model_bertwatch_does_not_watch_is_refused_in_a_few_lines_that_say_what_to_do(tmp_path) -> None:
    (tmp_path / "gpt2.py").write_text(GPT2_SCRIPT)
    refused = _run(tmp_path, "-m", "bertwatch", "run", "gpt2.py")
    assert refused.returncode == 2 and "trained" not in refused.stdout
    assert "Traceback" not in refused.stderr, refused.stderr[-3000:]
    said = refused.stderr[refused.stderr.index("bertwatch run: error: ") :].splitlines()
    assert len(said) == 3, said
    assert said[0] == (
        "bertwatch run: error: GPT2Model (model type 'gpt2') attends causally (each token sees only earlier ones); "
        "bertwatch watches bidirectional encoders."
    )
    assert "'Supported models' in bertwatch's README" in said[1]
    assert said[2].startswith("To train this model without bertwatch") and "python instead of bertwatch run" in said[2]
