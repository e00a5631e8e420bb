"""The outlier-growth alert (``core.alerts``, rule ``outlier_growth``): one rule per layer on the ``[layers, 1]`` grid
of ``ffn_inf_norm``, judged on hand-made histories; its episodes name the layer (head None) in the table, the
plugin's route, the report and the warnings."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from werkzeug.test import Client

from bertwatch.core.alerts import (
    ALERT_RULES,
    LAYER_RULES,
    AlertSettings,
    active_alerts,
    alert_counts,
    alert_table,
    episodes,
)
from bertwatch.options.settings import WatchSettings
from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import make_wsgi_app

pytestmark = pytest.mark.fast

LAYERS, HEADS = 4, 3
REFERENCE = np.array([[3.0], [8.0], [12.0], [20.0]])


def series(ratios: dict[int, list[float]], steps: int = 8, noise: float = 0.0, seed: int = 0):
    """``(step, {"ffn_inf_norm": [layers, 1]})`` every 10 steps: the reference times each step's ratio (1 where
    ``ratios`` says nothing), times a multiplicative noise of up to ``noise``."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(steps):
        ratio = np.array([[ratios.get(layer, [1.0] * steps)[k]] for layer in range(LAYERS)])
        wobble = 1 + rng.uniform(-noise, noise, REFERENCE.shape) if k else 1.0
        out.append((10 * k, {"ffn_inf_norm": REFERENCE * ratio * wobble}))
    return out


def judged(history, settings=None):
    return active_alerts(history[0][1], history, settings)


def test_a_noisy_healthy_series_does_not_alert() -> None:
    """Healthy fine-tunes move a layer's max |x| by tens of percent and back: never past the multiple."""
    settings = AlertSettings()
    for seed in range(20):
        hist = series({1: [1.0, 1.3, 1.5, 1.2, 1.6, 1.4, 1.7, 1.5]}, noise=0.15, seed=seed)
        assert all(judged(hist[:end], settings) == [] for end in range(1, len(hist) + 1)), seed


def test_growth_past_the_multiple_alerts_the_layer_and_patience_delays_it() -> None:
    multiple = AlertSettings().outlier_multiple
    grow = [1.0, 1.1, 1.2, multiple * 1.05, multiple * 1.3, multiple * 2, multiple * 3, multiple * 3]
    hist = series({2: grow})
    alerts = judged(hist)
    assert [(a.layer, a.head, a.rule, a.stat, a.since) for a in alerts] == [
        (2, None, "outlier_growth", "ffn_inf_norm", 30)
    ]
    alert = alerts[0]
    assert alert.reference == REFERENCE[2, 0] and alert.threshold == pytest.approx(multiple * REFERENCE[2, 0])
    assert alert.value == pytest.approx(REFERENCE[2, 0] * multiple * 3)
    assert alert.describe().startswith("L2: outlier growth since step 30 (ffn_inf_norm ")
    assert [a.since for a in judged(hist, AlertSettings(patience=3))] == [30]
    assert judged(hist[:5], AlertSettings(patience=3)) == []  # two steps above it so far
    assert judged(hist, AlertSettings(outlier_multiple=multiple * 3.5)) == []
    assert alert_counts(alerts)["outlier_growth"] == 1 and alert_counts(alerts)["total"] == 1


def test_a_drop_and_a_return_end_the_episode_and_non_finite_values_alert() -> None:
    multiple = AlertSettings().outlier_multiple
    hist = series({0: [1, 3 * multiple, 1, 1, 1, 1, 1, 1]})
    assert judged(hist[:2]) and judged(hist) == []
    broken = series({3: [1, 1, 1, 1, 1, 1, 1, math.inf]})
    assert [(a.layer, a.rule) for a in judged(broken)] == [(3, "outlier_growth")]
    nan = series({3: [1, 1, 1, 1, 1, 1, 1, math.nan]})
    assert [(a.layer, a.rule) for a in judged(nan)] == [(3, "outlier_growth")]
    assert all(a.rule != "non_finite" for a in judged(nan))


def test_a_layer_without_a_positive_reference_and_a_run_without_the_statistic_are_silent() -> None:
    hist = series({0: [1, 50, 50, 50, 50, 50, 50, 50]})
    hist[0][1]["ffn_inf_norm"][0, 0] = 0.0
    assert judged(hist) == []
    assert active_alerts({"entropy": np.ones((2, 2))}, [(0, {"entropy": np.ones((2, 2))})]) == []


def test_the_multiple_is_checked_and_carried_by_watch_settings() -> None:
    for bad in (1.0, 0.5, math.inf):
        with pytest.raises(ValueError, match="outlier_multiple"):
            AlertSettings(outlier_multiple=bad)
    assert WatchSettings(alerts=AlertSettings(outlier_multiple=4.0)).alerts.outlier_multiple == 4.0
    (flag,) = next(f for f in dataclasses.fields(AlertSettings) if f.name == "outlier_multiple").metadata["flags"]
    assert flag.names == ("--alert-outlier-multiple",)
    assert "outlier_growth" in ALERT_RULES and LAYER_RULES == {"outlier_growth"}


def test_the_layer_alert_reaches_the_table_the_route_and_the_report(tmp_path) -> None:
    multiple = AlertSettings().outlier_multiple
    hist = series({1: [1, 1, 3 * multiple, 3 * multiple, 1, 1, 1, 1], 3: [1] * 5 + [3 * multiple] * 3})
    steps, tables = [], []
    run = tmp_path / "run"
    with SummaryWriter(str(run)) as writer:
        for end in range(1, len(hist) + 1):
            alerts = judged(hist[:end])
            writer.add_alerts(alerts, LAYERS, HEADS, hist[end - 1][0])
            steps.append(hist[end - 1][0])
            tables.append(alert_table(alerts, LAYERS, HEADS))
    rule = ALERT_RULES.index("outlier_growth")
    assert np.isfinite(tables[-1][3, 0, rule]).all() and np.isnan(tables[-1][3, 1:, rule]).all()
    found = [
        (e["layer"], e["head"], e["rule"], e["since"], e["last"], e["active"])
        for e in episodes(steps, np.stack(tables))
    ]
    assert found == [(1, None, "outlier_growth", 20, 30, False), (3, None, "outlier_growth", 50, 70, True)]
    app, _, _ = make_wsgi_app(tmp_path)
    body = json.loads(Client(app).get("/data/plugin/bertwatch/alerts?run=run").get_data())
    assert [(e["layer"], e["head"]) for e in body["episodes"]] == [(1, None), (3, None)]
    assert body["quantities"]["outlier_growth"] == "ffn_inf_norm"
    _, training = read_run(run)
    page = build_html([], training)
    section = page[page.index('<h2 id="alerts">') :]
    rows = re.findall(r"<tr><td>(L\d(?: H\d)?)</td><td><code>(\w+)</code>", section)
    assert rows == [("L3", "outlier_growth"), ("L1", "outlier_growth")]
