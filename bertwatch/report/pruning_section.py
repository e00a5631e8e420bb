"""The pruning curves as people read them: the "N% at δ" answers in words and the figure of Δ against the share
of heads pruned (importance order, iterative order, random orders) in the plugin's colours, shared by the HTML
report and ``bertwatch ablate``'s summary."""

from __future__ import annotations

from bertwatch.core.removable import answer_lines as core_answer_lines
from bertwatch.report.figures import png_bytes, pyplot
from bertwatch.report.result import CURVE_COLUMNS, AblationResult
from bertwatch.tb.colours import band_opacity, mark_hex, pruning_hex

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
    order's answer as a vertical line; each in the colour the plugin's pruning chart gives it
    (:func:`bertwatch.tb.colours.pruning_hex`, :func:`~bertwatch.tb.colours.mark_hex`); the bands and the δ line
    carry the plugin's ids as their ``gid``."""
    plt = pyplot()
    table = result.curves_table()
    col = {name: i for i, name in enumerate(CURVE_COLUMNS)}
    x = 100 * table[:, col["fraction"]]
    fig, ax = plt.subplots(figsize=(5.6, 3.4))

    def band(order: str, low: str, high: str, label: str | None = None) -> None:
        ax.fill_between(x, table[:, col[low]], table[:, col[high]], color=pruning_hex(order), lw=0,
                        alpha=band_opacity(order), label=label, gid=f"pruning-{order}-band")  # fmt: skip

    if result.pruning_random:
        band("random", "random_min", "random_max", f"random orders ({len(result.pruning_random)}): range")
        ax.plot(x, table[:, col["random_mean"]], color=pruning_hex("randomMean"), ls="--", lw=1.2,
                label="random orders: mean")  # fmt: skip
    if result.pruning_iterative:
        band("iterative", "iterative_low", "iterative_high")
        ax.plot(x, table[:, col["iterative"]], color=pruning_hex("iterative"), marker="s", ms=2.5,
                label="iterative importance")  # fmt: skip
    band("importance", "importance_low", "importance_high", "95% interval")
    ax.plot(x, table[:, col["importance"]], color=pruning_hex("importance"), marker="o", ms=3,
            label="importance (one-shot)")  # fmt: skip
    found = result.removable()
    greater = bool(result.config.get("greater_is_better", True))
    ax.axhline(-found["delta"] if greater else found["delta"], color=mark_hex("delta"), ls=":", lw=1,
               label=f"δ = {found['delta']:g}", gid="pruning-delta-line")  # fmt: skip
    ax.axhline(0, color=mark_hex("zero"), lw=0.6, gid="pruning-zero")
    if found["importance"] is not None and found["importance"].step >= 0:
        ax.axvline(100 * found["importance"].fraction, color=mark_hex("marker"), ls=":", lw=1, gid="pruning-answer")
    ax.set_xlabel("heads pruned (%)")
    ax.set_ylabel(f"Δ {result.metric_label}")
    ax.set_title(f"pruning orders ({result.mode}), Δ against the unpruned model")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig)
