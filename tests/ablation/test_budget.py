"""The budget rule of a sweep's default: on a CPU the first 128 examples, and keep-one-head, the iterative order and
the random orders only where the sweep with them fits the budget by its timed estimate; the plan line says what was
left out, what the fuller sweep would take and the flags that ask for it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from bertwatch import ablate
from bertwatch.ablation.configs import sweep_configs
from bertwatch.ablation.estimate import CPU_EXAMPLES, Choice, SweepPlan, example_cap, first_examples
from bertwatch.ablation.inputs import EvalData, make_batches
from bertwatch.ablation.settings import DEFAULT_RANDOM_ORDERS, AblationSettings
from bertwatch.ablation.store import Store

pytestmark = pytest.mark.fast


def _plan(settings: AblationSettings, examples: int = 128, available: int = 408, device: str = "CPU") -> SweepPlan:
    features = [{"input_ids": [2, 5, 6, 3], "token_type_ids": [0] * 4, "attention_mask": [1] * 4}] * examples
    data = EvalData(features, np.zeros(examples, dtype=np.int64))
    make_batches(data, 32, 256, 0)
    configs = sweep_configs(6, 12, keep_only=settings.keep_only is not False)
    return SweepPlan.of(configs, data, Store(None, "x", True), settings, device, True, available)


def _timed(plan: SweepPlan, layer_seconds: float) -> SweepPlan:
    """The plan as if one configuration over one layer of the whole set took ``layer_seconds``."""
    plan.rate = {"layer": layer_seconds, "base": 0.0, "chunk": 4.0}
    return plan


def test_the_optional_parts_run_only_where_the_sweep_with_them_fits_the_budget() -> None:
    settings = AblationSettings()
    assert (settings.keep_only, settings.prune_iterative, settings.prune_random) == (None, None, None)
    fast = _timed(_plan(settings), 0.001)  # every part fits 5 minutes
    assert fast.choice() == Choice(True, True, DEFAULT_RANDOM_ORDERS)
    slow = _timed(_plan(settings), 1.0)  # 79 configurations of up to 6 layers: minutes; the orders: hours
    assert slow.choice() == Choice(False, False, 0)
    assert slow.seconds(Choice(False, False, 0)) > slow.budget_s  # the core runs whatever it costs
    middling = _timed(_plan(settings), 0.25)  # keep-one-head fits, the orders' steps do not
    chosen = middling.choice()
    assert chosen.keep and not chosen.iterative and chosen.random == 0
    assert middling.seconds(chosen) <= middling.budget_s < middling.seconds(Choice(True, True, 0))
    settled = slow.settled(settings)
    assert (settled.keep_only, settled.prune_iterative, settled.prune_random) == (False, False, 0)


def test_parts_asked_for_always_run_and_no_budget_runs_them_all() -> None:
    asked = AblationSettings(keep_only=True, prune_iterative=True, prune_random=2)
    assert _timed(_plan(asked), 10.0).choice() == Choice(True, True, 2)
    refused = AblationSettings(keep_only=False, prune_iterative=False, prune_random=0)
    assert _timed(_plan(refused), 0.0001).choice() == Choice(False, False, 0)
    assert _timed(_plan(AblationSettings(budget_minutes=None)), 10.0).choice() == Choice(True, True, 5)
    untimed = _plan(AblationSettings())  # nothing timed: the orders run on a GPU only
    assert untimed.choice() == Choice(False, False, 0)
    assert _plan(AblationSettings(), device="GPU").choice() == Choice(True, True, 5)
    with pytest.raises(ValueError, match="budget_minutes"):
        AblationSettings(budget_minutes=0)
    with pytest.raises(ValueError, match="max_examples"):
        AblationSettings(max_examples=0)


def test_the_plan_line_says_what_was_left_out_what_the_fuller_sweep_costs_and_how_to_ask() -> None:
    line = _timed(_plan(AblationSettings()), 1.0).line()
    assert line.startswith(
        "bertwatch ablate: 79 configurations (baseline, 72 heads, 6 layers) on 128 of 408 examples: about "
    )
    assert "then the pruning orders (importance) at about" in line
    tail = line.split("; the fuller sweep, with ")[1]
    assert tail.startswith(
        "all 408 examples (the first 128 read here) and keep-one-head, the iterative order and 5 random orders "
        "(past the 5-minute budget), would take about "
    )
    assert tail.endswith(
        ": --limit 408 --keep-only --iterative --random-orders 5 (ablate(): max_examples=408, keep_only=True, "
        "prune_iterative=True, prune_random=5)"
    )
    hours = float(tail.split("would take about ")[1].split(" h")[0])
    assert hours == pytest.approx(
        _timed(_plan(AblationSettings()), 1.0).seconds(Choice(True, True, 5)) * 408 / 128 / 3600, abs=0.06
    )
    full = _timed(_plan(AblationSettings(), examples=128, available=128), 0.0001).line()
    assert "fuller" not in full and "(importance, iterative, 5 random orders)" in full


def test_a_cpu_reads_the_first_128_examples_unless_told() -> None:
    assert CPU_EXAMPLES == 128
    assert example_cap(None, "cpu") == 128 and example_cap(None, "cuda") is None and example_cap(500, "cpu") == 500
    rows = [{"i": i} for i in range(300)]
    kept, total = first_examples(rows, 128)
    assert total == 300 and kept == rows[:128]
    assert first_examples(rows, None) == (rows, 300)


def _tiny(examples: int):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = transformers.BertForSequenceClassification(config).eval()
    rows = [{"input_ids": [2, 5 + i % 7, 9 + i % 5, 3], "label": i % 2} for i in range(examples)]
    return model, rows


def test_the_default_sweep_on_a_cpu_fits_its_budget_and_records_what_ran(capsys) -> None:
    model, rows = _tiny(150)
    result = ablate(model, rows, mode="zero", n_resamples=20, batch_size=16, progress=True, budget_minutes=1e-6)
    assert result.num_examples == 128 and result.config["examples_given"] == 150
    assert result.keep_only is None and result.pruning_random == [] and result.pruning_iterative == []
    assert result.config["prune_random"] == 0 and result.config["prune_iterative"] is False
    assert result.pruning  # the importance order runs whatever the budget
    (line,) = [x for x in capsys.readouterr().err.replace("\r", "\n").splitlines() if "bertwatch ablate:" in x]
    assert "on 128 of 150 examples" in line and "--limit 150 --keep-only --iterative --random-orders 5" in line
    asked = ablate(model, rows, mode="zero", n_resamples=20, batch_size=16, progress=False, budget_minutes=1e-6,
                   max_examples=150, keep_only=True, prune_iterative=True, prune_random=1)  # fmt: skip
    assert asked.num_examples == 150 and asked.keep_only is not None and len(asked.pruning_random) == 1
    assert len(asked.pruning_iterative) == len(asked.pruning)
