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
    assert c.loss == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert constant_of(Dataset.from_dict({"labels": [0, 1]})).share == 0.5
    regression = constant_of(Dataset.from_dict({"label": [0.5, 2.5]}))  # predicting the mean, 1.5: squared error 1
    assert math.isnan(regression.share) and regression.loss == pytest.approx(1.0)
    rows = [{"input_ids": [1, 2], "label": y} for y in (0, 0, 1)]  # a plain list of rows, as the Trainer takes
    assert constant_of(rows).share == 2 / 3
    assert constant_of([{"input_ids": [1]}]) is None and constant_of([]) is None

    class Built:  # a dataset that builds each row on access: not read through
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"label": i}

    assert constant_of(Built()) is None and constant_of(None) is None
