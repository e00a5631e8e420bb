"""The pruning curves as people read them: the "N% at δ" answers in words and the figure of Δ against the share
of heads pruned (importance order, iterative order, random orders), shared by the HTML report and ``bertwatch
ablate``'s summary."""

from __future__ import annotations

from bertwatch.core.removable import answer_lines as core_answer_lines
from bertwatch.report.figures import png_bytes, pyplot
from bertwatch.report.result import CURVE_COLUMNS, AblationResult

__all__ = ["answer_lines", "curves_figure"]


def answer_lines(result: AblationResult) -> list[str]:
    """The pruning answers (:func:`bertwatch.core.removable.answer_lines`): the headline with what the evaluation
    set resolves, then one line per order. Empty when the sweep ran no pruning curve.

    Example: ``["128 examples cannot tell a change of 0.01 (one example is 0.0078; the 95% intervals are about
    ±0.037): at δ = 0.04, 30% of the heads (21 of 72) can go; about 1,800 examples would resolve 0.01",
    "importance order: no pruning step keeps accuracy within 0.01 of the baseline (95% interval)", ...]``
    """
    if not result.pruning:
        return []
    total = result.shape[0] * result.shape[1]
    return core_answer_lines(result.removable_json(), total, result.metric_label)


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
    ax.set_ylabel(f"Δ {result.metric_label}")
    ax.set_title(f"pruning orders ({result.mode}), Δ against the unpruned model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig)
