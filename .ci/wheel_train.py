"""A tiny training script for the wheel check: it never imports bertwatch (``bertwatch run`` attaches it).

A randomly initialised 2-layer, 4-head BERT classifier with a word-level vocabulary written here, fine-tuned for a
few steps on toy sentences, offline and on the CPU. Usage: ``bertwatch run [OPTIONS] wheel_train.py OUTPUT_DIR``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import transformers as T
from datasets import Dataset

WORDS = "the a film good bad great dull plot was is not very it and but loved hated fun sad long".split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","]
POSITIVE = {"good", "great", "loved", "fun"}


def toy_rows(count: int, seed: int) -> dict[str, list]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) + " ." for _ in range(count)]
    return {"text": texts, "label": [int(any(w in POSITIVE for w in t.split())) for t in texts]}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    vocab = out / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + WORDS) + "\n")
    tokenizer = T.BertTokenizer(vocab_file=str(vocab))
    config = T.BertConfig(
        vocab_size=len(SPECIAL) + len(WORDS),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=0,
    )
    T.set_seed(0)
    model = T.BertForSequenceClassification(config)

    def encode(rows: dict[str, list]) -> Dataset:
        return Dataset.from_dict({**tokenizer(rows["text"], truncation=True, max_length=32), "label": rows["label"]})

    args = T.TrainingArguments(
        output_dir=str(out),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = T.Trainer(
        model=model,
        args=args,
        train_dataset=encode(toy_rows(32, seed=0)),
        eval_dataset=encode(toy_rows(16, seed=1)),
        processing_class=tokenizer,
        data_collator=T.DataCollatorWithPadding(tokenizer),
    )
    trainer.train()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
