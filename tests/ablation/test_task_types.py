"""The sweep on every task head it scores: baseline = a plain evaluation with the task's metric, each single head
and layer = that configuration evaluated on its own, example by example (no batching, no reuse)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.ablation import sweep as SW
from bertwatch.callbacks import BertWatchWarning
from bertwatch.heads.capture import Intervention, capture
from tests.support.models import bert_with_head, unit_masks
from tests.support.plain_metrics import normalize, plain_span, squad_f1
from tests.support.task_cases import squad_rows
from tests.support.tiny_trainer import WORDS, tiny_tokenizer

LAYERS, HEADS = 2, 4
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def _model(cls, tokenizer, seed: int = 0, **extra):
    return bert_with_head(cls, tokenizer, LAYERS, HEADS, seed=seed, scale=0.3, **extra).eval()


def _alone(model, inputs: dict, mask: np.ndarray, mode: str):
    with (
        torch.inference_mode(),
        capture(model, record=False, intervention=Intervention.disable(torch.as_tensor(mask), mode)),
    ):
        return model(**{k: torch.tensor([v]) for k, v in inputs.items()})


def _masks():
    return unit_masks(LAYERS, HEADS)


def _check(result, plain, rel: float = 0.0) -> None:
    for unit, where, mask in _masks():
        expected = plain(mask)
        got = {"baseline": lambda: result.baseline, "head": lambda: result.heads[where][0]}.get(
            unit, lambda: result.layers[where][0]
        )()
        assert got == pytest.approx(expected, rel=rel, abs=1e-9), (unit, where)
    assert 0 < result.baseline and np.any(result.heads[..., 1] != 0)  # a test that could fail


def _sentences(count: int, seed: int):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(3, 9)))]
        tags = [str(t) for t in rng.choice(TAGS, size=len(words))]
        rows.append({"tokens": words, "tags": tags})
    return rows


@pytest.mark.parametrize("mode", ["zero", "uniform"])
@pytest.mark.fast
def test_token_classification_entity_f1(mode: str) -> None:
    from seqeval.metrics import f1_score

    tokenizer = tiny_tokenizer()
    model = _model(
        T.BertForTokenClassification,
        tokenizer,
        id2label=dict(enumerate(TAGS)),
        label2id={t: i for i, t in enumerate(TAGS)},
    )
    rows = _sentences(16, 0)
    rows[0]["tokens"][0] = "moviefilm"  # not in the vocabulary as a word: [UNK], one piece
    result = SW.ablate(model, rows, tokenizer, mode=mode, n_resamples=40, keep_only=False, batch_size=5, progress=False)
    assert result.metric == "entity_f1" and result.config["task_type"] == "token-classification"
    assert set(result.baseline_metrics) == {"entity_f1", "entity_precision", "entity_recall", "token_accuracy"}

    def plain(mask):
        y_true, y_pred = [], []
        for row in rows:
            encoded = tokenizer(row["tokens"], is_split_into_words=True)
            logits = _alone(model, dict(encoded), mask, mode).logits[0]
            first = [i for i, w in enumerate(encoded.word_ids()) if w is not None and w != encoded.word_ids()[i - 1]]
            y_true.append(list(row["tags"]))
            y_pred.append([TAGS[int(logits[i].argmax())] for i in first])
        return f1_score(y_true, y_pred)

    _check(result, plain)
    assert result.pruning and result.importance.shape == (LAYERS, HEADS)


def test_question_answering_exact_match_and_f1() -> None:
    tokenizer = tiny_tokenizer()
    model = _model(T.BertForQuestionAnswering, tokenizer, seed=1)
    rows = squad_rows(14, 1)
    result = SW.ablate(
        model, rows, tokenizer, task="qa", metric="squad_f1", n_resamples=40, keep_only=False, progress=False
    )
    assert result.metric == "squad_f1" and set(result.baseline_metrics) == {"exact_match", "squad_f1"}

    def plain(mask, metric="f1"):
        scores = []
        for row in rows:
            encoded = tokenizer(row["question"], row["context"], return_offsets_mapping=True)
            offsets = encoded.pop("offset_mapping")
            out = _alone(model, dict(encoded), mask, "uniform")
            allowed = [s == 1 for s in encoded.sequence_ids()]
            s, e = plain_span(out.start_logits[0].tolist(), out.end_logits[0].tolist(), allowed, 30)
            text = row["context"][offsets[s][0] : offsets[e][1]]
            gold = row["answers"]["text"]
            if metric == "f1":
                scores.append(max(squad_f1(text, g) for g in gold))
            else:
                scores.append(max(float(normalize(text) == normalize(g)) for g in gold))
        return float(np.mean(scores))

    _check(result, plain)
    assert result.baseline_metrics["exact_match"] == pytest.approx(plain(np.zeros((LAYERS, HEADS), bool), "em"))


def test_answers_cut_off_by_max_length_are_one_warning() -> None:
    tokenizer = tiny_tokenizer()
    model = _model(T.BertForQuestionAnswering, tokenizer, seed=1)
    rows = squad_rows(6, 2)
    far = " ".join(WORDS[:4] * 10)  # the answer sits after 40 filler words
    for row in rows[:2]:
        answer = row["answers"]["text"][0]
        row["context"] = f"{far} {row['context']}"
        row["answers"]["answer_start"] = [row["context"].index(answer, len(far))]
    with pytest.warns(
        BertWatchWarning, match="2 of 6 question-answering examples have no gold answer within their first 32 tokens"
    ) as caught:
        SW.ablate(model, rows, tokenizer, task="qa", max_length=32, n_resamples=10, keep_only=False, progress=False)
    assert len([w for w in caught if issubclass(w.category, BertWatchWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertWatchWarning)
        SW.ablate(model, rows, tokenizer, task="qa", max_length=128, n_resamples=10, keep_only=False, progress=False)


def test_multiple_choice_accuracy() -> None:
    tokenizer = tiny_tokenizer()
    model = _model(T.BertForMultipleChoice, tokenizer, seed=2)
    rng = np.random.default_rng(2)
    rows = [
        {
            "question": " ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 6)))),
            "choices": [" ".join(str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 5)))) for _ in range(3)],
            "label": int(rng.integers(0, 3)),
        }
        for _ in range(15)
    ]
    result = SW.ablate(model, rows, tokenizer, n_resamples=40, keep_only=False, batch_size=4, progress=False)
    assert result.metric == "accuracy" and result.config["task_type"] == "multiple-choice"

    def plain(mask):
        correct = 0
        for row in rows:
            picks = []
            for choice in row["choices"]:  # each choice alone, no padding: [1, 1, T]
                encoded = tokenizer(row["question"], choice)
                out = _alone(model, {k: [v] for k, v in encoded.items()}, mask, "uniform")
                picks.append(float(out.logits[0, 0]))
            correct += int(np.argmax(picks)) == row["label"]
        return correct / len(rows)

    _check(result, plain)


@pytest.mark.fast
def test_multi_label_micro_f1() -> None:
    from sklearn.metrics import f1_score

    tokenizer = tiny_tokenizer()
    model = _model(
        T.BertForSequenceClassification, tokenizer, seed=3, num_labels=3, problem_type="multi_label_classification"
    )
    rng = np.random.default_rng(3)
    rows = [
        {"text": " ".join(str(w) for w in rng.choice(WORDS, size=5)), "label": [float(v) for v in rng.random(3) < 0.5]}
        for _ in range(16)
    ]
    result = SW.ablate(model, rows, tokenizer, n_resamples=40, keep_only=False, progress=False)
    assert result.metric == "micro_f1"

    def plain(mask):
        preds = [
            (_alone(model, dict(tokenizer(r["text"])), mask, "uniform").logits[0] > 0).int().tolist() for r in rows
        ]
        return f1_score([[int(v) for v in r["label"]] for r in rows], preds, average="micro")

    _check(result, plain)


def test_heads_and_tasks_that_do_not_fit_are_refused_at_setup() -> None:
    tokenizer = tiny_tokenizer()
    bare = _model(T.BertModel, tokenizer)
    with pytest.raises(ValueError, match="no sequence-classification head"):
        SW.ablate(bare, [{"text": "good", "label": 0}], tokenizer, progress=False)
    mlm = _model(T.BertForMaskedLM, tokenizer)
    with pytest.raises(ValueError, match="only special tokens"):
        SW.ablate(mlm, [{"input_ids": [2, 3]}], tokenizer, progress=False)
    tagger = _model(T.BertForTokenClassification, tokenizer, id2label=dict(enumerate(TAGS)))
    with pytest.raises(ValueError, match="does not fit"):
        SW.ablate(tagger, _sentences(3, 0), tokenizer, task="question-answering", progress=False)
    with pytest.raises(ValueError, match="not among the model's labels"):
        SW.ablate(tagger, [{"tokens": ["good"], "tags": ["B-MISC"]}], tokenizer, progress=False)
    with pytest.raises(ValueError, match="unknown GLUE task"):
        SW.ablate(tagger, _sentences(3, 0), tokenizer, task="nonsense", progress=False)
    qa = _model(T.BertForQuestionAnswering, tokenizer)
    with pytest.raises(ValueError, match="SQuAD layout"):
        SW.ablate(qa, [{"text": "good"}], tokenizer, progress=False)


def test_masked_lm_loss_and_pseudo_perplexity_on_fixed_masks() -> None:
    from bertwatch.ablation.settings import AblationSettings

    tokenizer = tiny_tokenizer()
    model = _model(T.BertForMaskedLM, tokenizer, seed=4)
    rows = [{"text": t["text"]} for t in _texts(14)]
    kwargs = dict(n_resamples=40, keep_only=False, batch_size=4, progress=False, task="mlm")
    result = SW.ablate(model, rows, tokenizer, **kwargs)
    assert result.metric == "mlm_loss" and set(result.baseline_metrics) == {"mlm_loss", "pseudo_perplexity"}
    assert result.config["greater_is_better"] is False  # lower loss is better: the pruning stops above 110%
    features = SW.prepare_sweep(model, rows, tokenizer, None, AblationSettings(**kwargs)).data.features
    for row, feature in zip(rows, features):  # the masks: [MASK] where a label is, the original token as label
        original = tokenizer(row["text"])["input_ids"]
        for token, masked, label in zip(original, feature["input_ids"], feature["labels"]):
            assert (masked, label) == ((tokenizer.mask_token_id, token) if label != -100 else (token, -100))

    def plain(mask):
        total, count = 0.0, 0
        for feature in features:
            logits = _alone(model, {"input_ids": feature["input_ids"]}, mask, "uniform").logits[0].double()
            for position, label in enumerate(feature["labels"]):
                if label != -100:
                    total -= float(torch.log_softmax(logits[position], -1)[label])
                    count += 1
        return total / count

    _check(result, plain, rel=1e-5)
    assert result.baseline_metrics["pseudo_perplexity"] == pytest.approx(np.exp(result.baseline), rel=1e-9)
    again = SW.ablate(model, rows, tokenizer, **kwargs)
    np.testing.assert_array_equal(again.heads, result.heads)  # the same masks every time


def _texts(count: int):
    from tests.support.tiny_trainer import toy_texts

    return toy_texts(count, seed=5)


def test_compute_metrics_still_wins_for_token_classification() -> None:
    tokenizer = tiny_tokenizer()
    model = _model(T.BertForTokenClassification, tokenizer, id2label=dict(enumerate(TAGS)))
    rows = _sentences(10, 2)

    def compute_metrics(prediction):
        preds, labels = prediction.predictions.argmax(-1), prediction.label_ids
        keep = labels != -100
        return {"accuracy": float((preds[keep] == labels[keep]).mean())}

    kwargs = dict(n_resamples=20, keep_only=False, prune=False, progress=False)
    theirs = SW.ablate(model, rows, tokenizer, compute_metrics=compute_metrics, **kwargs)
    ours = SW.ablate(model, rows, tokenizer, metric="token_accuracy", **kwargs)
    assert theirs.metric == "accuracy" and theirs.config["metric_source"] == "compute_metrics"
    assert theirs.baseline == pytest.approx(ours.baseline_metrics["token_accuracy"])
    np.testing.assert_allclose(theirs.heads[..., 0], ours.heads[..., 0], atol=1e-12)
