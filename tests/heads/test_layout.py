"""bertwatch.heads.layout: real tokens first, stably; what points at tokens moves with them; position_ids refused."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bertwatch.heads.layout import LayoutError, is_right_aligned, real_tokens, right_align


@pytest.mark.fast
@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=4), st.integers(0, 2**31))
def test_every_row_keeps_its_real_tokens_in_order_then_its_padding(masks, seed):
    """Any mask (left, right, holes, empty rows): the loop's expectation row by row."""
    mask = torch.tensor(masks, dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, mask.shape, generator=g)
    feats = torch.randn(*mask.shape, 3, generator=g)
    start = torch.randint(0, 5, (mask.shape[0],), generator=g)
    out = right_align({"input_ids": ids, "attention_mask": mask, "x": feats, "start_positions": start, "y": start})
    assert is_right_aligned(out["attention_mask"]) and torch.equal(out["y"], start)
    for b, row in enumerate(masks):
        order = [t for t in range(5) if row[t]] + [t for t in range(5) if not row[t]]
        assert out["input_ids"][b].tolist() == [int(ids[b, t]) for t in order]
        assert torch.equal(out["x"][b], feats[b, order])
        assert out["input_ids"][b, int(out["start_positions"][b])] == ids[b, int(start[b])]


@pytest.mark.fast
def test_multiple_choice_rows_and_position_ids():
    mask = torch.tensor([[[0, 1, 1], [1, 1, 0]]])
    out = right_align({"input_ids": torch.tensor([[[0, 4, 5], [6, 7, 0]]]), "attention_mask": mask})
    assert out["input_ids"].tolist() == [[[4, 5, 0], [6, 7, 0]]]
    with pytest.raises(LayoutError, match="position_ids"):
        right_align({"input_ids": mask[0], "attention_mask": mask[0], "position_ids": mask[0]})
    right_mask = torch.tensor([[1, 1, 0]])
    kept = right_align({"input_ids": right_mask, "attention_mask": right_mask, "position_ids": right_mask})
    assert torch.equal(kept["position_ids"], right_mask)


@pytest.mark.fast
def test_real_tokens_of_one_example():
    row = {"input_ids": [0, 0, 7, 8], "attention_mask": [0, 0, 1, 1], "labels": [-100, -100, 1, 2], "label": 3}
    assert real_tokens(row) == {"input_ids": [7, 8], "labels": [1, 2], "label": 3}
    choices = {"input_ids": [[0, 7], [8, 9]], "attention_mask": [[0, 1], [1, 1]]}
    assert real_tokens(choices) == {"input_ids": [[7], [8, 9]]}
    with pytest.raises(LayoutError):
        real_tokens({**row, "position_ids": [0, 1, 2, 3]})
