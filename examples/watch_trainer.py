"""Notebook style: build a Trainer as usual, then one call, ``bertwatch.watch(trainer)``, before ``train()``.

    python examples/watch_trainer.py --glue-dir ../shared/data/glue

Each cell of a notebook would hold one block below. The callback it returns keeps every measured step in
``history`` (``[layers, heads]`` numpy grids), so a notebook can plot them without TensorBoard; the layer means
also go to every ``report_to`` tracker (W&B, MLflow, ...) as ``bertwatch/{stat}/layer_{l}``.
"""

from __future__ import annotations

import argparse
import os
import sys

from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

import bertwatch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune_sst2 import default_model, read_sst2  # noqa: E402  (the example next to this one)

parser = argparse.ArgumentParser(description="Watch a Trainer built in a notebook.")
parser.add_argument("--glue-dir", default=os.path.join(os.getenv("BERTWATCH_DATA", "data"), "glue"))
parser.add_argument("--output-dir", default="runs/notebook")
parser.add_argument("--max-steps", type=int, default=60)
opts = parser.parse_args()

# --- cell 1: an ordinary Trainer
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForSequenceClassification, AutoTokenizer  # noqa: E402

tokenizer = AutoTokenizer.from_pretrained(default_model())
model = AutoModelForSequenceClassification.from_pretrained(default_model(), num_labels=2)


def encode(rows: list[dict]) -> Dataset:
    features = tokenizer([r["sentence"] for r in rows], truncation=True, max_length=64)
    return Dataset.from_dict({**features, "label": [int(r["label"]) for r in rows]})


trainer = Trainer(
    model=model,
    args=TrainingArguments(
        output_dir=opts.output_dir, max_steps=opts.max_steps, per_device_train_batch_size=16, learning_rate=1e-4,
        eval_strategy="steps", eval_steps=opts.max_steps // 2, logging_steps=10, save_strategy="no",
        report_to="tensorboard",
    ),
    train_dataset=encode(read_sst2(opts.glue_dir, "train", 1000)),
    eval_dataset=encode(read_sst2(opts.glue_dir, "dev", 128)),
    processing_class=tokenizer,
    data_collator=DataCollatorWithPadding(tokenizer),
)  # fmt: skip

# --- cell 2: bertwatch
watcher = bertwatch.watch(trainer, every_n_steps=20, num_probe_examples=16)

# --- cell 3: train, then look
trainer.train()
for step, grids in watcher.history:
    drift = 1 - grids["drift_cosine"]  # [layers, heads]
    layer, head = divmod(int(drift.argmax()), drift.shape[1])
    print(f"step {step:4d}: mean CLS mass {grids['cls_mass'].mean():.3f}, most drifted head {layer}-{head}")
