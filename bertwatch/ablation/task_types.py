"""What the sweep scores for each task head: the task type (refused at setup when not understood), the examples
of token classification and extractive QA as token ids and labels, the labels the importance pass needs, and the
task's metric as per-example parts (``bertwatch.data.task_metrics``)."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from bertwatch.ablation.inputs import example_rows, prepare_examples, warn_cut, was_cut
from bertwatch.ablation.settings import AblationSettings
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.data.task_metrics import (
    IGNORE,
    best_span,
    is_iob,
    multilabel_parts,
    squad_scores,
    token_classification_parts,
)
from bertwatch.heads.layout import real_tokens
from bertwatch.heads.loading import max_input_length
from bertwatch.heads.task_heads import example_mask, head_kind, label_names, original_ids, problem_type

__all__ = [
    "TASK_TYPES",
    "SweepExamples",
    "Task",
    "check_task_head",
    "label_batch",
    "prepare_task_examples",
    "resolve_task",
    "sweep_examples",
    "task_parts",
]

#: Task types the sweep scores, and their aliases on the command line.
TASK_TYPES = (
    "sequence-classification",
    "regression",
    "multi-label",
    "token-classification",
    "question-answering",
    "multiple-choice",
    "masked-lm",
)
ALIASES = {"ner": "token-classification", "qa": "question-answering", "squad": "question-answering", "mlm": "masked-lm"}
#: A task type and the head kind it needs.
_HEAD_OF = {
    "sequence-classification": "sequence-classification",
    "regression": "sequence-classification",
    "multi-label": "sequence-classification",
    "token-classification": "token-classification",
    "question-answering": "question-answering",
    "multiple-choice": "multiple-choice",
    "masked-lm": "masked-lm",
}


@dataclass(frozen=True)
class Task:
    """The task type, the GLUE task behind a sequence classifier (or None), the label names of a token
    classifier, and QA's longest answer in tokens."""

    type: str
    glue: str | None = None
    label_names: tuple[str, ...] = ()
    max_answer_length: int = 30
    #: Masked LM: the share of tokens masked (fixed, seeded masks) and the seed.
    mask_probability: float = 0.15
    seed: int = 0

    @property
    def regression(self) -> bool:
        return self.type == "regression"


@dataclass
class TaskExamples:
    """Token ids per example, the labels array the sweep keeps, and what the metric reads besides the outputs."""

    features: list[dict[str, Any]]
    labels: np.ndarray
    references: list[Any] = field(default_factory=list)
    #: How many examples were cut to the length measured (QA: contexts cut to fit, by design).
    cut: int = 0


def _sequence_type(model: nn.Module) -> str:
    problem = problem_type(model)
    return {"regression": "regression", "multi_label_classification": "multi-label"}.get(
        problem, "sequence-classification"
    )


def resolve_task(model: nn.Module, task: str | None) -> Task:
    """The task the sweep scores, from the model's head and ``task`` (a GLUE name or a task type); clear errors
    for a head the sweep cannot score or a task that does not fit the head."""
    name, kind = type(model).__name__, head_kind(model)
    if kind not in set(_HEAD_OF.values()):
        raise ValueError(
            f"{name} has no sequence-classification head (nor a token-classification, question-answering, "
            "multiple-choice or masked-LM one); the sweep scores a fine-tuned task model. Load the checkpoint with "
            "its AutoModelFor... class (after fine-tuning it on the task)."
        )
    wanted = ALIASES.get(str(task).lower(), str(task).lower()) if task is not None else None
    if wanted is not None and wanted not in TASK_TYPES:
        from bertwatch.data.glue import glue_task

        glue_task(task)  # a GLUE name, or a clear error listing them
        return (
            Task(_sequence_type(model), glue=task) if kind == "sequence-classification" else _refuse(name, kind, task)
        )
    actual = _sequence_type(model) if kind == "sequence-classification" else kind
    if wanted is not None and wanted != actual:
        _refuse(name, actual, wanted)
    if actual == "token-classification":
        return Task(actual, label_names=label_names(model.config))
    return Task(actual)


def _refuse(name: str, actual: str | None, wanted: str) -> Task:
    raise ValueError(
        f"task {wanted!r} does not fit {name}, a {actual} model: pass the task type of its head "
        f"({actual}) or load the checkpoint with the head the task needs"
    )


def _accepts(model: nn.Module) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _token_examples(model: nn.Module, rows: list[dict], tokenizer: Any, task: Task, max_length: int) -> TaskExamples:
    """Words and tags (``tokens`` + ``tags``/``ner_tags``/``labels``) tokenised, the first piece of each word
    labelled and every other piece -100; or rows that already hold ``input_ids`` and aligned ``labels``."""
    keep_types = "token_type_ids" in _accepts(model)
    label2id = {n: i for i, n in enumerate(task.label_names)}
    features, labels, cut = [], [], 0
    if "input_ids" in rows[0]:
        for row in rows:
            real = real_tokens(row, ("input_ids", "token_type_ids", "labels"))
            feature = {"input_ids": [int(t) for t in real["input_ids"]]}
            if keep_types and real.get("token_type_ids") is not None:
                feature["token_type_ids"] = [int(t) for t in real["token_type_ids"]]
            features.append(feature)
            labels.append([int(v) for v in real["labels"]])
    else:
        if tokenizer is None:
            raise ValueError("the examples are words: pass the tokenizer")
        length = max_input_length(model, tokenizer, max_length)
        for number, row in enumerate(rows):
            words = [str(w) for w in row["tokens"]]
            tags = next((row[k] for k in ("tags", "ner_tags", "labels") if row.get(k) is not None), None)
            if tags is None or len(tags) != len(words):
                raise ValueError(f"example {number} needs one tag per word ('tokens' and 'tags')")
            ids = [label2id.get(t, -1) if isinstance(t, str) else int(t) for t in tags]
            if any(i < 0 or i >= len(task.label_names) for i in ids):
                unknown = sorted({str(t) for t, i in zip(tags, ids) if i < 0 or i >= len(task.label_names)})
                raise ValueError(f"tags {unknown[:5]} are not among the model's labels {list(task.label_names)}")
            encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=length)
            cut += was_cut(
                encoded["input_ids"],
                length,
                lambda words=words: tokenizer(words, is_split_into_words=True, truncation=False, verbose=False),
            )
            previous, aligned = None, []
            for word in encoded.word_ids():
                aligned.append(IGNORE if word is None or word == previous else ids[word])
                previous = word
            feature = {"input_ids": list(encoded["input_ids"])}
            if keep_types and "token_type_ids" in encoded:
                feature["token_type_ids"] = list(encoded["token_type_ids"])
            features.append(feature)
            labels.append(aligned)
        warn_cut(cut, len(rows), length, max_length)
    return TaskExamples(features, _ragged_labels(labels), cut=cut)


def _qa_examples(model: nn.Module, rows: list[dict], tokenizer: Any, max_length: int) -> TaskExamples:
    """SQuAD-style rows (``question``, ``context``, ``answers: {text, answer_start}``): question and context
    tokenised together, the context cut to fit; the gold span's tokens are the importance pass's labels (the
    [CLS] token when the answer was cut off) and the gold texts are what the metric compares with."""
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):  # MistralCommonBackend has no is_fast
        raise ValueError("question answering needs the model's fast tokenizer (for character offsets)")
    length = max_input_length(model, tokenizer, max_length)
    keep_types = "token_type_ids" in _accepts(model)
    features, labels, references = [], [], []
    cut = contexts_cut = 0
    for number, row in enumerate(rows):
        if not all(k in row for k in ("question", "context", "answers")):
            raise ValueError(f"example {number} needs 'question', 'context' and 'answers' (SQuAD layout)")
        answers = row["answers"]
        texts = [str(t) for t in answers.get("text", [])]
        starts = [int(s) for s in answers.get("answer_start", [])]
        encoded = tokenizer(
            str(row["question"]),
            str(row["context"]),
            truncation="only_second",
            max_length=length,
            return_offsets_mapping=True,
        )
        whole = (str(row["question"]), str(row["context"]))
        contexts_cut += was_cut(
            encoded["input_ids"], length, lambda whole=whole: tokenizer(*whole, truncation=False, verbose=False)
        )
        sequence = encoded.sequence_ids()
        offsets = [tuple(o) if s == 1 else None for o, s in zip(encoded["offset_mapping"], sequence)]
        span = (0, 0)
        if texts and starts:
            first, last = starts[0], starts[0] + len(texts[0])
            inside = [i for i, o in enumerate(offsets) if o is not None and o[0] < last and o[1] > first]
            if inside:
                span = (inside[0], inside[-1])
            else:
                cut += 1
        feature = {"input_ids": list(encoded["input_ids"])}
        if keep_types and "token_type_ids" in encoded:
            feature["token_type_ids"] = list(encoded["token_type_ids"])
        features.append(feature)
        labels.append(span)
        references.append((str(row["context"]), offsets, texts))
    if cut:
        warnings.warn(
            f"bertwatch: {cut} of {len(rows)} question-answering examples have no gold answer within their first "
            f"{length} tokens (contexts are cut there, without a document stride), so every configuration scores "
            "them as misses; raise max_length (SQuAD models usually take 384) to score them",
            BertWatchWarning,
            stacklevel=3,
        )
    return TaskExamples(features, np.asarray(labels, dtype=np.int64), references, cut=contexts_cut)


def _choice_examples(model: nn.Module, rows: list[dict], tokenizer: Any, max_length: int) -> TaskExamples:
    """Multiple choice: rows with ``input_ids`` ``[choices][T]`` and a ``label``, or a ``question`` (or
    ``context``) with its ``choices`` texts and the ``label`` of the right one, each choice tokenised as a pair."""
    keep_types = "token_type_ids" in _accepts(model)
    features, labels, cut, length = [], [], 0, None
    for number, row in enumerate(rows):
        label = row.get("label", row.get("labels"))
        if label is None:
            raise ValueError(f"example {number} has no 'label' (the index of the right choice)")
        if "input_ids" in row:
            real = real_tokens(row, ("input_ids", "token_type_ids"))
            feature = {"input_ids": [[int(t) for t in c] for c in real["input_ids"]]}
            if keep_types and real.get("token_type_ids") is not None:
                feature["token_type_ids"] = [[int(t) for t in c] for c in real["token_type_ids"]]
        else:
            if tokenizer is None or "choices" not in row:
                raise ValueError("multiple-choice examples need 'input_ids', or 'choices' texts and the tokenizer")
            stem = str(row.get("question", row.get("context", "")))
            choices = [str(c) for c in row["choices"]]
            length = max_input_length(model, tokenizer, max_length)
            encoded = tokenizer([stem] * len(choices), choices, truncation=True, max_length=length)
            cut += any(
                was_cut(ids, length, lambda c=c: tokenizer(stem, c, truncation=False, verbose=False))
                for ids, c in zip(encoded["input_ids"], choices)
            )
            feature = {"input_ids": [list(x) for x in encoded["input_ids"]]}
            if keep_types and "token_type_ids" in encoded:
                feature["token_type_ids"] = [list(x) for x in encoded["token_type_ids"]]
        if features and len(feature["input_ids"]) != len(features[0]["input_ids"]):
            raise ValueError("every multiple-choice example must have the same number of choices")
        features.append(feature)
        labels.append(int(label))
    if length is not None:
        warn_cut(cut, len(rows), length, max_length)
    return TaskExamples(features, np.asarray(labels, dtype=np.int64), cut=cut)


def _mlm_examples(model: nn.Module, rows: list[dict], tokenizer: Any, task: Task, max_length: int) -> TaskExamples:
    """Masked LM: texts (``text``) or ``input_ids``, each with a fixed, seeded mask (:func:`example_mask`, seeded by
    ``task.seed`` and the example's position), so every configuration is scored on the same masked tokens."""
    mask_id = None if tokenizer is None else tokenizer.mask_token_id
    if mask_id is None:
        raise ValueError("masked-LM scoring needs the model's tokenizer (with a mask token)")
    specials = list(tokenizer.all_special_ids)
    length = max_input_length(model, tokenizer, max_length)
    keep_types = "token_type_ids" in _accepts(model)
    features, labels, cut = [], [], 0
    for number, row in enumerate(rows):
        if "input_ids" in row:
            real = real_tokens(row, ("input_ids", "token_type_ids", "labels"))
            ids, types = original_ids(real["input_ids"], real.get("labels")), real.get("token_type_ids")
        elif "text" in row:
            text = str(row["text"])
            encoded = tokenizer(text, truncation=True, max_length=length)
            cut += was_cut(
                encoded["input_ids"], length, lambda text=text: tokenizer(text, truncation=False, verbose=False)
            )
            ids, types = list(encoded["input_ids"]), encoded.get("token_type_ids")
        else:
            raise ValueError(f"example {number} has neither 'text' nor 'input_ids'")
        masked, target = example_mask(ids, number, mask_id, specials, task.mask_probability, task.seed)
        if all(t == IGNORE for t in target):
            raise ValueError(f"example {number} has no token that can be masked (only special tokens)")
        feature = {"input_ids": masked, "labels": target}
        if keep_types and types is not None:
            feature["token_type_ids"] = [int(t) for t in types]
        features.append(feature)
        labels.append(target)
    warn_cut(cut, len(rows), length, max_length)
    return TaskExamples(features, _ragged_labels(labels), cut=cut)


def _ragged_labels(labels: list[list[int]]) -> np.ndarray:
    """Per-token label rows of different lengths as one ``[n, longest]`` array, IGNORE after each row's end."""
    array = np.full((len(labels), max(len(x) for x in labels)), IGNORE, dtype=np.int64)
    for i, row in enumerate(labels):
        array[i, : len(row)] = row
    return array


def prepare_task_examples(
    model: nn.Module, examples: Any, tokenizer: Any, task: Task, max_length: int
) -> TaskExamples | None:
    """Token classification and QA examples; None for the sequence-level tasks (``inputs.prepare_examples``)."""
    if task.type not in ("token-classification", "question-answering", "multiple-choice", "masked-lm"):
        return None
    rows = example_rows(examples)
    if not rows:
        raise ValueError("the evaluation set is empty: the sweep needs labelled examples to score each configuration")
    if task.type == "token-classification":
        return _token_examples(model, rows, tokenizer, task, max_length)
    if task.type == "multiple-choice":
        return _choice_examples(model, rows, tokenizer, max_length)
    if task.type == "masked-lm":
        return _mlm_examples(model, rows, tokenizer, task, max_length)
    return _qa_examples(model, rows, tokenizer, max_length)


def label_batch(task_type: str, labels: np.ndarray, length: int, device: Any) -> dict[str, torch.Tensor]:
    """The label fields of one batch for the model's loss: ``labels`` (cut to the batch's ``length`` for token
    labels), or QA's ``start_positions``/``end_positions``."""
    if task_type == "question-answering":
        return {
            "start_positions": torch.as_tensor(labels[:, 0], device=device),
            "end_positions": torch.as_tensor(labels[:, 1], device=device),
        }
    if task_type in ("token-classification", "masked-lm"):
        return {"labels": torch.as_tensor(np.ascontiguousarray(labels[:, :length]), device=device).long()}
    tensor = torch.as_tensor(labels, device=device)
    return {"labels": tensor.float() if task_type in ("regression", "multi-label") else tensor.long()}


def task_parts(task: Task, labels: np.ndarray, references: Sequence[Any]):
    """``(metric type, parts)``: ``parts(outputs) -> [n, k]`` per-example rows for ``ADDITIVE_METRICS[type]``;
    None for the tasks scored by the GLUE / accuracy path."""
    if task.type == "multi-label":
        return "multi-label", lambda outputs: multilabel_parts(outputs, labels)
    if task.type == "token-classification":
        width = labels.shape[1]
        kind = "token-classification" if is_iob(task.label_names) else "token-accuracy"

        def tokens(outputs: np.ndarray) -> np.ndarray:
            return token_classification_parts(np.asarray(outputs)[:, :width].argmax(-1), labels, task.label_names)

        return kind, tokens
    if task.type == "question-answering":

        def spans(outputs: np.ndarray) -> np.ndarray:
            rows = []
            for logits, (context, offsets, answers) in zip(np.asarray(outputs), references):
                allowed = np.array([o is not None for o in offsets] + [False] * (len(logits) - len(offsets)))
                first, last = best_span(logits[:, 0], logits[:, 1], allowed, task.max_answer_length)
                text = context[offsets[first][0] : offsets[last][1]] if first >= 0 else ""
                rows.append((*squad_scores(text, answers), 1.0))
            return np.asarray(rows, dtype=np.float64)

        return "question-answering", spans
    if task.type == "masked-lm":
        counts = (labels != IGNORE).sum(1).astype(np.float64)

        def nll(outputs: np.ndarray) -> np.ndarray:
            return np.stack([np.asarray(outputs, dtype=np.float64)[..., 0].sum(1), counts], axis=1)

        return "masked-lm", nll
    return None


def check_task_head(model: nn.Module, task: str | None) -> tuple[bool, int]:
    """(regression, number of outputs); clear errors for models the sweep cannot score and for a GLUE task whose
    labels do not fit the head."""
    resolved = resolve_task(model, task)
    num_labels = int(model.config.num_labels)
    if resolved.glue is not None:
        from bertwatch.data.glue import glue_task

        spec = glue_task(resolved.glue)
        if spec.num_labels != num_labels or spec.is_regression != resolved.regression:
            raise ValueError(
                f"task {spec.name!r} has {spec.num_labels} label{'s' if spec.num_labels != 1 else ''}"
                f"{' (regression)' if spec.is_regression else ''}, but the model's head has {num_labels} output"
                f"{'s' if num_labels != 1 else ''}: was this checkpoint fine-tuned on {spec.name}?"
            )
    return resolved.regression, num_labels


def _check_label_range(labels: np.ndarray, regression: bool, num_labels: int) -> None:
    if regression:
        if not np.all(np.isfinite(labels)):
            raise ValueError("regression labels must be finite numbers")
        return
    bad = labels[(labels < 0) | (labels >= num_labels)]
    if bad.size:
        raise ValueError(
            f"labels {sorted(set(bad.tolist()))[:5]} are outside the model's {num_labels} classes; "
            "do the task's labels match the model?"
        )


class SweepExamples(NamedTuple):
    """The sweep's examples: tokenised, with their labels (and references for QA) and the task they are scored as."""

    task: Task
    regression: bool
    features: list[dict[str, Any]]
    labels: np.ndarray
    references: list
    cut: int  # examples cut to the length measured (warned once, ``inputs.warn_cut``)


def sweep_examples(model: nn.Module, examples: Any, tokenizer: Any, s: AblationSettings) -> SweepExamples:
    """The examples tokenised for the task the model's head is scored as; raises the refusals of a head, task or
    example layout the sweep cannot score (``AblationCallback`` runs it on the first examples at
    ``on_train_begin``)."""
    task = dataclasses.replace(resolve_task(model, s.task), max_answer_length=s.max_answer_length, seed=s.seed)
    regression, num_labels = check_task_head(model, s.task)
    found = prepare_task_examples(model, examples, tokenizer, task, s.max_length)
    if found is not None:
        return SweepExamples(task, regression, found.features, found.labels, found.references, found.cut)
    features, labels, cut = prepare_examples(model, examples, tokenizer, s.max_length, regression)
    if task.type != "multi-label":
        _check_label_range(labels, regression, num_labels)
    return SweepExamples(task, regression, features, labels, [], cut)
