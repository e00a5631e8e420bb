"""Gradient statistics while fine-tuning token-classification and QA heads: the model's own loss at every probe
step (the probe batches keep the heads' label fields), and the sweep at the end."""

from __future__ import annotations

import numpy as np
import torch
import transformers as T
from datasets import Dataset

from bertwatch.callbacks import GradientImportanceCallback
from bertwatch.callbacks.ablation import AblationCallback
from tests._tiny_trainer import WORDS, tiny_tokenizer, training_args

torch.set_num_threads(1)


def _config(tokenizer, **extra) -> T.BertConfig:
    return T.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )


def _qa_dataset(tokenizer, count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "start_positions": [], "end_positions": []}
    for _ in range(count):
        question = " ".join(rng.choice(WORDS, size=3))
        context = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 10))))
        encoded = tokenizer(question, context)
        first = encoded.sequence_ids().index(1)
        start = first + int(rng.integers(0, 3))
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            rows[key].append(encoded[key])
        rows["start_positions"].append(start)
        rows["end_positions"].append(start + 1)
    return Dataset.from_dict(rows)


def _token_dataset(tokenizer, count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "labels": []}
    for _ in range(count):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 8)))]
        encoded = tokenizer(words, is_split_into_words=True)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            rows[key].append(encoded[key])
        rows["labels"].append([-100 if w is None else int(rng.integers(0, 3)) for w in encoded.word_ids()])
    return Dataset.from_dict(rows)


def _train(tmp_path, model, dataset_fn, collator, callbacks):
    tokenizer = tiny_tokenizer()
    trainer = T.Trainer(
        model=model,
        args=training_args(str(tmp_path), max_steps=4, logging_steps=2),
        train_dataset=dataset_fn(tokenizer, 24, 0),
        eval_dataset=dataset_fn(tokenizer, 10, 1),
        processing_class=tokenizer,
        data_collator=collator(tokenizer),
        callbacks=callbacks,
    )
    for callback in callbacks:
        callback.set_trainer(trainer)  # what bertwatch.watch does: the eval set comes from the Trainer
    trainer.train()


def test_question_answering_gradient_statistics_and_sweep(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = T.BertForQuestionAnswering(_config(tokenizer))
    grads = GradientImportanceCallback(every_n_steps=2, num_probe_examples=6, strict=True)
    _train(tmp_path, model, _qa_dataset, T.DataCollatorWithPadding, [grads])
    steps = [step for step, grids in grads.history if "head_importance" in grids]
    assert steps and steps[-1] == 4
    assert all(np.isfinite(grids["head_importance"]).all() for _, grids in grads.history)


def test_token_classification_gradient_statistics(tmp_path) -> None:
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = T.BertForTokenClassification(_config(tokenizer, num_labels=3))
    grads = GradientImportanceCallback(every_n_steps=2, num_probe_examples=6, strict=True)
    sweep = AblationCallback(n_resamples=30, keep_only=False, progress=False)
    _train(tmp_path, model, _token_dataset, T.DataCollatorForTokenClassification, [grads, sweep])
    steps = [step for step, grids in grads.history if "head_importance" in grids]
    assert steps and steps[-1] == 4
    result = sweep.results["uniform"]  # LABEL_0.. are not IOB tags: token accuracy
    assert result.metric == "token_accuracy" and result.config["task_type"] == "token-classification"
    evaluation = _token_dataset(tokenizer, 10, 1)
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for row in evaluation:
            logits = model(input_ids=torch.tensor([row["input_ids"]])).logits[0]
            for position, label in enumerate(row["labels"]):
                if label != -100:
                    correct += int(logits[position].argmax()) == label
                    total += 1
    assert abs(result.baseline - correct / total) < 1e-12
