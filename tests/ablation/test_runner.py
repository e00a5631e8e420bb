"""Configuration batching: several head masks stacked along the batch in one forward give exactly each
configuration's predictions one at a time (to float rounding, ``tests.support.tolerance``), padding included; the stack
is sized to the free memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from bertwatch.ablation import configs as C
from bertwatch.ablation import evaluate as E
from bertwatch.ablation import inputs as I
from bertwatch.ablation import runner as R
from bertwatch.ablation import store as S
from bertwatch.heads.capture import Intervention, capture
from tests.support.models import lively, tiny_model
from tests.support.tolerance import EPS32, EPS64, assert_float32_close


def _padded_data(count: int = 13) -> I.EvalData:
    """Examples of 3 to 15 tokens in batches of 5, so that every batch but the shortest is padded."""
    g = torch.Generator().manual_seed(3)
    features = []
    for _ in range(count):
        n = int(torch.randint(1, 14, (1,), generator=g))
        features.append({"input_ids": [2] + torch.randint(5, 120, (n,), generator=g).tolist() + [3]})
    data = I.EvalData(features, np.zeros(count, dtype=int))
    I.make_batches(data, 5, 10, 0)
    return data


def _alone(model: nn.Module, data: I.EvalData, mask: np.ndarray, mode: str) -> np.ndarray:
    """One configuration on its own: a plain forward per batch, in input order (independent of the Runner)."""
    out = np.empty((data.size, model.config.num_labels), dtype=np.float32)
    for shard in data.shards:
        for batch in shard:
            with (
                torch.inference_mode(),
                capture(model, record=False, intervention=Intervention.disable(torch.as_tensor(mask), mode)),
            ):
                out[batch.index] = model(**batch.inputs).logits.float().numpy()
    return out


#: (dtype, layer reuse): reuse and the first-token last layer change matrix shapes between a stack and a single
#: configuration, which moves the logits by a few roundings of their magnitude (float32 and float64 alike).
SETTINGS = ((torch.float32, False), (torch.float64, False), (torch.float64, True))


@pytest.mark.parametrize(("family", "mode"), [("bert", "uniform"), ("bert", "zero"), ("albert", "uniform")])
def test_stacked_configurations_equal_each_one_alone(family: str, mode: str) -> None:
    data = _padded_data()
    assert any(int(b.inputs["attention_mask"].min()) == 0 for shard in data.shards for b in shard)
    configs = C.sweep_configs(3, 4)
    rng = np.random.default_rng(1)
    configs += [C.HeadMask(f"random:{i}", rng.random((3, 4)) < 0.4) for i in range(3)]
    for dtype, reuse in SETTINGS:
        model = lively(tiny_model(family)).to(dtype).eval()
        runner = R.Runner(model, mode, reuse=reuse)
        results = {}
        for per_forward in (1, 4, len(configs)):
            with torch.inference_mode():
                results[per_forward] = E.evaluate_configs(
                    runner, data, configs, S.Store(None, "x", True), S.Processes(False), per_forward, progress=False
                )
        for config in configs:
            alone = _alone(model, data, config.mask, mode)
            for per_forward, got in results.items():
                what = f"{config.id} {dtype} reuse={reuse} stacked {per_forward}"
                scale, eps = np.abs(alone).max(), EPS32 if dtype == torch.float32 else EPS64
                assert_float32_close(got[config.id], results[1][config.id], scale=scale, msg=what, eps=eps)
                assert_float32_close(got[config.id], alone, scale=scale, msg=what, eps=eps)
            if config.id != "baseline":
                assert np.abs(alone - results[1]["baseline"]).max() > 1e-3, config.id


def test_the_stack_is_sized_to_the_free_memory() -> None:
    config = tiny_model("bert").config
    per_row = R.row_bytes(config, 128, 2)
    heads, hidden = config.num_attention_heads, config.hidden_size
    assert per_row >= heads * 128 * 128 * 4 + 128 * hidden * 2 * 4
    assert R.row_bytes(config, 512, 2) > 15 * per_row  # the [heads, L, L] maps dominate at long lengths
    fits = [R.configs_that_fit(free, 32, per_row) for free in (0, 10**6, 10**9, 10**11, 10**14)]
    assert fits[0] == 1 and fits == sorted(fits) and fits[-1] == R.MAX_CONFIGS
    k = R.configs_that_fit(10**9, 32, per_row)
    assert k * 32 * per_row <= R.MEMORY_SHARE * 10**9 < (k + 1) * 32 * per_row
    model = tiny_model("bert")
    assert R.default_configs_per_batch(model, torch.device("cpu"), 32, 128) == R.CPU_ROWS // 32
