"""Log folders of many runs as bertwatch and the Trainer write them: the ``verdict`` series and text of each, and
the Trainer's own event file with its arguments, for ``bertwatch sweep`` and the plugin's Runs view."""

from __future__ import annotations

import json
import math

import numpy as np

from bertwatch.core.verdict import NOTHING_YET, VERDICT_SERIES
from bertwatch.tb.writer.summary import SummaryWriter

MAX_STEPS = 100


def write_run(folder, history, learning_rate=None, seed=None, ended=False) -> None:
    """A run as bertwatch and the Trainer write it: the ``verdict`` series and text at each judged step
    (``history``: ``(step, level, known, evidence, reason)``; its margin a tenth of its evidence), and, with a
    ``learning_rate``, the Trainer's own event file with its ``args`` text (and ``train/train_runtime`` once it
    ``ended``)."""
    from torch.utils.tensorboard import SummaryWriter as TrainerWriter

    with SummaryWriter(str(folder)) as writer:
        for step, level, known, evidence, reason in history:
            values = {"level": float(level), "known": float(known), "evidence": evidence, "margin": evidence / 10}
            writer.add_named_values(VERDICT_SERIES, values, step, "the verdict")
            writer.add_step_text(VERDICT_SERIES, [reason] if reason else [], step, "reasons")
    if learning_rate is None:
        return
    trainer = TrainerWriter(log_dir=str(folder))
    args = {"learning_rate": learning_rate, "seed": seed, "max_steps": MAX_STEPS, "output_dir": "out"}
    trainer.add_text("args", json.dumps(args))
    for step, *_ in history:
        trainer.add_scalar("train/loss", 0.5, step)
    if ended:
        trainer.add_scalar("train/train_runtime", 12.0, MAX_STEPS)
    trainer.close()


def write_many(root, count: int, seed: int = 0) -> list[str]:
    """``count`` runs under ``root`` (``run-00`` ...), each judged every 10 steps up to a step drawn between 20 and
    ``MAX_STEPS``: some learn (healthy from their third judgement), some stay unsure, some turn at risk, some fail;
    a third have ended. Their margins differ, so within a level only the runs that cannot tell tie (ranked by name). Returns the
    run names."""
    rng = np.random.default_rng(seed)
    names = []
    for i in range(count):
        kind = ("learns", "unsure", "risky", "fails")[i % 4]
        last = int(rng.integers(2, MAX_STEPS // 10 + 1)) * 10
        history = [(0, 0, 0, math.nan, NOTHING_YET)]
        for step in range(10, last + 1, 10):
            if kind == "learns" and step >= 30:
                history.append(
                    (step, 0, 1, float(rng.uniform(2, 9)), f"training loss falls below the constant's ({i})")
                )
            elif kind == "risky" or (kind == "fails" and step < last):
                history.append((step, 1, 1, float(rng.uniform(-3, 1)), f"training loss at the constant's ({i})"))
            elif kind == "fails":
                history.append((step, 2, 1, float(rng.uniform(-9, -2)), f"training loss above the constant's ({i})"))
            else:
                history.append((step, 0, 0, math.nan, NOTHING_YET))
        name = f"run-{i:02d}"
        write_run(root / name, history, learning_rate=float(f"{10 ** rng.uniform(-5, -2):.2g}"), seed=i,
                  ended=i % 3 == 0)  # fmt: skip
        names.append(name)
    return names
