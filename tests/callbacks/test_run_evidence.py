"""The evidence the callback reads from the Trainer's datasets: the constant prediction of a label column."""

from __future__ import annotations

import math

import pytest
from datasets import Dataset

from bertwatch.callbacks.run_evidence import constant_of

pytestmark = pytest.mark.fast


def test_the_constant_prediction_comes_from_a_label_column() -> None:
    data = Dataset.from_dict({"input_ids": [[1, 2]] * 4, "label": [1, 1, 1, 0]})
    c = constant_of(data)
    assert c.share == 0.75 and c.examples == 4
    assert c.entropy == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert constant_of(Dataset.from_dict({"labels": [0, 1]})).share == 0.5
    assert constant_of(Dataset.from_dict({"label": [0.1, 2.5]})) is None  # regression
    assert constant_of([{"label": 1}]) is None  # no columns to read: bertwatch does not iterate a dataset
    assert constant_of(None) is None
