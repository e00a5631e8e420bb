"""``bertwatch run``: an unchanged training script (it never imports bertwatch) run through ``python -m bertwatch
run`` in a subprocess trains the same weights, gets bertwatch's event file, and keeps its argv, output and exit
status; the script's own exception is reported as Python would."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts

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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _run(
        tmp_path,
        "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(port), "-m", "bertwatch", "run", "--every-n-steps", "2", "--num-probe-examples", "4",
        str(script), str(model_dir), str(tmp_path / "out"), "0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert sum(line.startswith("ARGV ") for line in proc.stdout.splitlines()) == 2  # each rank ran the script
    files = glob.glob(str(tmp_path / "out" / "runs" / "*" / "*.bertwatch"))
    assert len(files) == 1  # world process zero alone writes
    acc = EventAccumulator(os.path.dirname(files[0]), size_guidance={"tensors": 0})
    acc.Reload()
    assert [e.step for e in acc.Tensors("bertwatch/heads/entropy")] == [0, 2, 4]
