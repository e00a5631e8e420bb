"""The plugin's ``/runs`` route against ``bertwatch sweep``: the same log folder read two independent ways (TensorBoard's
data provider, the event files by bertwatch's own reader) gives the same table, worst first, with each run's
setting from the Trainer's ``args`` text and the runs to stop now."""

from __future__ import annotations

import math

import pytest
from werkzeug.test import Client

from bertwatch.core.sweep_verdicts import sweep_json
from bertwatch.report.sweep_table import read_sweep
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.sweep_logs import write_many, write_run
from tests.support.tb_helpers import make_wsgi_app
from tests.tb.test_plugin import get_json

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bw_runs") / "logs"
    names = write_many(root, 16, seed=3)
    write_run(root / "no-trainer-logs", [(0, 0, 0, math.nan, ""), (40, 2, 1, -5.0, "collapsed")])
    with SummaryWriter(str(root / "no-verdict")) as w:
        w.add_named_values("pattern_classes", {"vertical": 0.5}, 0)
    app, _, _ = make_wsgi_app(root)
    return root, Client(app), names


def test_the_route_gives_the_table_bertwatch_sweep_gives(logs) -> None:
    root, client, names = logs
    got = get_json(client, "runs")
    want = sweep_json(read_sweep(root), "")
    assert [r["run"] for r in got["runs"]] == [r["run"] for r in want["runs"]]
    assert len(got["runs"]) == len(names) + 1 and got["without"] == ["no-verdict"]
    for mine, theirs in zip(got["runs"], want["runs"]):
        assert mine.keys() == theirs.keys()
        for key in mine:
            if isinstance(theirs[key], float):
                assert mine[key] == pytest.approx(theirs[key], rel=1e-6), (mine["run"], key)
            else:
                assert mine[key] == theirs[key], (mine["run"], key)
    assert got["stop_now"] == want["stop_now"] and got["steps_saved"] == want["steps_saved"] > 0


def test_ranked_worst_first_with_the_trainers_setting(logs) -> None:
    _, client, _ = logs
    runs = get_json(client, "runs")["runs"]
    ranks = [r["rank"] for r in runs]
    assert ranks == sorted(ranks, reverse=True)
    assert {r["label"] for r in runs} == {"failing", "at risk", "healthy", "cannot tell"}
    bare = next(r for r in runs if r["run"] == "no-trainer-logs")
    assert (bare["learning_rate"], bare["seed"], bare["max_steps"], bare["ended"]) == (None, None, None, False)
    first = next(r for r in runs if r["run"] == "run-00")
    assert first["seed"] == 0 and first["max_steps"] == 100 and first["ended"] is True
    assert 1e-5 <= first["learning_rate"] <= 1e-2


def test_a_folder_without_verdicts_answers_an_empty_table(tmp_path) -> None:
    with SummaryWriter(str(tmp_path / "plain")) as w:
        w.add_named_values("pattern_classes", {"vertical": 0.5}, 0)
    app, _, _ = make_wsgi_app(tmp_path)
    got = get_json(Client(app), "runs")
    assert got["runs"] == [] and got["stop_now"] == [] and got["steps_saved"] == 0 and got["without"] == ["plain"]
