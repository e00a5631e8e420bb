"""The stability alert rules (``bertwatch.core.alerts``) on hand-made histories of each kind, their settings, and
their path through the event file to the plugin's ``/alerts`` route."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest
from werkzeug.test import Client

from bertwatch.callbacks.alerting import Alerting
from bertwatch.core.alerts import (
    ALERT_RULES,
    Alert,
    AlertSettings,
    active_alerts,
    alert_counts,
    alert_table,
    episodes,
)
from bertwatch.core.warnings import BertWatchWarning
from bertwatch.options.settings import WatchSettings
from bertwatch.report.events import read_run
from bertwatch.report.html import build_html
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import make_wsgi_app

L, H = 2, 3


def stable(step: int, rng: np.random.Generator | None = None) -> dict[str, np.ndarray]:
    """A plausible head grid set: max logit ~ 8-12, entropy ~ 1.5-2.5 nats, [CLS]+[SEP] mass ~ 0.1-0.6, with
    small step-to-step noise (a fine-tune going well)."""
    base_rng = np.random.default_rng(0)
    grids = {
        "max_logit": base_rng.uniform(8, 12, (L, H)),
        "entropy": base_rng.uniform(1.5, 2.5, (L, H)),
        "cls_mass": base_rng.uniform(0.05, 0.3, (L, H)),
        "sep_mass": base_rng.uniform(0.05, 0.3, (L, H)),
    }
    if rng is not None:
        grids = {n: g * rng.uniform(0.9, 1.1, g.shape) for n, g in grids.items()}
    return grids


def history_with(changes: dict[int, dict[str, tuple[int, int, float]]], steps=range(0, 60, 10)):
    """A stable history in which, from step s on, ``changes[s] = {stat: (layer, head, value)}`` holds."""
    rng = np.random.default_rng(1)
    hist, held = [], {}
    for step in steps:
        grids = stable(step, rng if step else None)
        held.update(changes.get(step, {}))
        for stat, (layer, head, value) in held.items():
            grids[stat][layer, head] = value
        hist.append((step, grids))
    return hist


def judged(hist, **thresholds):
    return active_alerts(hist[0][1], hist, AlertSettings(**thresholds))


@pytest.mark.fast
def test_a_stable_history_raises_nothing() -> None:
    hist = history_with({})
    for end in range(1, len(hist) + 1):
        assert judged(hist[:end]) == []


@pytest.mark.fast
def test_logit_growth_past_a_multiple_of_the_reference_and_past_tau() -> None:
    ref = stable(0)["max_logit"][1, 2]
    hist = history_with({20: {"max_logit": (1, 2, 3.5 * ref)}})
    [alert] = judged(hist)
    assert (alert.layer, alert.head, alert.rule, alert.since, alert.step) == (1, 2, "logit_growth", 20, 50)
    assert alert.reference == ref and math.isclose(alert.threshold, 3 * ref)
    assert judged(hist, logit_multiple=4.0) == []
    # a head whose reference is non-positive is judged by tau alone
    hist = history_with({0: {"max_logit": (0, 0, -1.0)}, 30: {"max_logit": (0, 0, 101.0)}})
    [alert] = judged(hist)
    assert (alert.rule, alert.since, alert.threshold) == ("logit_growth", 30, 100.0)
    assert judged(hist, logit_bound=150.0) == []


@pytest.mark.fast
def test_entropy_collapse_below_a_fraction_and_by_enough_nats() -> None:
    ref = stable(0)["entropy"][0, 1]
    hist = history_with({10: {"entropy": (0, 1, 0.4 * ref)}})
    [alert] = judged(hist)
    assert (alert.layer, alert.head, alert.rule, alert.stat, alert.since) == (0, 1, "entropy_collapse", "entropy", 10)
    assert math.isclose(alert.threshold, min(0.5 * ref, ref - 0.25))
    assert judged(hist, entropy_fraction=0.3) == []
    # a head near zero entropy halving is not a collapse (min drop)
    hist = history_with({0: {"entropy": (0, 1, 0.2)}, 10: {"entropy": (0, 1, 0.08)}})
    assert judged(hist) == []
    assert [a.rule for a in judged(hist, entropy_min_drop=0.1)] == ["entropy_collapse"]


@pytest.mark.fast
def test_sink_collapse_and_desertion() -> None:
    hist = history_with({20: {"cls_mass": (1, 0, 0.97)}})
    [alert] = judged(hist)
    ref = stable(0)
    assert (alert.rule, alert.stat, alert.since) == ("sink_collapse", "sink_mass", 20)
    assert math.isclose(alert.reference, ref["cls_mass"][1, 0] + ref["sep_mass"][1, 0])
    hist = history_with({40: {"cls_mass": (0, 2, 0.0), "sep_mass": (0, 2, 0.01)}})
    [alert] = judged(hist)
    assert (alert.layer, alert.head, alert.rule, alert.since) == (0, 2, "sink_desertion", 40)
    assert judged(hist, sink_fraction=0.01) == []


@pytest.mark.fast
def test_non_finite_values_are_an_alert_of_their_own() -> None:
    hist = history_with({30: {"entropy": (1, 1, float("nan"))}})
    [alert] = judged(hist)
    assert (alert.rule, alert.stat, alert.since) == ("non_finite", "entropy", 30) and math.isnan(alert.value)


@pytest.mark.fast
def test_since_is_the_first_step_of_the_current_run_and_patience_delays() -> None:
    ref = stable(0)["entropy"][0, 0]
    hist = history_with(
        {10: {"entropy": (0, 0, 0.1 * ref)}, 20: {"entropy": (0, 0, ref)}, 30: {"entropy": (0, 0, 0.1)}}
    )
    assert [(a.since, a.step) for a in judged(hist)] == [(30, 50)]
    assert judged(hist[:3]) == []  # recovered at step 20
    assert [a.since for a in judged(hist[:5], patience=2)] == [30]
    assert judged(hist[:4], patience=2) == []


@pytest.mark.fast
def test_rules_whose_statistics_are_absent_are_silent() -> None:
    hist = [(s, {"cls_mass": g["cls_mass"]}) for s, g in history_with({10: {"cls_mass": (0, 0, 0.99)}})]
    assert judged(hist) == []  # sink rules need sep_mass too
    hist = [(s, {"entropy": g["entropy"]}) for s, g in history_with({10: {"max_logit": (0, 0, 1e4)}})]
    assert judged(hist) == []


@pytest.mark.fast
def test_settings_are_checked_and_carried_by_watch_settings() -> None:
    for bad in ({"entropy_fraction": 1.0}, {"logit_multiple": 1.0}, {"sink_min_change": 0}, {"patience": 0}):
        with pytest.raises(ValueError):
            AlertSettings(**bad)
    with pytest.raises(TypeError):
        AlertSettings(logit_bound="100")
    s = WatchSettings(on_alert="stop", alerts=AlertSettings(entropy_fraction=0.3, patience=2))
    assert s.alerts == AlertSettings(entropy_fraction=0.3, patience=2)
    with pytest.raises(ValueError, match="AlertSettings.sink_fraction"):
        WatchSettings(alerts=AlertSettings(sink_fraction=1.5))
    with pytest.raises(ValueError, match="on_alert"):
        WatchSettings(on_alert="halt")


def _run_alerting(on_alert, hist):
    class Control:
        should_save = should_training_stop = False

    alerting, control = Alerting(on_alert, AlertSettings(), strict=False), Control()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for end in range(1, len(hist) + 1):
            with alerting.contained():
                judgement = alerting.judge(hist[:end], resumed=False)
                if judgement is not None:
                    alerting.act(judgement, control)
    return alerting, control, [w for w in caught if issubclass(w.category, BertWatchWarning)]


@pytest.mark.fast
def test_warn_once_per_head_and_rule_stop_asks_to_save_and_stop_and_a_callable_decides() -> None:
    hist = history_with({10: {"entropy": (0, 0, 0.01)}, 30: {"cls_mass": (1, 1, 0.99)}})
    alerting, control, caught = _run_alerting("warn", hist)
    assert len(caught) == 2 and not control.should_training_stop
    assert [(a.rule, a.since) for a in alerting.raised] == [("entropy_collapse", 10), ("sink_collapse", 30)]
    alerting, control, _ = _run_alerting("stop", hist)
    assert control.should_save and control.should_training_stop and alerting.stop_requested_at == 10
    seen = []
    alerting, control, caught = _run_alerting(
        lambda new: seen.append(new) or ("stop" if len(seen) == 2 else None), hist
    )
    assert [len(n) for n in seen] == [1, 1] and alerting.stop_requested_at == 30 and not caught


@pytest.mark.fast
def test_an_error_in_the_alert_code_is_one_warning_and_turns_alerts_off() -> None:
    def broken(new):
        raise RuntimeError("boom")

    hist = history_with({10: {"entropy": (0, 0, 0.01)}, 30: {"cls_mass": (1, 1, 0.99)}})
    alerting, control, caught = _run_alerting(broken, hist)
    assert alerting.disabled and len(caught) == 1 and "boom" in str(caught[0].message)
    assert not control.should_training_stop


@pytest.mark.fast
def test_table_episodes_and_the_plugin_route(tmp_path) -> None:
    hist = history_with({10: {"entropy": (0, 0, 0.01)}, 20: {"entropy": (0, 0, 3.0)}, 30: {"cls_mass": (1, 2, 0.99)}})
    hist[4][1]["entropy"][0, 0] = 0.01  # a second episode of head (0, 0) from step 40
    run = tmp_path / "run"
    steps, tables, written = [], [], []
    with SummaryWriter(str(run)) as writer:
        for end in range(1, len(hist) + 1):
            alerts = judged(hist[:end])
            written.append(alerts)
            writer.add_alerts(alerts, L, H, hist[end - 1][0])
            steps.append(hist[end - 1][0])
            tables.append(alert_table(alerts, L, H))
    assert alert_counts(written[3]) == {**dict.fromkeys(ALERT_RULES, 0), "sink_collapse": 1, "total": 1}
    expected = episodes(steps, np.stack(tables))
    assert [(e["layer"], e["head"], e["rule"], e["since"], e["last"], e["active"]) for e in expected] == [
        (0, 0, "entropy_collapse", 10, 10, False),
        (1, 2, "sink_collapse", 30, 50, True),
        (0, 0, "entropy_collapse", 40, 40, False),
    ]
    app, _, _ = make_wsgi_app(tmp_path)
    response = Client(app).get("/data/plugin/bertwatch/alerts?run=run")
    assert response.status_code == 200, response.get_data(as_text=True)
    body = json.loads(response.get_data())
    assert body["rules"] == list(ALERT_RULES) and body["steps"] == steps and body["referenceStep"] == 0
    got = [{k: e[k] for k in ("layer", "head", "rule", "since", "last", "active")} for e in body["episodes"]]
    assert got == [{k: e[k] for k in got[0]} for e in expected]
    assert np.allclose([e["value"] for e in body["episodes"]], [e["value"] for e in expected], rtol=1e-6)
    assert Client(app).get("/data/plugin/bertwatch/alerts?run=nope").status_code == 404

    _, training = read_run(run)
    assert training["alerts"]["steps"] == steps and training["alerts"]["reference_step"] == 0
    page = build_html([], training)
    section = page[page.index('<h2 id="alerts">') :]
    assert "3 alerts</strong> (a head or layer in alert from a step until it recovered), 1 still in force" in section
    rows = re.findall(r"<tr><td>(L\d H\d)</td><td><code>(\w+)</code>.*?</td><td>(\d+)</td><td>([^<]*)</td>", section)
    assert rows == [
        ("L1 H2", "sink_collapse", "30", "still in alert"),
        ("L0 H0", "entropy_collapse", "10", "until step 10"),
        ("L0 H0", "entropy_collapse", "40", "until step 40"),
    ]


@pytest.mark.fast
def test_the_report_says_when_no_alert_fired(tmp_path) -> None:
    hist = history_with({})
    with SummaryWriter(str(tmp_path)) as writer:
        for end in range(1, len(hist) + 1):
            writer.add_alerts(judged(hist[:end]), L, H, hist[end - 1][0])
    _, training = read_run(tmp_path)
    assert "This run raised no stability alert." in build_html([], training)


def test_an_alert_names_its_head_as_every_output_does() -> None:
    """Layers and heads from 0, written ``L2 H7``, as the plugin, the report and the start and end lines write them."""
    alert = Alert(2, 7, "entropy_collapse", "entropy", 1, 3, 0.5, 2.3, 1.15)
    assert alert.describe().startswith("L2 H7: entropy collapse since step 1 (entropy 0.5 at step 3, reference 2.3")
