"""A tiny BERT, a word-level tokenizer and a labelled toy dataset for fast Trainer tests (offline, CPU)."""

from __future__ import annotations

import random
from typing import Any

import transformers as T

from tests.support.models import bert_with_head

WORDS = (
    "the a movie film good bad great awful plot actors fun dull story was is not very it and but "
    "loved hated boring brilliant scene music long short funny sad"
).split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","]


def tiny_tokenizer() -> T.PreTrainedTokenizerBase:
    """A BERT word-piece tokenizer over a 38-token vocabulary (specials, "." and ",", toy words)."""
    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    return T.BertTokenizer(vocab=vocab)


def tiny_bert(
    tokenizer: T.PreTrainedTokenizerBase, seed: int = 0, layers: int = 2, heads: int = 4
) -> T.PreTrainedModel:
    """A randomly initialised 2-layer, 4-head BERT sequence classifier for ``tokenizer``'s vocabulary."""
    return bert_with_head(T.BertForSequenceClassification, tokenizer, layers, heads, seed=seed, num_labels=2)


def toy_texts(count: int, seed: int = 0, pairs: bool = False) -> list[dict[str, Any]]:
    """Random toy sentences with "." and "," and a label that depends on the words (good/great/... = 1)."""
    rng = random.Random(seed)
    positive = {"good", "great", "loved", "brilliant", "fun", "funny"}
    out = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        if rng.random() < 0.5:
            words.insert(rng.randint(1, len(words)), ",")
        text = " ".join(words) + " ."
        example = {"text": text, "label": int(any(w in positive for w in words))}
        if pairs:
            example["text_pair"] = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6)))
        out.append(example)
    return out


def toy_dataset(tokenizer: T.PreTrainedTokenizerBase, count: int, seed: int = 0, pairs: bool = False):
    """A ``datasets.Dataset`` of tokenized toy examples (with an unused "text" column, as real scripts have)."""
    from datasets import Dataset

    rows = toy_texts(count, seed, pairs)
    encoded = tokenizer(
        [r["text"] for r in rows], [r["text_pair"] for r in rows] if pairs else None, truncation=True, max_length=32
    )
    data = {"text": [r["text"] for r in rows], "label": [r["label"] for r in rows], **encoded}
    return Dataset.from_dict(data)


def training_args(output_dir: str, **overrides: Any) -> T.TrainingArguments:
    """Quiet, deterministic CPU TrainingArguments for a few steps."""
    values = dict(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        max_steps=6,
        learning_rate=1e-3,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        seed=7,
        data_seed=7,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    values.update(overrides)
    return T.TrainingArguments(**values)


def toy_trainer(
    output_dir: Any,
    callbacks: list,
    *,
    tokenizer: T.PreTrainedTokenizerBase | None = None,
    model: T.PreTrainedModel | None = None,
    train_size: int = 24,
    eval_size: int = 16,
    **overrides: Any,
) -> T.Trainer:
    """A ``Trainer`` of ``model`` (default: a tiny BERT for ``tokenizer``, default ``tiny_tokenizer()``) on
    ``train_size`` toy examples (seed 0), evaluating on ``eval_size`` others (seed 1), padding each batch, with
    ``callbacks`` attached as the Trainer's own and ``training_args(output_dir, **overrides)``."""
    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    return T.Trainer(
        model=model if model is not None else tiny_bert(tok),
        args=training_args(str(output_dir), **overrides),
        train_dataset=toy_dataset(tok, train_size, 0),
        eval_dataset=toy_dataset(tok, eval_size, 1),
        processing_class=tok,
        data_collator=T.DataCollatorWithPadding(tok),
        callbacks=callbacks,
    )
