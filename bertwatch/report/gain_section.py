"""The report's section for a physically pruned model: what ``bertwatch prune`` measured it buys."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from bertwatch.core.task_names import metric_label

__all__ = ["GAIN_FILE", "gain_files", "gain_section"]

#: Written by ``bertwatch prune`` beside the pruned model: parameters, latency, throughput, metric.
GAIN_FILE = "pruning_gain.json"


def gain_files(root: Path) -> list[Path]:
    """``pruning_gain.json`` files in ``root`` and the folders below it, sorted."""
    if root.is_file():
        return [root] if root.name == GAIN_FILE else []
    return sorted(root.rglob(GAIN_FILE)) if root.is_dir() else []


def _num(value: Any, form: str) -> str:
    return "–" if value is None else format(value, form)


def gain_section(path: Path) -> str:
    """An HTML fragment (every value escaped): parameters, latency and throughput of the pruned model against the
    full one, and the metric with its 95% interval when an evaluation set was given."""
    gain = json.loads(path.read_text(encoding="utf-8"))
    p, lat, thr = gain["parameters"], gain["latency_s"], gain["throughput"]
    rows = [
        ("parameters", _num(p["full"], ","), _num(p["pruned"], ","), _num(p["ratio"], ".3f") + " (pruned/full)"),
        (
            "latency (ms per batch)",
            _num(lat["full"] * 1e3, ".1f"),
            _num(lat["pruned"] * 1e3, ".1f"),
            "speed-up x" + _num(gain.get("speedup"), ".2f"),
        ),
        ("throughput (examples/s)", _num(thr["full"], ".1f"), _num(thr["pruned"], ".1f"), ""),
    ]
    metric = gain.get("metric")
    if metric:
        rows.append(
            (
                f"{metric_label(metric['metric'])} ({metric['num_examples']} examples)",
                _num(metric["full"], ".4f"),
                _num(metric["pruned"], ".4f"),
                f"Δ {_num(metric['delta'], '+.4f')}, 95% CI [{_num(metric['ci_low'], '+.4f')}, "
                f"{_num(metric['ci_high'], '+.4f')}]",
            )
        )
    removed = sum(len(h) for h in gain.get("removed_heads", {}).values())
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<h2>Pruned model: {html.escape(str(path.parent.name))}</h2>"
        f"<p>{removed} heads removed physically (bertwatch prune); measured on {html.escape(str(gain['device']))}, "
        f"batch {int(gain['batch_size'])} × {int(gain['tokens'])} tokens.</p>"
        "<table><tr><th></th><th>full</th><th>pruned</th><th></th></tr>" + cells + "</table>"
    )
