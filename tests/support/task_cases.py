"""The seven task heads as test cases: a tiny random model, a tokenized dataset the Trainer trains on, its
collator, and a plain evaluation of the task's metric (one example at a time, heads disabled by a hand-written
hook on the self-attention module; sklearn, seqeval and plain loops, no bertwatch code)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import transformers as T
from datasets import Dataset

from tests.support.models import bert_with_head, self_attention_hooks
from tests.support.plain_metrics import normalize, plain_span, squad_f1
from tests.support.tiny_trainer import WORDS
from tests.support.tolerance import pearson_scale

LAYERS, HEADS = 2, 4
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
POSITIVE = {"good", "great", "loved", "brilliant", "fun", "funny"}

#: A CoNLL file of two sentences (token, POS, chunk, NER tag), tags of two entity types.
CONLL_SAMPLE = """-DOCSTART- -X- -X- O

the DT B-NP O
movie NN I-NP B-PER
was VBD B-VP I-PER
good JJ B-ADJP O

a DT B-NP B-LOC
film NN I-NP I-LOC
.  . O O
"""


@dataclass(frozen=True)
class Case:
    """One head: its model class and config, the Trainer's data and collator, the sweep's task type and metric,
    the examples the sweep scores when they are not the eval set, and the plain metric."""

    name: str
    cls: type
    config: dict[str, Any]
    dataset: Callable[[Any, int, int], Dataset]
    collator: Callable[[Any], Any]
    task_type: str
    metric: str
    plain: Callable[..., float]
    ablation_rows: Callable[[Any], list[dict[str, Any]]] | None = None
    #: Other metrics of the baseline and their plain evaluations.
    also: tuple[tuple[str, Callable[..., float]], ...] = ()
    #: The magnitude a float32 rounding of the model's outputs takes in the metric (``tests.support.tolerance``), from
    #: the plain evaluation's own outputs; None: the metric is of the size of its inputs.
    scale: Callable[..., float] | None = None


def model_for(case: Case, tokenizer: Any, seed: int = 1) -> T.PreTrainedModel:
    # large random weights (initializer_range 0.3): every head changes the outputs
    return bert_with_head(case.cls, tokenizer, LAYERS, HEADS, seed=seed, initializer_range=0.3, **case.config)


@dataclass(frozen=True)
class Off:
    """The heads to disable ``[layers, heads]`` and how: "zero" (Michel: the head's context is zero) or "uniform"
    (Kovaleva: the head attends uniformly to every token; the examples here are never padded)."""

    mask: np.ndarray
    mode: str = "zero"


@contextlib.contextmanager
def disabled(model: T.PreTrainedModel, off: Off) -> Iterator[None]:
    """Disable the heads of ``off`` with forward hooks on each layer's self-attention, whose first output is the
    context ``[batch, T, heads * size]``; a uniform head's context is the mean of its value vectors over all
    tokens (its own value projection of the layer's input)."""

    def hook(layer: int):
        keep = torch.as_tensor(~off.mask[layer], dtype=torch.float32)

        def replace(module, args, kwargs, output):
            context = output[0]
            shape = context.shape
            heads = context.reshape(*shape[:-1], len(keep), -1)
            if off.mode == "zero":
                new = heads * keep[:, None]
            else:
                hidden = args[0] if args else kwargs["hidden_states"]
                values = module.value(hidden).reshape(heads.shape).mean(-3, keepdim=True).expand_as(heads)
                new = torch.where(keep[:, None].bool(), heads, values)
            return (new.reshape(shape), *output[1:])

        return replace

    with self_attention_hooks(model, hook):
        yield


def zeroed(model: T.PreTrainedModel, mask: np.ndarray) -> contextlib.AbstractContextManager:
    """Zero the context of the heads marked in ``mask`` ``[layers, heads]`` (Michel's disabling)."""
    return disabled(model, Off(mask))


def _forward(model: T.PreTrainedModel, off: Off, **inputs: Any) -> Any:
    with torch.no_grad(), disabled(model, off):
        return model(**{k: torch.tensor([v]) for k, v in inputs.items()})


def _ids(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("input_ids", "token_type_ids") if k in row}


def plain_metric(case: Case, model, tokenizer, rows: list[dict[str, Any]], off: Off) -> float:
    return case.plain(model, tokenizer, rows, off)


def metric_scale(case: Case, model, tokenizer, rows: list[dict[str, Any]], off: Off) -> float:
    """The ``scale`` of ``tests.support.tolerance.assert_float32_close`` for the case's metric under ``off``."""
    return 1.0 if case.scale is None else case.scale(model, tokenizer, rows, off)


# ------------------------------------------------------------------------------------------------ sequence level


def _sentences(tokenizer, count: int, seed: int) -> tuple[list[list[str]], dict[str, list]]:
    rng = np.random.default_rng(seed)
    words = [[str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 9)))] for _ in range(count)]
    return words, dict(tokenizer([" ".join(w) for w in words]))


def sequence_dataset(tokenizer, count: int, seed: int) -> Dataset:
    words, encoded = _sentences(tokenizer, count, seed)
    return Dataset.from_dict({**encoded, "label": [int(bool(POSITIVE & set(w))) for w in words]})


def regression_dataset(tokenizer, count: int, seed: int) -> Dataset:
    words, encoded = _sentences(tokenizer, count, seed)
    return Dataset.from_dict({**encoded, "label": [len(POSITIVE & set(w)) / 2 + len(w) / 10 for w in words]})


def multilabel_dataset(tokenizer, count: int, seed: int) -> Dataset:
    words, encoded = _sentences(tokenizer, count, seed)
    groups = (POSITIVE, {"bad", "awful", "dull", "boring"}, {"movie", "film", "plot"})
    return Dataset.from_dict({**encoded, "labels": [[float(bool(g & set(w))) for g in groups] for w in words]})


def _accuracy(model, tokenizer, rows, mask) -> float:
    from sklearn.metrics import accuracy_score

    preds = [int(_forward(model, mask, **_ids(r)).logits[0].argmax()) for r in rows]
    return float(accuracy_score([r["label"] for r in rows], preds))


def _regression_preds(model, rows, mask) -> np.ndarray:
    return np.array([float(_forward(model, mask, **_ids(r)).logits[0, 0]) for r in rows])


def _pearson_scale(model, tokenizer, rows, mask) -> float:
    return pearson_scale(_regression_preds(model, rows, mask))


def _pearson(model, tokenizer, rows, mask) -> float:
    preds = _regression_preds(model, rows, mask)
    gold = np.array([r["label"] for r in rows], dtype=np.float64)
    x, y = preds - preds.mean(), gold - gold.mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))


def _micro_f1(model, tokenizer, rows, mask) -> float:
    from sklearn.metrics import f1_score

    preds = [(_forward(model, mask, **_ids(r)).logits[0] > 0).int().tolist() for r in rows]
    return float(f1_score([[int(v) for v in r["labels"]] for r in rows], preds, average="micro"))


# ------------------------------------------------------------------------------------------------ tokens


def token_dataset(tokenizer, count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "labels": []}
    for _ in range(count):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 8)))]
        encoded = tokenizer(words, is_split_into_words=True)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            rows[key].append(encoded[key])
        previous, labels = None, []
        for word in encoded.word_ids():
            labels.append(-100 if word is None or word == previous else int(rng.integers(0, len(TAGS))))
            previous = word
        rows["labels"].append(labels)
    return Dataset.from_dict(rows)


def _entity_f1(model, tokenizer, rows, mask) -> float:
    from seqeval.metrics import f1_score

    y_true, y_pred = [], []
    for row in rows:
        logits = _forward(model, mask, **_ids(row)).logits[0]
        kept = [i for i, label in enumerate(row["labels"]) if label != -100]
        y_true.append([TAGS[row["labels"][i]] for i in kept])
        y_pred.append([TAGS[int(logits[i].argmax())] for i in kept])
    return float(f1_score(y_true, y_pred))


# ------------------------------------------------------------------------------------------------ QA


def squad_rows(count: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        context = " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(5, 12))))
        words = context.split()
        start = int(rng.integers(0, len(words) - 1))
        answer = " ".join(words[start : start + int(rng.integers(1, 3))])
        rows.append(
            {
                "question": " ".join(str(w) for w in rng.choice(WORDS, size=3)),
                "context": context,
                "answers": {"text": [answer], "answer_start": [context.index(answer)]},
            }
        )
    return rows


def tokenized_squad(tokenizer, count: int, seed: int) -> Dataset:
    """The SQuAD rows as the Trainer trains on them: input ids and the answer's first and last token."""
    rows: dict[str, list] = {k: [] for k in ("input_ids", "token_type_ids", "attention_mask")}
    rows.update(start_positions=[], end_positions=[])
    for row in squad_rows(count, seed):
        encoded = tokenizer(row["question"], row["context"], return_offsets_mapping=True)
        first = row["answers"]["answer_start"][0]
        last = first + len(row["answers"]["text"][0])
        inside = [
            i
            for i, (o, s) in enumerate(zip(encoded["offset_mapping"], encoded.sequence_ids()))
            if s == 1 and o[0] < last and o[1] > first
        ]
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            rows[key].append(encoded[key])
        rows["start_positions"].append(inside[0])
        rows["end_positions"].append(inside[-1])
    return Dataset.from_dict(rows)


def _squad_f1(model, tokenizer, rows, mask) -> float:
    return _squad(model, tokenizer, rows, mask, exact=False)


def _squad(model, tokenizer, rows, mask, exact: bool = True) -> float:
    scores = []
    for row in rows:
        encoded = tokenizer(row["question"], row["context"], return_offsets_mapping=True)
        offsets = encoded.pop("offset_mapping")
        out = _forward(model, mask, **_ids(dict(encoded)))
        allowed = [s == 1 for s in encoded.sequence_ids()]
        s, e = plain_span(out.start_logits[0].tolist(), out.end_logits[0].tolist(), allowed, 30)
        text = row["context"][offsets[s][0] : offsets[e][1]]
        gold = row["answers"]["text"]
        scores.append(max(float(normalize(text) == normalize(g)) if exact else squad_f1(text, g) for g in gold))
    return float(np.mean(scores))


# ------------------------------------------------------------------------------------------------ choices, MLM


def choice_dataset(tokenizer, count: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "label": []}
    for _ in range(count):
        stem = " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 5))))
        choices = [" ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 4)))) for _ in range(3)]
        encoded = tokenizer([stem] * 3, choices)
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            rows[key].append(encoded[key])
        rows["label"].append(int(rng.integers(0, 3)))
    return Dataset.from_dict(rows)


def _choice_accuracy(model, tokenizer, rows, mask) -> float:
    correct = 0
    for row in rows:
        picks = []
        for ids, types in zip(row["input_ids"], row["token_type_ids"]):  # each choice alone: [1, 1, T]
            picks.append(float(_forward(model, mask, input_ids=[ids], token_type_ids=[types]).logits[0, 0]))
        correct += int(np.argmax(picks)) == row["label"]
    return correct / len(rows)


def mlm_dataset(tokenizer, count: int, seed: int) -> Dataset:
    """Tokenized texts without labels, as a masked-LM script hands them to its random-masking collator."""
    _, encoded = _sentences(tokenizer, count, seed)
    return Dataset.from_dict(encoded)


def seeded_masks(tokenizer, ids: list[int], number: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """The documented fixed mask of example ``number``: each non-special token masked when a draw from
    ``torch.Generator().manual_seed(seed * 1_000_003 + number)`` is below 0.15 (the first maskable one if none)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + number)
    draws = torch.rand((1, len(ids)), generator=g)[0].tolist()
    specials = set(tokenizer.all_special_ids)
    chosen = [d < 0.15 and t not in specials for t, d in zip(ids, draws)]
    if not any(chosen):
        chosen[next(i for i, t in enumerate(ids) if t not in specials)] = True
    masked = [tokenizer.mask_token_id if c else t for t, c in zip(ids, chosen)]
    return masked, [t if c else -100 for t, c in zip(ids, chosen)]


def _mlm_loss(model, tokenizer, rows, mask) -> float:
    total, count = 0.0, 0
    for number, row in enumerate(rows):
        masked, labels = seeded_masks(tokenizer, row["input_ids"], number)
        logits = _forward(model, mask, input_ids=masked, token_type_ids=row["token_type_ids"]).logits[0].double()
        for position, label in enumerate(labels):
            if label != -100:
                total -= float(torch.log_softmax(logits[position], -1)[label])
                count += 1
    return total / count


def _pad(tokenizer):
    return T.DataCollatorWithPadding(tokenizer)


CASES = (
    Case("sequence-classification", T.BertForSequenceClassification, {"num_labels": 2}, sequence_dataset, _pad,
         "sequence-classification", "accuracy", _accuracy),
    Case("regression", T.BertForSequenceClassification, {"num_labels": 1}, regression_dataset, _pad, "regression",
         "pearson", _pearson, scale=_pearson_scale),
    Case("multi-label", T.BertForSequenceClassification,
         {"num_labels": 3, "problem_type": "multi_label_classification"}, multilabel_dataset, _pad, "multi-label",
         "micro_f1", _micro_f1),
    Case("token-classification", T.BertForTokenClassification,
         {"id2label": dict(enumerate(TAGS)), "label2id": {t: i for i, t in enumerate(TAGS)}}, token_dataset,
         T.DataCollatorForTokenClassification, "token-classification", "entity_f1", _entity_f1),
    Case("question-answering", T.BertForQuestionAnswering, {}, tokenized_squad, _pad, "question-answering",
         "exact_match", _squad, ablation_rows=lambda tokenizer: squad_rows(20, 1), also=(("squad_f1", _squad_f1),)),
    Case("multiple-choice", T.BertForMultipleChoice, {}, choice_dataset, T.DataCollatorForMultipleChoice,
         "multiple-choice", "accuracy", _choice_accuracy),
    Case("masked-lm", T.BertForMaskedLM, {}, mlm_dataset,
         lambda tokenizer: T.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15), "masked-lm",
         "mlm_loss", _mlm_loss),
)  # fmt: skip
