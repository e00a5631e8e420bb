"""The pruning curves as people read them: the "N% at δ" answers in words and the figure of Δ against the share
of heads pruned (importance order, iterative order, random orders), shared by the HTML report and ``bertwatch
ablate``'s summary."""

from __future__ import annotations

import numpy as np

from bertwatch.core.removable import Removable, removable_text
from bertwatch.report.figures import png_bytes, pyplot
from bertwatch.report.result import CURVE_COLUMNS, AblationResult

__all__ = ["answer_lines", "curves_figure"]


def _label(result: AblationResult) -> str:
    return result.metrics[0]["label"] if result.metrics else result.metric


def answer_lines(result: AblationResult) -> list[str]:
    """One line per pruning order: the importance order's answer first, then the iterative order's, then the
    random orders' median (with their range). Empty when the sweep ran no pruning curve.

    Example: ``["importance order: up to 41% of heads (30 of 72) removed with accuracy within 0.01 of the
    baseline (95% interval)", "random orders (5): median 19%, range 10%-27%"]``
    """
    if not result.pruning:
        return []
    found = result.removable()
    total = result.shape[0] * result.shape[1]
    label, delta, level = _label(result), found["delta"], found["confidence"]
    lines = [f"importance order: {removable_text(found['importance'], total, label, delta, level)}"]
    if found["iterative"] is not None:
        lines.append(f"iterative order: {removable_text(found['iterative'], total, label, delta, level)}")
    randoms: list[Removable] = found["random"]
    if randoms:
        fractions = np.array([r.fraction for r in randoms])
        more = " (some orders held at every step tried)" if any(r.censored for r in randoms) else ""
        lines.append(
            f"random orders ({len(randoms)}): median {np.median(fractions):.0%} of heads, range "
            f"{fractions.min():.0%}-{fractions.max():.0%}{more}"
        )
    return lines


def curves_figure(result: AblationResult) -> bytes:
    """PNG: Δ metric against the share of heads pruned, each order's paired-bootstrap interval as a band (the
    random orders: their mean and the range among them), the ``-δ`` line (``+δ`` for a loss) and the importance
    order's answer as a vertical line."""
    plt = pyplot()
    table = result.curves_table()
    col = {name: i for i, name in enumerate(CURVE_COLUMNS)}
    x = 100 * table[:, col["fraction"]]
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    if result.pruning_random:
        ax.fill_between(
            x,
            table[:, col["random_min"]],
            table[:, col["random_max"]],
            color="#bdbdbd",
            alpha=0.5,
            label=f"random orders ({len(result.pruning_random)}): range",
        )
        ax.plot(x, table[:, col["random_mean"]], color="#636363", ls="--", lw=1.2, label="random orders: mean")
    if result.pruning_iterative:
        ax.fill_between(x, table[:, col["iterative_low"]], table[:, col["iterative_high"]], color="#fdae6b", alpha=0.35)
        ax.plot(x, table[:, col["iterative"]], color="#e6550d", marker="s", ms=2.5, label="iterative importance")
    ax.fill_between(
        x,
        table[:, col["importance_low"]],
        table[:, col["importance_high"]],
        color="#9ecae1",
        alpha=0.5,
        label="95% interval",
    )
    ax.plot(x, table[:, col["importance"]], color="#08519c", marker="o", ms=3, label="importance (one-shot)")
    found = result.removable()
    greater = bool(result.config.get("greater_is_better", True))
    ax.axhline(
        -found["delta"] if greater else found["delta"], color="#d7191c", ls=":", lw=1, label=f"δ = {found['delta']:g}"
    )
    ax.axhline(0, color="black", lw=0.6)
    if found["importance"] is not None and found["importance"].step >= 0:
        ax.axvline(100 * found["importance"].fraction, color="#08519c", ls=":", lw=1)
    ax.set_xlabel("heads pruned (%)")
    ax.set_ylabel(f"Δ {_label(result)}")
    ax.set_title(f"pruning orders ({result.mode}), Δ against the unpruned model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig)
