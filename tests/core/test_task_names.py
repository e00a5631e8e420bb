"""The one home of the task and metric names users read covers every task type and every metric bertwatch reports."""

from __future__ import annotations

import pytest

from bertwatch.ablation.task_types import TASK_TYPES
from bertwatch.core.task_names import METRIC_NAMES, TASK_NAMES, describe, metric_entries, task_label
from bertwatch.data.metrics import METRICS
from bertwatch.data.task_metrics import ADDITIVE_METRICS

pytestmark = pytest.mark.fast


def test_every_task_type_and_metric_has_a_name_and_a_definition() -> None:
    assert set(TASK_NAMES) == set(TASK_TYPES)
    reported = set(METRICS) | {m.name for metrics in ADDITIVE_METRICS.values() for m in metrics}
    assert reported <= set(METRIC_NAMES), sorted(reported - set(METRIC_NAMES))
    assert all(label and definition.endswith(".") for label, definition in METRIC_NAMES.values())


def test_describe_and_unknown_names() -> None:
    assert describe("token-classification", ["entity_f1", "token_accuracy"]) == (
        "token classification · entity F1 (seqeval), token accuracy"
    )
    assert describe(None, [{"name": "x", "label": "my score"}]) == "my score"
    assert task_label("a-new-head") == "a-new-head" and task_label(None) == ""
    assert metric_entries(["bleu", "bleu", ""]) == [{"name": "bleu", "label": "bleu", "description": ""}]
