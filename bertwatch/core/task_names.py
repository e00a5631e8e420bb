"""What users read about a task and its metrics: the human-readable name of each task type and of each metric the
ablation reports, with a one-line definition. The plugin, the report and ``bertwatch ablate`` all name them from
here; a result file carries the names it was written with (``AblationResult.metrics``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["METRIC_NAMES", "TASK_NAMES", "describe", "metric_entries", "metric_label", "task_label"]

#: Task type (``bertwatch.ablation.task_types.TASK_TYPES``) -> what users read.
TASK_NAMES: dict[str, str] = {
    "sequence-classification": "sequence classification",
    "regression": "regression",
    "multi-label": "multi-label classification",
    "token-classification": "token classification",
    "question-answering": "extractive question answering",
    "multiple-choice": "multiple choice",
    "masked-lm": "masked language modelling",
}

#: Metric key -> (label, definition); docs/ablation.md "Task types" has the details.
METRIC_NAMES: dict[str, tuple[str, str]] = {
    "accuracy": ("accuracy", "Share of examples whose predicted class (the largest logit) is the label."),
    "f1": ("F1", "F1 of the positive class (label 1), as GLUE reports it for MRPC and QQP."),
    "matthews_correlation": ("Matthews correlation", "Matthews correlation of predicted and true classes (CoLA)."),
    "pearson": ("Pearson r", "Pearson correlation of the predicted scores with the gold scores."),
    "spearmanr": ("Spearman ρ", "Spearman rank correlation of the predicted scores with the gold scores."),
    "micro_f1": ("micro-F1", "F1 over every (example, label) decision; a label is on when its logit is > 0."),
    "entity_f1": (
        "entity F1 (seqeval)",
        "F1 over entities chunked from the IOB tags of each word's first piece, as seqeval's default "
        "(conlleval) mode, micro-averaged over entities.",
    ),
    "entity_precision": ("entity precision (seqeval)", "Share of predicted entities that are gold entities."),
    "entity_recall": ("entity recall (seqeval)", "Share of gold entities that are predicted."),
    "token_accuracy": ("token accuracy", "Share of labelled tokens (each word's first piece) tagged right."),
    "exact_match": (
        "exact match (SQuAD)",
        "Share of questions whose best span equals a gold answer after SQuAD's normalisation.",
    ),
    "squad_f1": (
        "token F1 (SQuAD)",
        "Token-overlap F1 of the best span with the closest gold answer, after SQuAD's normalisation.",
    ),
    "mlm_loss": (
        "masked-LM loss",
        "Mean negative log-likelihood (nats) of the original tokens at fixed, seeded masks; lower is better.",
    ),
    "pseudo_perplexity": ("pseudo-perplexity", "exp(masked-LM loss) on the same fixed masks; lower is better."),
}

#: The definition of a metric that the Trainer's ``compute_metrics`` computed.
FROM_COMPUTE_METRICS = "Computed by the Trainer's compute_metrics."


def task_label(task_type: str | None) -> str:
    """``"token classification"`` for ``"token-classification"``; an unknown type as it is, None as ``""``."""
    if not task_type:
        return ""
    return TASK_NAMES.get(str(task_type), str(task_type))


def metric_label(name: str) -> str:
    """``"entity F1 (seqeval)"`` for ``"entity_f1"``; a metric bertwatch does not know keeps its key."""
    return METRIC_NAMES.get(name, (name, ""))[0]


def metric_entries(names: Iterable[str], from_compute_metrics: bool = False) -> list[dict[str, str]]:
    """``[{"name", "label", "description"}]`` for each distinct metric key, in order; with
    ``from_compute_metrics`` the definition says where the numbers came from (not bertwatch's definition)."""
    out, seen = [], set()
    for name in names:
        if not name or name in seen:
            continue
        seen.add(name)
        label, description = METRIC_NAMES.get(name, (name, ""))
        out.append(
            {"name": name, "label": label, "description": FROM_COMPUTE_METRICS if from_compute_metrics else description}
        )
    return out


def describe(task_type: str | None, metrics: Iterable[Mapping[str, Any] | str]) -> str:
    """One line: ``"token classification · entity F1 (seqeval), token accuracy"`` (the compared metric first);
    entries are metric keys or ``metric_entries`` dicts (their ``label`` wins)."""
    labels = []
    for m in metrics:
        if isinstance(m, str):
            labels.append(metric_label(m))
        else:
            labels.append(str(m.get("label") or metric_label(str(m.get("name", "")))))
    task = task_label(task_type)
    joined = ", ".join(label for label in labels if label)
    return " · ".join(part for part in (task, joined) if part)
