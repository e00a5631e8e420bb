"""One rank of the FSDP test: a tiny BERT sharded with FSDP2 (``fully_shard``, gloo, CPU), fine-tuned by a plain
loop that drives BertWatchCallback through the Trainer's callback events.

Usage: ``torchrun --nproc_per_node 2 tests/support/fsdp_train.py OUT_DIR`` (sharded, each rank trains on its half of
every batch) or ``python tests/support/fsdp_train.py OUT_DIR single`` (one process, whole batches, no FSDP). Each rank
dumps the grids its callback measured to ``OUT_DIR/grids_rank{rank}.npz`` and what it knows to
``OUT_DIR/rank{rank}.json``; the callback's end-of-training sweep writes ``OUT_DIR/train/bertwatch_ablation``.
``torchrun ... tests/support/fsdp_train.py OUT_DIR sweep [die|apart]`` runs only ``ablate`` on a sharded 3-layer model
(``die``: rank 1 exits abruptly in the second shard, as a crashed process would; ``apart``: rank 1 gets a folder
of its own, as on another machine without a shared filesystem). accelerate (1.15) enables FSDP only on GPU backends (on CPU the Trainer's ``fsdp``
option silently runs DDP), so the Trainer is replaced here by the loop it would run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import transformers as T  # noqa: E402

from bertwatch.callbacks import AblationOptions, BertWatchCallback, ProbeOptions  # noqa: E402
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, toy_texts  # noqa: E402

STEPS = 4
BATCH = 8


def batches(tokenizer, rank: int, world: int) -> list[dict[str, torch.Tensor]]:
    """Every step's global batch of ``BATCH`` examples; this rank's contiguous part of it."""
    collator = T.DataCollatorWithPadding(tokenizer)
    rows = toy_dataset(tokenizer, STEPS * BATCH, 0).remove_columns("text")
    out = []
    per_rank = BATCH // world
    for step in range(STEPS):
        start = step * BATCH + rank * per_rank
        batch = collator([rows[i] for i in range(start, start + per_rank)])
        out.append({k: v for k, v in batch.items()})
    return out


def shard(model: torch.nn.Module, world: int) -> None:
    """FSDP2 as the Trainer applies it: each encoder layer, then the whole model."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model.bert.encoder.layer:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def sweep(out_dir: str, die: bool, apart: bool) -> None:
    """The sweep alone on a sharded model; rank 0 writes ``OUT_DIR/ablation.json``."""
    from bertwatch.ablation import evaluate
    from bertwatch.ablation.sweep import ablate

    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer, layers=3).eval()
    shard(model, world)
    if die and rank == 1:
        calls = []
        original = evaluate.run_shard_split

        def crash_in_second_shard(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                os._exit(3)
            return original(*args, **kwargs)

        evaluate.run_shard_split = crash_in_second_shard
    folder = os.path.join(out_dir, "elsewhere") if apart and rank == 1 else out_dir
    ablate(model, toy_texts(30, 2), tokenizer, out_dir=folder, **SWEEP)
    torch.distributed.destroy_process_group()


#: The sweep of the sweep test (also run unsharded by the test itself).
SWEEP = dict(mode="zero", n_resamples=100, batch_size=4, shard_size=8, max_length=64, prune=False, progress=False,
             budget_minutes=None)  # fmt: skip


def main(out_dir: str, sharded: bool) -> None:
    if sharded:
        torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank() if sharded else 0
    world = torch.distributed.get_world_size() if sharded else 1
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0  # both runs must take identical optimiser steps
    if sharded:
        shard(model, world)
    probe = [{"text": r["text"], "label": r["label"]} for r in toy_texts(8, 1)]
    callback = strict(
        BertWatchCallback,
        every_n_steps=2,
        probe_texts=probe,
        logging_dir=os.path.join(out_dir, "runs"),
        ablate_on_end=True,
        probing=ProbeOptions(tokenizer=tokenizer),
        # every part asked for: a budget would decide by timings that differ between one and two processes
        ablation=AblationOptions(
            kwargs=dict(n_resamples=50, batch_size=4, shard_size=8, progress=False, budget_minutes=None)
        ),
    )
    args = T.TrainingArguments(output_dir=os.path.join(out_dir, "train"), use_cpu=True, report_to="none")
    state = T.TrainerState()
    state.is_world_process_zero = rank == 0
    state.is_local_process_zero = rank == 0
    state.max_steps = STEPS
    control = T.TrainerControl()
    evaluation = toy_dataset(tokenizer, 12, 1).remove_columns("text")
    loader = torch.utils.data.DataLoader(evaluation, batch_size=4)
    events = dict(model=model, processing_class=tokenizer, eval_dataloader=loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    callback.on_train_begin(args, state, control, **events)
    for batch in batches(tokenizer, rank, world):
        callback.on_step_begin(args, state, control, **events)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        state.global_step += 1
        callback.on_step_end(args, state, control, **events)
    callback.on_train_end(args, state, control, **events)
    grids = {f"{step}/{name}": value for step, measured in callback.history for name, value in measured.items()}
    np.savez(os.path.join(out_dir, f"grids_rank{rank}.npz"), **grids)
    info = {
        "rank": rank,
        "world_size": world,
        "run_dir": callback.watched.trainer_side.run_dir if callback.watched is not None else None,
        "steps": [step for step, _ in callback.history],
        "disabled": callback.disabled,
        "sharded": any(hasattr(p, "full_tensor") for p in model.parameters()),
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(info))
    if sharded:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)  # one per rank: the ranks share a small machine (not on import: tests import this)
    if sys.argv[2:3] == ["sweep"]:
        sweep(sys.argv[1], die=sys.argv[3:4] == ["die"], apart=sys.argv[3:4] == ["apart"])
    else:
        main(sys.argv[1], sharded=sys.argv[2:3] != ["single"])
