"""``bertwatch run`` on a script that never imports bertwatch says what it watches when training starts, what the
run will cost after its first step, its alerts as they come and what it measured when it ends, every line prefixed
``bertwatch:`` and none a Python warning; the ``tensorboard`` command of its start lines, pasted as printed, shows
the run (its logdir goes through the plugin's own loader)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.tb_helpers import make_wsgi_app
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys

import transformers as T
from datasets import Dataset

tok = T.AutoTokenizer.from_pretrained(sys.argv[1])
model = T.AutoModelForSequenceClassification.from_pretrained(sys.argv[1])
words = ["a good film .", "a dull , long plot .", "the actors were great", "boring and sad ."]
data = Dataset.from_dict({**tok([words[i % 4] for i in range(24)]), "label": [i % 2 for i in range(24)]})
args = T.TrainingArguments(
    output_dir="out", max_steps=4, per_device_train_batch_size=4, learning_rate=1e-2, save_strategy="no",
    report_to="none",
    eval_strategy="steps", eval_steps=2, use_cpu=True, disable_tqdm=True,
)
T.Trainer(
    model=model, args=args, train_dataset=data, eval_dataset=data.select(range(8)), processing_class=tok,
    data_collator=T.DataCollatorWithPadding(tok),
).train()
"""


def test_bertwatch_run_prints_the_start_and_end_lines_and_a_command_that_shows_the_run(tmp_path) -> None:
    tok = tiny_tokenizer()
    tiny_bert(tok).save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    (tmp_path / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("BERTWATCH_QUIET", None)
    done = subprocess.run(
        [sys.executable, "-m", "bertwatch", "run", "train.py", "tiny"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line.removeprefix("bertwatch: ") for line in done.stderr.splitlines() if line.startswith("bertwatch: ")]
    assert lines[0].startswith("watching BertForSequenceClassification (2 layers x 4 heads): "), lines
    assert "8 probe examples from the eval set" in lines[0]
    assert lines[1].startswith("events go to out/runs/")
    assert lines[2].startswith("see them live: tensorboard --logdir out/runs ")
    assert re.match(
        r"setting up and measuring step 0 took [0-9.]+ s; at [0-9.e-]+ s a step the run's 4 steps take about ", lines[3]
    )
    assert "for step 0 and the 2 evaluations" in lines[3]  # at steps 2 and 4, the last step's the end's
    alerts = r"\d+ stability alerts?( raised, \d+ still in force at the end)?"
    assert re.match(rf"measured 3 steps \(0 to 4\); {alerts}; moved most: L\d H\d \(JS ", lines[-4])
    took = (
        r"took [0-9.]+ s, [0-9.]+% of the run, all for step 0 and the 2 evaluations: more than the 2% overhead budget"
    )
    assert re.match(took, lines[-3]), lines  # on 4 steps of a tiny model the measurements are most of the run
    assert re.match(r"verdict: (healthy|at risk|failing)", lines[-2])
    assert lines[-1].startswith("report: bertwatch report out ")
    alerts = int(re.search(r"(\d+) stability alerts?", lines[-4]).group(1))
    said = [line for line in lines[4:-4] if " in alert since step " in line]
    heads = sum(int(line.split(" ", 1)[0]) for line in said)
    assert heads == alerts, "every alert is in one of the lines, each head once"
    assert "BertWatchWarning" not in done.stderr and "BertWatchAlert" not in done.stderr, "no warning of bertwatch's"
    command = shlex.split(lines[2].removeprefix("see them live: ").split("   ")[0])
    logdir = tmp_path / command[command.index("--logdir") + 1]
    _, mux, _ = make_wsgi_app(logdir)
    run = os.path.relpath(tmp_path / lines[1].removeprefix("events go to "), logdir)
    assert any(tag.startswith("bertwatch/") for tag in mux.Runs()[run]["tensors"])
