"""Hostile input: nothing a user does wrong, and nothing that goes wrong around bertwatch, loses their work.

See docs/hostile_inputs.md for the table of what was tried and what happened.
"""

from __future__ import annotations

import errno
import glob
import os
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as T
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from werkzeug.test import Client

import bertwatch.tb.writer.summary as summary_module
from bertwatch.callbacks import BertWatchCallback, BertWatchWarning, SetupError, watch
from bertwatch.heads.capture import UnsupportedModelError
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.strict import strict
from tests.support.tb_helpers import http_json, make_wsgi_app, synthetic_grids, tensorboard_server, wait_for
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args

REPO = Path(__file__).resolve().parents[1]


def _train(out: Path, callbacks: list, *, tok=None, model=None, steps: int = 4, **overrides) -> T.Trainer:
    tok = tok or tiny_tokenizer()
    trainer = T.Trainer(
        model=model if model is not None else tiny_bert(tok),
        args=training_args(str(out), max_steps=steps, **overrides),
        train_dataset=toy_dataset(tok, 24, 0),
        eval_dataset=toy_dataset(tok, 12, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=callbacks,
    )
    if callbacks:
        watch(trainer)
    trainer.train()
    return trainer


def _grid_steps(run_dir: Path, stat: str = "cls_mass") -> list[int]:
    acc = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    acc.Reload()
    tag = f"bertwatch/heads/{stat}"
    return sorted(e.step for e in acc.Tensors(tag)) if tag in acc.Tags()["tensors"] else []


def test_sigkill_mid_run_leaves_readable_event_files(tmp_path: Path) -> None:
    logdir = tmp_path / "runs" / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile_train", str(logdir), str(tmp_path / "out")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        timer = threading.Timer(240, process.kill)
        timer.start()
        for line in process.stdout:
            if line.strip() == "step 6":
                break
        timer.cancel()
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert process.returncode == -signal.SIGKILL
    steps = _grid_steps(logdir)
    assert steps[:3] == [0, 1, 2] and len(steps) >= 5
    app, _, _ = make_wsgi_app(tmp_path / "runs")
    client = Client(app)
    response = client.get("/data/plugin/bertwatch/grid?run=killed&tag=bertwatch/heads/cls_mass")
    assert response.status_code == 200
    assert np.isfinite(np.array(response.get_json()["values"], dtype=float)).all()
    with tensorboard_server(tmp_path / "runs") as base:
        tags = wait_for(lambda: http_json(base + "/data/plugin/bertwatch/tags").get("runs", {}).get("killed"))
        assert tags


def test_unwritable_log_dir_is_refused_before_the_first_step(tmp_path: Path) -> None:
    """A run bertwatch could not write is refused at on_train_begin, with what to do: never a run left unmonitored
    after one warning for a reason the user could have fixed at the start."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    callback = BertWatchCallback(every_n_steps=1, logging_dir=blocker / "runs")
    with pytest.raises(SetupError, match="pass logging_dir= a folder you can write to"):
        _train(tmp_path / "out", [callback])
    assert callback.history == []


def test_full_disk_warns_and_training_is_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _train(tmp_path / "plain", [])
    losses = [h["loss"] for h in reference.state.log_history if "loss" in h]

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(summary_module.SummaryWriter, "add_summary", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = _train(tmp_path / "full", [BertWatchCallback(every_n_steps=1, logging_dir=tmp_path / "runs")])
    ours = [w for w in caught if issubclass(w.category, BertWatchWarning)]
    assert len(ours) == 1 and "No space left" in str(ours[0].message)
    assert [h["loss"] for h in trainer.state.log_history if "loss" in h] == losses
    assert all(
        torch.equal(a, b) for a, b in zip(reference.model.state_dict().values(), trainer.model.state_dict().values())
    )


def test_corrupt_and_truncated_event_files_do_not_break_other_runs(tmp_path: Path) -> None:
    logdir = tmp_path / "runs"
    for run in ("good", "truncated", "garbage"):
        with SummaryWriter(str(logdir / run)) as writer:
            for step in range(3):
                writer.add_head_grids(synthetic_grids(step), step)
    victim = glob.glob(str(logdir / "truncated" / "events.*"))[0]
    data = Path(victim).read_bytes()
    Path(victim).write_bytes(data[: len(data) // 2])
    (logdir / "garbage" / "events.out.tfevents.0.x.bertwatch").write_bytes(os.urandom(4096))
    app, _, _ = make_wsgi_app(logdir)
    client = Client(app)
    for run in ("good", "truncated", "garbage"):
        response = client.get(f"/data/plugin/bertwatch/grid?run={run}&tag=bertwatch/heads/cls_mass")
        assert response.status_code in (200, 404), run
    good = client.get("/data/plugin/bertwatch/grid?run=good&tag=bertwatch/heads/cls_mass")
    assert good.status_code == 200 and good.get_json()["step"] == 2
    with tensorboard_server(logdir) as base:
        runs = wait_for(lambda: http_json(base + "/data/plugin/bertwatch/tags").get("runs", {}))
        assert "good" in runs
        grid = http_json(base + "/data/plugin/bertwatch/grid?run=good&tag=bertwatch/heads/cls_mass")
        assert grid["step"] == 2


HOSTILE_TEXTS = [
    "<img src=x onerror=alert(1)> good movie .",
    "bad \x00\x07\x1b[31m plot \u202e reversed , fun",
    "a" * 300 + " brilliant",
    "",
    "   ",
    "\U0001f600 emoji 🎬 , ok",
]


def test_hostile_probe_texts_reach_the_plugin_verbatim(tmp_path: Path) -> None:
    logdir = tmp_path / "runs" / "hostile"
    callback = strict(
        BertWatchCallback,
        every_n_steps=2,
        logging_dir=logdir,
        probe_texts=HOSTILE_TEXTS,
        num_maps=6,
        stats=("cls_mass", "entropy", "drift_cosine"),
    )
    _train(tmp_path / "out", [callback])
    app, _, _ = make_wsgi_app(tmp_path / "runs")
    client = Client(app)
    tokenizer = tiny_tokenizer()
    for index, text in enumerate(HOSTILE_TEXTS):
        response = client.get(
            f"/data/plugin/bertwatch/attention?run=hostile&tag=bertwatch/attention/{index:02d}&layer=0"
        )
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("application/json")
        expected = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
        assert response.get_json()["tokens"] == expected
    grids = np.array(
        client.get("/data/plugin/bertwatch/grid?run=hostile&tag=bertwatch/heads/cls_mass").get_json()["values"],
        dtype=float,
    )
    assert np.isfinite(grids).all()


def _peak_rss(tmp_path: Path, probes: int) -> float:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.hostile_train",
            str(tmp_path / f"runs{probes}"),
            str(tmp_path / f"o{probes}"),
            str(probes),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return float(result.stdout.split("peak_rss_mib")[-1])


def test_ten_thousand_probe_texts_stay_bounded(tmp_path: Path) -> None:
    small, large = _peak_rss(tmp_path, 32), _peak_rss(tmp_path, 10_000)
    assert large - small < 250, f"10,000 probe texts took {large - small:.0f} MiB more than 32"
    assert len(glob.glob(str(tmp_path / "runs10000" / "events.*"))) == 1


def test_models_that_are_not_encoders_fail_before_training(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    tok.pad_token = tok.pad_token or "[PAD]"
    gpt2 = T.GPT2ForSequenceClassification(
        T.GPT2Config(vocab_size=len(tok), n_layer=1, n_head=2, n_embd=16, n_positions=64, pad_token_id=tok.pad_token_id)
    )
    with pytest.raises(UnsupportedModelError, match="gpt2"):
        _train(tmp_path / "out", [BertWatchCallback(logging_dir=tmp_path / "runs")], tok=tok, model=gpt2)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_user_attention_implementation_is_kept_for_training(tmp_path: Path, implementation: str) -> None:
    tok = tiny_tokenizer()
    model = tiny_bert(tok)
    model.set_attn_implementation(implementation)
    callback = strict(BertWatchCallback, every_n_steps=2, logging_dir=tmp_path / "runs")
    _train(tmp_path / "out", [callback], tok=tok, model=model)
    assert model.config._attn_implementation == implementation
    assert [s for s, _ in callback.history][:2] == [0, 2]


def test_tokenizer_without_cls_and_sep_gives_nan_not_errors(tmp_path: Path) -> None:
    tok = tiny_tokenizer()
    vocab = tok.get_vocab()
    plain = T.PreTrainedTokenizerFast(tokenizer_object=_word_level(vocab), pad_token="[PAD]", unk_token="[UNK]")
    model = tiny_bert(tok)
    callback = strict(
        BertWatchCallback,
        every_n_steps=2,
        logging_dir=tmp_path / "runs",
        stats=("cls_mass", "sep_mass", "sep_to_sep", "cls_entropy", "entropy"),
    )
    _train(tmp_path / "out", [callback], tok=plain, model=model)
    _, grids = callback.history[-1]
    assert np.isnan(grids["sep_to_sep"]).all() and np.isnan(grids["cls_entropy"]).all()
    assert (grids["cls_mass"] == 0).all() and np.isfinite(grids["entropy"]).all()


def _word_level(vocab: dict[str, int]):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def test_two_trainings_into_one_log_dir_at_once(tmp_path: Path) -> None:
    logdir = tmp_path / "runs" / "shared"
    script = (
        "import sys, torch; torch.set_num_threads(1)\n"
        "import transformers as T\n"
        "from bertwatch.callbacks import BertWatchCallback\n"
        "from tests.support.strict import strict\n"
        "from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args\n"
        "tok = tiny_tokenizer()\n"
        "T.Trainer(model=tiny_bert(tok, seed=int(sys.argv[2])), args=training_args(sys.argv[3], max_steps=6),\n"
        "          train_dataset=toy_dataset(tok, 24, 0), eval_dataset=toy_dataset(tok, 12, 1),\n"
        "          processing_class=tok, data_collator=T.DataCollatorWithPadding(tok),\n"
        "          callbacks=[strict(BertWatchCallback, every_n_steps=1, logging_dir=sys.argv[1])]).train()\n"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(logdir), str(seed), str(tmp_path / f"out{seed}")],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-2000:]
    files = glob.glob(str(logdir / "events.*"))
    assert len(files) == 2
    for path in files:
        acc = EventAccumulator(path, size_guidance={"tensors": 0})
        acc.Reload()
        steps = sorted(e.step for e in acc.Tensors("bertwatch/heads/entropy"))
        assert steps == list(range(7))
        assert all(
            np.isfinite(tensor_util.make_ndarray(e.tensor_proto)).all() for e in acc.Tensors("bertwatch/heads/entropy")
        )
