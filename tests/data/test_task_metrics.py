"""Task metrics against independent implementations: seqeval for entities, plain loops for the rest."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bertwatch.ablation.bootstrap import additive_bootstrap, paired_bootstrap
from bertwatch.data.task_metrics import (
    ADDITIVE_METRICS,
    best_span,
    entities,
    is_iob,
    multilabel_parts,
    squad_scores,
    token_classification_parts,
)
from tests.support.plain_metrics import normalize, plain_span, squad_f1

pytestmark = pytest.mark.fast

NAMES = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-ORG")


def _metric(kind: str, name: str, parts: np.ndarray) -> float:
    return float({m.name: m for m in ADDITIVE_METRICS[kind]}[name](parts.sum(0)))


def test_entity_f1_and_token_accuracy_equal_seqeval_and_loops() -> None:
    from seqeval.metrics import f1_score, precision_score, recall_score

    rng = random.Random(0)
    n, width = 40, 12
    pred = np.zeros((n, width), dtype=np.int64)
    gold = np.full((n, width), -100, dtype=np.int64)
    for i in range(n):
        length = rng.randint(2, width)
        for t in range(length):
            gold[i, t] = rng.randrange(len(NAMES)) if rng.random() < 0.7 else 0
            pred[i, t] = gold[i, t] if rng.random() < 0.6 else rng.randrange(len(NAMES))
        for t in range(1, length):
            if rng.random() < 0.2:
                gold[i, t] = -100  # a sub-word continuation: left out
        pred[i, length:] = rng.randrange(len(NAMES))  # what the model says on padding is never read
    parts = token_classification_parts(pred, gold, NAMES)
    y_true = [[NAMES[g] for g in row if g != -100] for row in gold]
    y_pred = [[NAMES[p] for p, g in zip(prow, grow) if g != -100] for prow, grow in zip(pred, gold)]
    assert _metric("token-classification", "entity_f1", parts) == pytest.approx(f1_score(y_true, y_pred))
    assert _metric("token-classification", "entity_precision", parts) == pytest.approx(precision_score(y_true, y_pred))
    assert _metric("token-classification", "entity_recall", parts) == pytest.approx(recall_score(y_true, y_pred))
    correct = sum(a == b for t, p in zip(y_true, y_pred) for a, b in zip(t, p))
    assert _metric("token-classification", "token_accuracy", parts) == pytest.approx(correct / sum(map(len, y_true)))
    # conlleval chunking edge cases, as seqeval reads them
    from seqeval.metrics.sequence_labeling import get_entities

    for tags in (["I-PER", "I-PER", "O"], ["B-PER", "I-LOC", "I-LOC"], ["S-ORG", "E-LOC", "B-PER", "B-PER"]):
        assert entities(tags) == set(get_entities(tags))
    assert is_iob(NAMES) and not is_iob(("NOUN", "VERB"))


def test_squad_scores_and_best_span() -> None:
    cases = [
        ("The Eiffel Tower", ["Eiffel tower", "the tower"]),
        ("in 1889,", ["1889"]),
        ("Paris France", ["Paris"]),
        ("", ["x"]),
        ("an apple a day", ["apple day"]),
    ]
    for prediction, answers in cases:
        em, f1 = squad_scores(prediction, answers)
        assert em == max(float(normalize(prediction) == normalize(a)) for a in answers)
        assert f1 == pytest.approx(max(squad_f1(prediction, a) for a in answers))
    rng = np.random.default_rng(1)
    for _ in range(30):
        start, end = rng.normal(size=15), rng.normal(size=15)
        allowed = rng.random(15) < 0.7
        span = plain_span(start, end, allowed, 4)
        assert best_span(start, end, allowed, max_answer_length=4) == span


def test_multilabel_micro_f1_and_the_additive_bootstrap() -> None:
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(2)
    logits, labels = rng.normal(size=(30, 4)), (rng.random((30, 4)) < 0.4).astype(float)
    parts = multilabel_parts(logits, labels)
    assert _metric("multi-label", "micro_f1", parts) == pytest.approx(
        f1_score(labels, (logits > 0).astype(float), average="micro")
    )
    # the additive bootstrap is the plain per-resample bootstrap of the same metric
    other = multilabel_parts(logits + rng.normal(size=(30, 4)), labels)
    combine = ADDITIVE_METRICS["multi-label"][0]
    fast = additive_bootstrap(parts, other[None], combine, n_resamples=50, seed=3)
    slow = paired_bootstrap(parts, other[None], np.zeros(30), lambda p, _: float(combine(p.sum(0))), 50, 3)
    np.testing.assert_allclose(fast.cells(), slow.cells(), rtol=1e-12, atol=1e-12)


def test_masked_lm_loss_and_pseudo_perplexity() -> None:
    nll = np.array([[2.0, 3], [1.5, 1], [0.0, 0]])
    loss = _metric("masked-lm", "mlm_loss", nll)
    assert loss == pytest.approx(3.5 / 4)
    assert _metric("masked-lm", "pseudo_perplexity", nll) == pytest.approx(math.exp(3.5 / 4))
