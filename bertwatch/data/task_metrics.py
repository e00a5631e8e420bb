"""Metrics of the non-GLUE task heads, as per-example parts whose sums give the metric.

Every metric here is ``combine(Σ_i parts_i)`` of per-example rows ``parts [n, k]`` (counts of correct entities,
exact-match scores, ...), so a bootstrap resample with draw counts ``w`` is ``combine(w @ parts)``: exact and
vectorised. Definitions: entity F1 as seqeval's default (conlleval) chunking, micro-averaged over entities; token
accuracy over labelled tokens; SQuAD's exact match and token F1 after its answer normalisation, best over the
gold answers; micro-F1 over every (example, label) decision for multi-label; masked-LM loss over masked tokens and
its exponential, the pseudo-perplexity.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AdditiveMetric",
    "IGNORE",
    "best_span",
    "entities",
    "is_iob",
    "multilabel_parts",
    "squad_normalize",
    "squad_scores",
    "token_classification_parts",
    "ADDITIVE_METRICS",
]

IGNORE = -100


@dataclass(frozen=True)
class AdditiveMetric:
    """A metric ``combine(sums)`` of the column sums of per-example ``parts``; ``combine`` maps ``[..., k]`` to
    ``[...]``."""

    name: str
    column: Callable[[np.ndarray], np.ndarray]
    greater_is_better: bool = True

    def __call__(self, sums: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.column(np.asarray(sums, dtype=np.float64))


def _ratio(num: int, den: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda s: np.where(s[..., den] > 0, s[..., num] / np.where(s[..., den] > 0, s[..., den], 1), np.nan)


def _f1(correct: int, predicted: int, gold: int) -> Callable[[np.ndarray], np.ndarray]:
    def f1(s: np.ndarray) -> np.ndarray:
        den = s[..., predicted] + s[..., gold]
        return np.where(den > 0, 2 * s[..., correct] / np.where(den > 0, den, 1), 0.0)

    return f1


def _micro_f1(s: np.ndarray) -> np.ndarray:
    den = 2 * s[..., 0] + s[..., 1] + s[..., 2]
    return np.where(den > 0, 2 * s[..., 0] / np.where(den > 0, den, 1), 0.0)


#: Per task type: the metrics over its parts' columns, the primary one first.
ADDITIVE_METRICS: dict[str, tuple[AdditiveMetric, ...]] = {
    # parts: correct entities, predicted entities, gold entities, correct tokens, labelled tokens
    "token-classification": (
        AdditiveMetric("entity_f1", _f1(0, 1, 2)),
        AdditiveMetric("entity_precision", _ratio(0, 1)),
        AdditiveMetric("entity_recall", _ratio(0, 2)),
        AdditiveMetric("token_accuracy", _ratio(3, 4)),
    ),
    # parts: token accuracy only (tags that are not IOB entities)
    "token-accuracy": (AdditiveMetric("token_accuracy", _ratio(3, 4)),),
    # parts: exact match, F1, 1
    "question-answering": (AdditiveMetric("exact_match", _ratio(0, 2)), AdditiveMetric("squad_f1", _ratio(1, 2))),
    # parts: true positives, false positives, false negatives
    "multi-label": (AdditiveMetric("micro_f1", lambda s: _micro_f1(s)),),
    # parts: summed negative log-likelihood of the masked tokens, their number
    "masked-lm": (
        AdditiveMetric("mlm_loss", _ratio(0, 1), greater_is_better=False),
        AdditiveMetric("pseudo_perplexity", lambda s: np.exp(_ratio(0, 1)(s)), greater_is_better=False),
    ),
}


# ------------------------------------------------------------------------------------------ entities (IOB)


def is_iob(tags: Sequence[str]) -> bool:
    """Whether every tag is "O" or a prefix B-/I-/E-/S-/L-/U- and a type: entity F1 then means something."""
    return bool(tags) and all(t == "O" or re.match(r"^[BIESLU]-.+", t) for t in tags)


def _type(tag: str) -> str:
    return tag[1:].split("-", maxsplit=1)[-1] or "_"


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag not in ("O", ".") and prev_type != type_


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The (type, first, last) chunks of one sentence's tags, by conlleval's rules (an I- after O opens one)."""
    chunks, prev_tag, prev_type, begin = set(), "O", "", 0
    for i, chunk in enumerate([*tags, "O"]):
        tag, type_ = chunk[0], _type(chunk)
        if _ends(prev_tag, tag, prev_type, type_):
            chunks.add((prev_type, begin, i - 1))
        if _starts(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def token_classification_parts(predictions: np.ndarray, labels: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """``[n, 5]``: correct, predicted and gold entities, correct and labelled tokens, per example.

    ``predictions``/``labels``: tag ids ``[n, T]``; positions labelled -100 (special tokens, sub-word
    continuations, padding) are left out before chunking, so an entity is read off the words' first pieces."""
    out = np.zeros((len(labels), 5))
    for i, (pred, gold) in enumerate(zip(np.asarray(predictions), np.asarray(labels))):
        keep = gold != IGNORE
        p = [names[int(t)] for t in pred[keep]]
        g = [names[int(t)] for t in gold[keep]]
        predicted, true = entities(p), entities(g)
        out[i] = (len(predicted & true), len(predicted), len(true), sum(a == b for a, b in zip(p, g)), len(g))
    return out


# ------------------------------------------------------------------------------------------ SQuAD


def squad_normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, gold: str) -> float:
    p, g = squad_normalize(prediction).split(), squad_normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """(exact match, F1) of one predicted answer, each the best over the gold ``answers`` (SQuAD v1.1)."""
    if not answers:
        answers = [""]
    exact = max(float(squad_normalize(prediction) == squad_normalize(a)) for a in answers)
    return exact, max(_token_f1(prediction, a) for a in answers)


def best_span(
    start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray, max_answer_length: int = 30
) -> tuple[int, int]:
    """The span (first, last token) with the largest ``start + end`` logit among allowed tokens (the context),
    ``first <= last < first + max_answer_length``; ties go to the earliest span. (-1, -1) when nothing is allowed."""
    start_logits, end_logits = np.asarray(start_logits, np.float64), np.asarray(end_logits, np.float64)
    index = np.flatnonzero(np.asarray(allowed, bool))
    if index.size == 0:
        return -1, -1
    s, e = index[:, None], index[None, :]
    valid = (e >= s) & (e - s < max_answer_length)
    score = np.where(valid, start_logits[s] + end_logits[e], -np.inf)
    flat = int(np.argmax(score))
    return int(index[flat // index.size]), int(index[flat % index.size])


# ------------------------------------------------------------------------------------------ multi-label


def multilabel_parts(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[n, 3]``: true positives, false positives, false negatives per example (a label is on when its logit
    is > 0, i.e. its sigmoid > 0.5)."""
    on, gold = np.asarray(logits) > 0, np.asarray(labels) > 0.5
    return np.stack([(on & gold).sum(-1), (on & ~gold).sum(-1), (~on & gold).sum(-1)], axis=-1).astype(np.float64)
