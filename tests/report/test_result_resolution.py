"""AblationResult.resolution(): which interval the answer turns on, and the headline it gives, on the first steps of
a real 128-example sweep (MiniLM fine-tuned 150 steps on SST-2, uniform mode) and on made-up cases around it."""

from __future__ import annotations

import numpy as np
import pytest

from bertwatch.core.removable import headline
from bertwatch.report.result import AblationResult

pytestmark = pytest.mark.fast

#: (heads pruned, Δ, ci_low, ci_high) of the importance order's first steps, as the 128-example sweep measured them
STEPS_128 = [
    (7, 0.0, 0.0, 0.0),
    (13, 0.0156, 0.0, 0.0391),
    (18, 0.0078, -0.0312, 0.0469),
    (23, -0.0078, -0.0469, 0.0312),
    (27, 0.0156, -0.0234, 0.0625),
    (31, -0.0312, -0.0781, 0.0156),
]


def _result(steps, n=128, heads=None, greater=True) -> AblationResult:
    entries = [
        {"pruned": k, "fraction": k / 72, "value": 0.74 + d, "delta": d, "ci_low": lo, "ci_high": hi, "p": 0.5}
        for k, d, lo, hi in steps
    ]
    cells = np.zeros((6, 12, 5)) if heads is None else heads
    return AblationResult(
        task="sst2", mode="uniform", metric="accuracy", num_examples=n, baseline=0.74, heads=cells,
        layers=np.zeros((6, 5)), pruning=entries,
        config={"delta": 0.01, "confidence": 0.95, "greater_is_better": greater},
    )  # fmt: skip


def test_the_width_is_the_step_where_the_answer_stops() -> None:
    result = _result(STEPS_128)
    found = result.resolution()
    assert found.width_of == "stop" and found.half_width == pytest.approx((0.0469 + 0.0312) / 2)
    assert not found.resolves(0.01) and found.examples_for(0.01) == pytest.approx(128 * 3.905**2, rel=1e-3)
    answers = result.removable_json()
    assert answers["at_resolution"]["delta"] == 0.04 and answers["at_resolution"]["importance"]["pruned"] == 18
    assert headline(answers, 72, "accuracy") == (
        "128 examples cannot tell a change of 0.01 (one example is 0.0078; the 95% interval where the answer stops "
        "is ±0.039): at δ = 0.04, up to 25% of the heads (18 of 72) can go; about 2,000 examples would resolve 0.01"
    )


def test_a_step_shown_to_cost_more_than_delta_decides_however_wide() -> None:
    steps = [(7, 0.0, -0.004, 0.004), (13, -0.05, -0.09, -0.012)]  # wide, but wholly below -δ
    found = _result(steps).resolution()
    assert found.beyond and found.resolves(0.01) and found.half_width == pytest.approx(0.039)
    text = headline(_result(steps).removable_json(), 72, "accuracy")
    assert text.startswith("128 examples resolve a change of 0.01") and "lies beyond δ" in text
    assert text.endswith("up to 10% of the heads (7 of 72) can go")


def test_every_step_holding_gives_the_widest_and_a_loss_is_read_upward() -> None:
    held = _result([(7, 0.0, -0.004, 0.006), (13, 0.0, -0.008, 0.008)], n=2000).resolution()
    assert held.width_of == "widest" and held.half_width == pytest.approx(0.008) and held.resolves(0.01)
    loss = _result([(7, 0.0, -0.004, 0.004), (13, 0.05, 0.012, 0.09)], greater=False).resolution()
    assert loss.beyond and loss.width_of == "stop"


def test_without_a_curve_the_single_heads_median_width() -> None:
    heads = np.zeros((6, 12, 5))
    rng = np.random.default_rng(0)
    half = rng.uniform(0.005, 0.03, (6, 12))
    half[0] = 0.0  # heads that changed no prediction: left out
    heads[..., 2], heads[..., 3] = -half, half
    found = _result([], heads=heads).resolution()
    assert found.width_of == "median" and found.half_width == pytest.approx(float(np.median(half[1:])))
    assert found.clause().startswith("128 examples: one example is 0.0078; the 95% intervals are about ±")
