"""The plugin's ``/verdict`` route: every judged step's level and reasons (the reasons of each step, not only the
first write's), the level now and since when, and the run-health signals as the verdict's rules read them."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from werkzeug.test import Client

from bertwatch.core.evidence import Evidence
from bertwatch.core.health_names import (
    HEALTH_SERIES,
    LOSS_EXAMPLES,
    LOSS_MEAN,
    LOSS_STD,
    PREDICTED,
    PREDICTION_COUNT,
    PREDICTION_SHARE,
    PRIOR_LOSS,
    grad_norm_name,
)
from bertwatch.core.readings import probe_loss
from bertwatch.core.verdict import LEVELS, VERDICT_SERIES, VerdictSettings, judge
from bertwatch.tb.views.heads.run_verdict import since_step
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import STEPS, make_wsgi_app
from tests.tb.test_plugin import get, get_json

pytestmark = pytest.mark.fast

FAIL_FROM = 100  # the failing run collapses and its lower layers' gradients vanish from this step


def health_at(step: int, failing: bool, layers: int = 6) -> dict[str, float]:
    """Synthetic run-health signals of a 6-layer model on 32 probe examples: a failing run collapses to one class
    with its gradients fading by 10x every 25 steps from ``FAIL_FROM``, its loss at ln 2 with a small spread; a
    healthy one learns (its per-example losses spread as it does)."""
    fade = 10.0 ** (-(step - FAIL_FROM) / 25) if failing and step >= FAIL_FROM else 1.0
    count = 32 if failing and step >= FAIL_FROM else 18
    loss = math.log(2) * (1.0 if failing else 1 - 0.5 * step / STEPS[-1])
    std = 0.02 if failing else 0.05 + 0.4 * step / STEPS[-1]
    values = {grad_norm_name(layer): (2.0 + layer) * fade for layer in range(layers)}
    values.update({PREDICTION_SHARE: count / 32, PREDICTION_COUNT: count, PREDICTED: 32, LOSS_MEAN: loss})
    values.update({LOSS_STD: std, LOSS_EXAMPLES: 32, PRIOR_LOSS: math.log(2)})
    return values


def write_verdict_run(run_dir: Path, failing: bool, settings: VerdictSettings | None = None) -> list:
    """A run with the ``run_health`` series and the verdict judged by ``core.verdict.judge`` at every step of
    ``STEPS`` (the run's probe passes its only evidence), written as the callbacks write them; returns the
    verdicts."""
    settings = settings or VerdictSettings()
    evidence, verdicts = Evidence(max_steps=STEPS[-1]), []
    with SummaryWriter(str(run_dir)) as w:
        for step in STEPS:
            health = health_at(step, failing)
            evidence.note_probe(step, health)
            verdict = judge(evidence, settings)
            w.add_named_values(HEALTH_SERIES, health, step, "run health")
            values = {"level": float(verdict.level), "known": float(verdict.known)}
            w.add_named_values(VERDICT_SERIES, values, step, "verdict")
            w.add_step_text(VERDICT_SERIES, list(verdict.reasons), step, levels=list(LEVELS), settings=asdict(settings))
            verdicts.append(verdict)
    return verdicts


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bw_verdict")
    failing = write_verdict_run(root / "failing", failing=True)
    healthy = write_verdict_run(root / "healthy", failing=False)
    with SummaryWriter(str(root / "plain")) as w:
        w.add_named_values("pattern_classes", {"vertical": 0.5}, 0)
    app, _, _ = make_wsgi_app(root)
    return Client(app), failing, healthy


def test_every_steps_reasons_come_back_with_its_level(runs) -> None:
    client, failing, _ = runs
    out = get_json(client, "verdict", run="failing")
    assert out["steps"] == STEPS and out["level"] == [v.level for v in failing]
    assert out["reasons"] == [list(v.reasons) for v in failing]
    distinct = {tuple(r) for r in out["reasons"] if r}
    assert len(distinct) >= 3  # the reasons change from step to step, and each step keeps its own
    assert out["now"]["label"] == "failing" and out["now"]["reasons"] == list(failing[-1].reasons)
    first_failing = next(v.step for v in failing if v.level == 2)
    assert out["now"]["since"] == first_failing
    assert out["now"]["reasons"][0].startswith("32 of 32 probe predictions in one class and the gradient norm")


def test_the_health_lines_are_what_the_rules_read(runs) -> None:
    client, _, _ = runs
    out = get_json(client, "verdict", run="failing")
    health = out["health"]
    assert health["steps"] == STEPS and health["lowerLayers"] == [0, 1]  # the first third of 6 layers
    expected = [health_at(s, True)[grad_norm_name(1)] / health_at(0, True)[grad_norm_name(1)] for s in STEPS]
    np.testing.assert_allclose(health["lowerGradient"], expected, rtol=1e-6)
    np.testing.assert_allclose(health["predictionShare"], [health_at(s, True)[PREDICTION_SHARE] for s in STEPS])
    np.testing.assert_allclose(health["lossRatio"], 1.0, rtol=1e-6)
    readings = [probe_loss(health_at(s, True)) for s in STEPS]  # the verdict's own reading of the probe loss
    np.testing.assert_allclose(health["lossLow"], [r.low / r.baseline for r in readings], rtol=1e-6)
    np.testing.assert_allclose(health["lossHigh"], [r.high / r.baseline for r in readings], rtol=1e-6)
    assert health["lossSays"] == [0] * len(STEPS)  # at ln 2 with a spread of 0.02: not below the constant's
    learning = get_json(client, "verdict", run="healthy")["health"]
    assert learning["lossSays"][0] == 0 and learning["lossSays"][-1] == 1  # below it by the end
    assert out["settings"] == asdict(VerdictSettings())


def test_a_healthy_run_and_a_run_without_a_verdict(runs) -> None:
    client, _, healthy = runs
    out = get_json(client, "verdict", run="healthy")
    assert set(out["level"]) == {0} and out["now"]["since"] == 0
    assert out["labels"] == [v.label for v in healthy]  # "cannot tell" where nothing yet showed learning
    assert out["labels"][0] == "cannot tell" and out["labels"][-1] == "healthy"
    assert out["now"]["reasons"] == [  # a healthy verdict says what it stands on
        "probe loss 0.347 ± 0.158 (32 examples) against 0.693 for the constant prediction: below 95% of it"
    ]
    assert all(v.level == 0 for v in healthy)
    assert get(client, "verdict", run="plain").status_code == 404


def test_since_is_the_first_step_of_the_trailing_level() -> None:
    assert since_step([0, 10, 20, 30], [0, 1, 2, 2]) == 20 and since_step([], []) is None


def test_a_run_judged_with_other_thresholds_serves_them(tmp_path) -> None:
    settings = VerdictSettings(vanish_fraction=0.001, risk_fraction=0.5)
    write_verdict_run(tmp_path / "strict", failing=True, settings=settings)
    app, _, _ = make_wsgi_app(tmp_path)
    out = get_json(Client(app), "verdict", run="strict")
    assert out["settings"]["vanish_fraction"] == 0.001 and out["settings"]["risk_fraction"] == 0.5


def test_a_verdict_written_without_its_text_serves_no_reasons(tmp_path) -> None:
    with SummaryWriter(str(tmp_path / "bare")) as w:
        for step, level in ((0, 0), (10, 1), (20, 1)):
            w.add_named_values(VERDICT_SERIES, {"level": float(level)}, step, "verdict")
    out = get_json(Client(make_wsgi_app(tmp_path)[0]), "verdict", run="bare")
    assert out["level"] == [0, 1, 1] and out["reasons"] == [None, None, None]
    assert out["now"] == {"step": 20, "level": 1, "label": "at risk", "since": 10, "reasons": None}
    assert out["health"] == {"steps": []} and out["settings"] == asdict(VerdictSettings())
