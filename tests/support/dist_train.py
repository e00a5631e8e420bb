"""One rank of the distributed test: a tiny BERT trained with BertWatchCallback under torchrun (gloo, CPU).

Usage: ``torchrun --nproc_per_node 2 tests/support/dist_train.py OUT_DIR``. Each rank dumps the grids its callback
measured to ``OUT_DIR/grids_rank{rank}.npz`` and what it knows about writing to ``OUT_DIR/rank{rank}.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import transformers as T  # noqa: E402

from bertwatch.callbacks import BertWatchCallback, watch  # noqa: E402
from tests.support.strict import strict
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_dataset, training_args  # noqa: E402


def main(out_dir: str) -> None:
    rank = int(os.environ.get("RANK", "0"))
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer)
    callback = strict(BertWatchCallback, every_n_steps=2, num_probe_examples=8)
    args = training_args(
        os.path.join(out_dir, "train"),
        max_steps=4,
        ddp_backend="gloo",
        eval_strategy="steps",
        eval_steps=3,
        logging_steps=1,
    )
    trainer = T.Trainer(
        model=model,
        args=args,
        train_dataset=toy_dataset(tokenizer, 32, 0),
        eval_dataset=toy_dataset(tokenizer, 16, 1),
        processing_class=tokenizer,
        data_collator=T.DataCollatorWithPadding(tokenizer),
        callbacks=[callback],
    )
    watch(trainer)
    trainer.train()
    grids = {f"{step}/{name}": value for step, measured in callback.history for name, value in measured.items()}
    np.savez(os.path.join(out_dir, f"grids_rank{rank}.npz"), **grids)
    info = {
        "rank": rank,
        "world_size": trainer.args.world_size,
        "world_zero": trainer.state.is_world_process_zero,
        "run_dir": callback.watched.trainer_side.run_dir,
        "steps": [step for step, _ in callback.history],
        "weights_sum": float(sum(p.detach().double().sum() for p in model.parameters())),
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(info))


if __name__ == "__main__":
    torch.set_num_threads(1)  # one per rank: the ranks share a small machine (not on import: tests import this)
    main(sys.argv[1])
