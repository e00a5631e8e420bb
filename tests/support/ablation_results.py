"""An ablation result with every kind of cell (NaN, a tiny p, hostile strings), a token-classification one, and a
run folder holding training grids and (optionally) that ablation: for the tests of the report, its readers and
``bertwatch report``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertwatch.report.result import AblationResult
from bertwatch.tb.writer.summary import SummaryWriter

HOSTILE = '<img src=x onerror="alert(1)">'


def sample_result(task: str | None = "sst2", metric: str = "accuracy", mode: str = "uniform") -> AblationResult:
    """A 3 x 4 sweep: seeded deltas with intervals, one NaN cell (L2 H3), one tiny p (L0 H0), a keep-only table, a
    two-step pruning curve and the hostile string as the model's name."""
    rng = np.random.default_rng(0)
    layers, heads = 3, 4
    cells = np.zeros((layers, heads, 5))
    cells[..., 1] = rng.normal(0, 0.02, (layers, heads))
    cells[..., 0] = 0.8 + cells[..., 1]
    cells[..., 2] = cells[..., 1] - 0.01
    cells[..., 3] = cells[..., 1] + 0.01
    cells[..., 4] = rng.uniform(0, 1, (layers, heads))
    cells[0, 0, 4] = 1e-4
    cells[2, 3] = [np.nan, np.nan, np.nan, np.nan, np.nan]
    layer_cells = cells[:, 0].copy()
    keep = cells.copy()
    keep[1, 2, 0] = 0.95
    pruning = [
        {
            "pruned": 1,
            "fraction": 1 / 12,
            "value": 0.79,
            "delta": -0.01,
            "ci_low": -0.02,
            "ci_high": 0.0,
            "p": 0.04,
            "heads": [[0, 1]],
        },
        {
            "pruned": 2,
            "fraction": 2 / 12,
            "value": 0.7,
            "delta": -0.1,
            "ci_low": -0.12,
            "ci_high": -0.08,
            "p": 0.001,
            "heads": [[0, 1], [2, 0]],
        },
    ]
    return AblationResult(
        task=task,
        mode=mode,
        metric=metric,
        num_examples=50,
        baseline=0.8,
        heads=cells,
        layers=layer_cells,
        keep_only=keep,
        pruning=pruning,
        importance=rng.random((layers, heads)),
        baseline_metrics={metric: 0.8},
        config={"model": HOSTILE, "n_resamples": 1000},
    )


def write_sample_run(run: Path, with_ablation: bool = True) -> None:
    """An event file at ``run``: ``entropy`` at steps 0, 5, 10 (1, 2, 3 everywhere), ``cls_mass`` at 0 and 10, and
    the sample sweep in zero mode at step 10 (``with_ablation``)."""
    with SummaryWriter(str(run)) as writer:
        writer.add_head_grids({"entropy": np.full((3, 4), 1.0), "cls_mass": np.zeros((3, 4))}, step=0)
        writer.add_head_grids({"entropy": np.full((3, 4), 2.0)}, step=5)
        writer.add_head_grids({"entropy": np.full((3, 4), 3.0), "cls_mass": np.ones((3, 4))}, step=10)
        if with_ablation:
            r = sample_result(mode="zero")
            writer.add_ablation("zero", "accuracy", 0.8, 50, r.heads, r.layers, r.pruning_curve(), step=10)


def token_result() -> AblationResult:
    """The sample sweep as a token-classification one (entity F1, token accuracy)."""
    result = sample_result(task="ner", metric="entity_f1")
    result.baseline_metrics = {"entity_f1": 0.8, "token_accuracy": 0.9}
    result.config["task_type"] = "token-classification"
    return AblationResult(**{k: getattr(result, k) for k in AblationResult.__dataclass_fields__ if k != "metrics"})
