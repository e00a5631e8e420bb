"""Where the host reads a tensor for free: only the CPU, read at every call, so emptying ``HOST_DEVICES`` sends
every per-batch function down the path a GPU takes (the logit summary's masks, the row pass's masked blocks)."""

from __future__ import annotations

import pytest
import torch

import bertwatch.heads.host as host
from bertwatch.heads.host import reads_free
from bertwatch.heads.stability.logits import allowed_pairs, pair_blocks

pytestmark = pytest.mark.fast


def test_only_the_cpu_reads_for_free_and_the_rule_is_read_at_each_call(monkeypatch) -> None:
    assert reads_free(torch.device("cpu")) and reads_free("cpu")
    assert not any(reads_free(device) for device in ("cuda", "mps", "meta", torch.device("cuda", 1)))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    pairs = allowed_pairs(mask[:, None, None, :].bool(), 3)
    assert pair_blocks(pairs, 2, 3) == [(0, 2), (0, 3)]  # found by reading the mask on the host
    monkeypatch.setattr(host, "HOST_DEVICES", ())
    assert not reads_free("cpu")
    assert pair_blocks(pairs, 2, 3) == [None, None]  # the device path: masked, nothing read back
