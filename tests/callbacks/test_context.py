"""What a callback reads from the Trainer (``callbacks._context``): the TensorBoard run folder, chosen as the
Trainer's TensorBoardCallback chooses it and shared with it."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from bertwatch.callbacks._context import TrainerContext, tensorboard_run_dir


def test_tensorboard_run_dir_resolution(tmp_path, monkeypatch) -> None:
    from transformers.integrations import TensorBoardCallback

    args = SimpleNamespace(output_dir=str(tmp_path))
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)
    assert tensorboard_run_dir(args, TrainerContext(), tmp_path / "x") == str(tmp_path / "x")
    default = tensorboard_run_dir(args, TrainerContext())
    assert os.path.dirname(default) == os.path.join(str(tmp_path), "runs")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "env"))
    assert tensorboard_run_dir(args, TrainerContext()) == str(tmp_path / "env")
    tb = TensorBoardCallback()
    handler = SimpleNamespace(callbacks=[tb])
    tb.logging_dir = None
    chosen = tensorboard_run_dir(args, TrainerContext(handler=handler))
    assert tb.logging_dir == chosen  # the TensorBoardCallback writes into the same run
    tb.tb_writer = SimpleNamespace(log_dir=str(tmp_path / "tbw"))
    assert tensorboard_run_dir(args, TrainerContext(handler=handler)) == str(tmp_path / "tbw")


def test_a_watched_trainer_pickles_whole_for_a_search_that_runs_trials_elsewhere(tmp_path) -> None:
    """Ray Tune pickles the Trainer with its callbacks into each trial's process: the callback's weak link to its
    Trainer travels and points at the Trainer that arrives, never at the one left behind. In a fresh process: after
    a training, accelerate's shared gradient state keeps weak references to its data loaders, which no Trainer of
    that process pickles with, watched or not."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import pickle, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from bertwatch import watch
        from tests.support.tiny_trainer import toy_trainer

        trainer = toy_trainer({str(tmp_path)!r}, [], max_steps=2)
        callback = watch(trainer)
        assert callback.trainer is trainer
        copy = pickle.loads(pickle.dumps(trainer))
        (arrived,) = [c for c in copy.callback_handler.callbacks if type(c) is type(callback)]
        assert arrived.trainer is copy and arrived is not callback
        print("arrived")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("arrived"), done.stderr[-2000:]
