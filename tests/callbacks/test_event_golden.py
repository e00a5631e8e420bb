"""Behaviour kept through redesigns: the event file of one fixed run, compared with the one recorded before.

A tiny BERT trained 8 steps at a rate that makes it misbehave (alerts fire and the verdict changes), measured
every 2 steps with the defaults, evaluated at steps 4 and 8. Every tensor the run writes (head grids, maps,
series, alerts, verdict texts) is compared with ``tests/support/watched_run_events.json`` bit for bit, except the
wall-time seconds in ``series/probe_steps``, whose first entry is the only value that depends on the machine's
speed. Bit for bit holds where the arithmetic is the recorded one (the same torch build and CPU capability, one
thread); on another machine the tags, steps, dtypes, shapes and the verdict's words are compared, and the values
to 1e-5.

To record a new reference after a change that is meant to change what is written (say why in the commit):
``python -m tests.callbacks.test_event_golden``.
"""

from __future__ import annotations

import glob
import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from bertwatch import watch
from tests.support.tiny_trainer import toy_trainer

GOLDEN = Path(__file__).parents[1] / "support" / "watched_run_events.json"
#: The series whose first value is wall-clock seconds (compared without that value).
TIMED = {"bertwatch/series/probe_steps"}


def _machine() -> str:
    return f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, 1 thread"


def _value(tag: str, array: np.ndarray) -> np.ndarray:
    if tag in TIMED:
        array = array.copy()
        array[0] = 0.0
    return array


def _text(item: object) -> object:
    """A text as itself; a binary blob (the written maps) by its length, its bytes being in the hash."""
    if not isinstance(item, bytes):
        return item
    try:
        return item.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(item)} bytes>"


def _fixed_run(out: Path) -> dict[str, list]:
    """Each tag of the fixed run's event file: ``[step, dtype, shape, sha256 of the bytes, values]`` per event
    (values as a list of numbers or texts)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the arithmetic's order, hence its last bits, depends on the thread count
    try:
        return _digest(out)
    finally:
        torch.set_num_threads(threads)


def _digest(out: Path) -> dict[str, list]:
    trainer = toy_trainer(
        out, [], max_steps=8, learning_rate=3e-2, eval_strategy="steps", eval_steps=4, logging_steps=1
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch(trainer, every_n_steps=2, num_probe_examples=6, quiet=True)
        trainer.train()
    (run,) = glob.glob(str(out / "**" / "events.out.tfevents.*.bertwatch"), recursive=True)
    acc = EventAccumulator(str(Path(run).parent), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    digest: dict[str, list] = {}
    for tag in sorted(acc.Tags()["tensors"]):
        rows = []
        for event in acc.Tensors(tag):
            array = _value(tag, tensor_util.make_ndarray(event.tensor_proto))
            if array.dtype == object:
                values = [_text(item) for item in array.ravel()]
                raw = json.dumps(values).encode()
            else:
                values, raw = array.astype(np.float64).ravel().tolist(), array.tobytes()
            rows.append([event.step, str(array.dtype), list(array.shape), hashlib.sha256(raw).hexdigest(), values])
        digest[tag] = rows
    return digest


def test_the_fixed_run_writes_what_it_wrote_before(tmp_path) -> None:
    golden = json.loads(GOLDEN.read_text())
    now = _fixed_run(tmp_path)
    assert sorted(now) == sorted(golden["tags"]), "the tags written changed"
    same_machine = golden["machine"] == _machine()
    for tag, rows in golden["tags"].items():
        assert [r[:3] for r in now[tag]] == [r[:3] for r in rows], f"{tag}: steps, dtypes or shapes changed"
        for new, old in zip(now[tag], rows):
            if same_machine:
                assert new[3] == old[3], f"{tag} at step {old[0]}: not bit for bit the recorded values"
            elif old[1] == "object":
                assert new[4] == old[4], f"{tag} at step {old[0]}"
            else:
                np.testing.assert_allclose(new[4], old[4], rtol=1e-5, atol=1e-7, err_msg=f"{tag} at {old[0]}")


@pytest.mark.fast
def test_the_reference_records_alerts_and_a_changing_verdict() -> None:
    """The fixed run is one that exercises the judging: alerts written and more than one verdict level."""
    tags = json.loads(GOLDEN.read_text())["tags"]
    assert any(np.any(np.asarray(row[4]) > 0) for row in tags["bertwatch/alerts/heads"])
    levels = {row[4][0] for row in tags["bertwatch/series/verdict"]}
    assert len(levels) >= 2, levels


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        tags = _fixed_run(Path(folder))
    GOLDEN.write_text(json.dumps({"machine": _machine(), "tags": tags}, indent=0) + "\n")
    print(f"wrote {GOLDEN}: {len(tags)} tags on {_machine()}")
