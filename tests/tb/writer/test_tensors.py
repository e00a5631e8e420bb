"""The conversions and checks every summary builder shares (``tb.writer.tensors``): arrays from numpy, nested lists and
torch tensors (bfloat16 included), tag parts checked, tensor values appended."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from bertwatch.tb.writer.tensors import check_name, tensor_value, to_numpy

pytestmark = pytest.mark.fast


def test_arrays_from_numpy_lists_and_tensors_of_any_float_type() -> None:
    assert to_numpy([[1, 2], [3, 4]]).dtype == np.float32
    assert to_numpy(np.arange(3), dtype=np.int64).tolist() == [0, 1, 2]
    bf16 = torch.tensor([[0.5, 1.25]], dtype=torch.bfloat16, requires_grad=True)
    out = to_numpy(bf16 * 2)  # a tensor that needs its graph detached, in a dtype numpy lacks
    assert out.dtype == np.float32 and out.tolist() == [[1.0, 2.5]]
    assert to_numpy(torch.arange(3)).tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("bad", ["", " padded", "a/b", None, 3])
def test_a_tag_part_with_a_slash_spaces_or_nothing_is_refused_naming_it(bad) -> None:
    with pytest.raises(ValueError, match="statistic name must be a non-empty string without '/'"):
        check_name(bad, "statistic name")


def test_a_tensor_value_round_trips() -> None:
    assert check_name("cls_mass", "statistic") == "cls_mass"
    summary = summary_pb2.Summary()
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="p"))
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor_value(summary, "bertwatch/heads/x", metadata, array)
    (value,) = summary.value
    assert value.tag == "bertwatch/heads/x" and value.metadata.plugin_data.plugin_name == "p"
    np.testing.assert_array_equal(tensor_util.make_ndarray(value.tensor), array)
