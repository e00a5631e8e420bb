"""The bertwatch TensorBoard plugin backend: in-process (EventMultiplexer + MultiplexerDataProvider +
TensorBoardWSGI + werkzeug's test client) and against a real ``tensorboard`` process."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util
from werkzeug.test import Client

import bertwatch.tb.plugin as plugin_mod
from bertwatch.core import rules
from bertwatch.tb import queries, series
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import (  # noqa: E402
    ABLATION_F1,
    ABLATION_MAJORITY,
    CURVES_ANSWER,
    STEPS,
    TOKENS_A,
    XSS,
    XSS_RUN,
    ablation_curves,
    ablation_tables,
    ablation_trivial,
    embedding_coords,
    frontend_file,
    frontend_files,
    http_get,
    http_json,
    make_wsgi_app,
    synthetic_grids,
    synthetic_maps,
    tensorboard_server,
    wait_for,
    write_demo_logdir,
)

BASE = "/data/plugin/bertwatch/"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bw") / "logs"
    write_demo_logdir(root)
    # a series TensorBoard must drop (no data_class) and one from a newer format (must be skipped)
    with SummaryWriter(str(root / "odd")) as w:
        s = summary_pb2.Summary()
        s.value.add(
            tag="bertwatch/heads/no_class",
            metadata=summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(
                    plugin_name="bertwatch", content=b'{"version":1,"kind":"head_grid"}'
                )
            ),
            tensor=tensor_util.make_tensor_proto(np.zeros((2, 2), np.float32)),
        )
        s.value.add(
            tag="bertwatch/heads/future",
            metadata=md.create_summary_metadata("head_grid", data_class=summary_pb2.DATA_CLASS_TENSOR, stat="future"),
            tensor=tensor_util.make_tensor_proto(np.zeros((2, 2), np.float32)),
        )
        s.value[1].metadata.plugin_data.content = json.dumps({"version": 99, "kind": "head_grid"}).encode()
        w.add_summary(s, 0)
    return root


@pytest.fixture(scope="module")
def client(logdir):
    app, _, _ = make_wsgi_app(logdir)
    return Client(app)


def get(client, route, **params):
    r = client.get(BASE + route + ("?" + urllib.parse.urlencode(params) if params else ""))
    return r


def get_json(client, route, **params):
    r = get(client, route, **params)
    assert r.status_code == 200, (route, params, r.status_code, r.get_data(as_text=True))
    assert r.headers["Content-Type"].startswith("application/json")
    return json.loads(r.get_data())


# ---------------------------------------------------------------------------------------------------- listing


def test_plugin_listed_as_iframe_module(client):
    listing = json.loads(client.get("/data/plugins_listing").get_data())
    entry = listing["bertwatch"]
    assert entry["enabled"] is True and entry["tab_name"] == "BERT heads"
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/bertwatch/index.js"}


def test_plugin_entry_page_has_csp(client):
    r = client.get("/data/plugin_entry.html?name=bertwatch")
    assert r.status_code == 200
    assert "script-src" in r.headers["Content-Security-Policy"]
    assert 'import("./index.js")' in r.get_data(as_text=True)


@pytest.mark.fast
def test_tags(client):
    tags = get_json(client, "tags")
    runs = tags["runs"]
    assert {"finetune-a", "finetune-b", XSS_RUN} <= set(runs)
    a = runs["finetune-a"]
    assert a["bertwatch/heads/cls_mass"]["kind"] == "head_grid"
    assert a["bertwatch/heads/cls_mass"]["stat"] == "cls_mass"
    assert a["bertwatch/heads/cls_mass"]["maxStep"] == STEPS[-1]
    assert (a["bertwatch/heads/cls_mass"]["layers"], a["bertwatch/heads/cls_mass"]["heads"]) == (6, 12)
    assert a["bertwatch/attention/00"]["kind"] == "attention_map" and a["bertwatch/attention/01"]["index"] == 1
    assert a["bertwatch/ablation/uniform/pruning"]["kind"] == "pruning_curve"
    assert a["bertwatch/clustering/js_mds"]["kind"] == "head_embedding"
    assert not any(t.startswith("bertwatch_layers/") for t in a)  # ordinary scalars belong to the scalars plugin
    # no data_class: TensorBoard drops it; newer format: listed as skipped, not served
    assert "bertwatch/heads/no_class" not in runs.get("odd", {})
    assert "bertwatch/heads/future" not in runs.get("odd", {})
    assert {"run": "odd", "tag": "bertwatch/heads/future", "reason": "written by a newer bertwatch format"} in tags[
        "skipped"
    ]


# ---------------------------------------------------------------------------------------------------- grids


@pytest.mark.fast
def test_steps_and_grid_values_equal_what_was_written(client):
    tag = "bertwatch/heads/entropy"
    steps = get_json(client, "steps", run="finetune-a", tag=tag)
    assert steps["steps"] == STEPS and len(steps["wallTimes"]) == len(STEPS)
    written = {s: synthetic_grids(s, seed=0)["entropy"] for s in STEPS}
    assert steps["min"] == pytest.approx(min(g.min() for g in written.values()))
    assert steps["max"] == pytest.approx(max(g.max() for g in written.values()))
    latest = get_json(client, "grid", run="finetune-a", tag=tag)
    assert latest["step"] == STEPS[-1] and (latest["layers"], latest["heads"]) == (6, 12)
    assert latest["stat"] == "entropy" and latest["numSteps"] == len(STEPS)
    np.testing.assert_array_equal(np.array(latest["values"], np.float32), written[STEPS[-1]])
    g = get_json(client, "grid", run="finetune-a", tag=tag, step=50)
    assert g["step"] == 50
    np.testing.assert_array_equal(np.array(g["values"], np.float32), written[50])


def test_grid_nan_and_infinities_arrive_as_strings(client):
    g = get_json(client, "grid", run=XSS_RUN, tag="bertwatch/heads/sep_to_sep")
    assert g["values"][0][0] == "NaN"
    h = get_json(client, "grid", run=XSS_RUN, tag="bertwatch/heads/head_importance")
    assert h["values"][5][11] == "Infinity" and h["values"][5][10] == "-Infinity"


def test_trajectory_and_layer_means(client):
    tag = "bertwatch/heads/sep_mass"
    written = np.stack([synthetic_grids(s, seed=0)["sep_mass"] for s in STEPS])
    t = get_json(client, "trajectory", run="finetune-a", tag=tag, layer=4, head=7)
    assert t["steps"] == STEPS and t["numSteps"] == len(STEPS)
    np.testing.assert_array_equal(np.array(t["values"], np.float32), written[:, 4, 7])
    short = get_json(client, "trajectory", run="finetune-a", tag=tag, layer=4, head=7, max_points=6)
    assert short["steps"][0] == STEPS[0] and short["steps"][-1] == STEPS[-1] and len(short["steps"]) < len(STEPS)
    values = written[:, 4, 7]
    assert STEPS[int(values.argmax())] in short["steps"] and STEPS[int(values.argmin())] in short["steps"]
    m = get_json(client, "layer_means", run="finetune-a", tag=tag)
    assert m["steps"] == STEPS and len(m["means"]) == 6
    np.testing.assert_allclose(np.array(m["means"]), written.mean(axis=2).T, rtol=1e-6)
    m3 = get_json(client, "layer_means", run="finetune-a", tag=tag, max_points=3)
    assert m3["steps"] == [STEPS[0], STEPS[6], STEPS[-1]]


def test_minmax_decimation_keeps_extremes():
    values = np.sin(np.arange(5000) / 50.0)
    values[1234] = 9.0
    values[4321] = -9.0
    values[77] = np.nan
    keep = series.minmax_indices(values, 300)
    assert len(keep) <= 302 and keep[0] == 0 and keep[-1] == 4999
    assert 1234 in keep and 4321 in keep
    assert list(series.decimate_indices(10, 0)) == list(range(10))


def test_labels_follow_clarks_thresholds_and_precedence(client):
    grids = {k: np.zeros((1, 8)) for k in ("cls_mass", "sep_mass", "punct_mass", "prev", "next", "entropy")}
    grids["next"][0, 1] = 0.51
    grids["prev"][0, 2] = 0.6
    grids["entropy"][0, 3] = 3.81
    grids["cls_mass"][0, 4] = 0.61
    grids["sep_mass"][0, 5] = 0.7
    grids["punct_mass"][0, 6] = 0.65
    grids["prev"][0, 7] = grids["next"][0, 7] = 0.9  # both: prev wins over next
    grids["entropy"][0, 7] = 4.0  # ... broad over prev
    grids["sep_mass"][0, 7] = 0.61  # ... sep over broad
    grids["punct_mass"][0, 7] = np.nan  # NaN never labels
    labels = rules.behaviour_labels(grids).tolist()
    assert labels == [[None, "next", "prev", "broad", "cls", "sep", "punct", "sep"]]
    assert rules.behaviour_labels({"prev": np.full((1, 1), 0.5)}).tolist() == [[None]]  # strictly greater
    assert rules.behaviour_labels({"cls_mass": np.full((1, 1), 0.6, np.float32)}).tolist() == [[None]]

    out = get_json(client, "labels", run="finetune-a", step=STEPS[-1])
    g = synthetic_grids(STEPS[-1], seed=0)
    expected = rules.behaviour_labels({k: g[k].astype(np.float64) for k in grids})
    assert out["labels"] == expected.tolist()
    assert out["stepsUsed"]["cls_mass"] == STEPS[-1]
    between = get_json(client, "labels", run="finetune-a", step=STEPS[3] + 1)  # nearest logged step at or before
    assert set(between["stepsUsed"].values()) == {STEPS[3]}
    assert [r["label"] for r in out["rules"]] == ["next", "prev", "broad", "cls", "sep", "punct"]
    assert out["rules"] == get_json(client, "labels")["rules"]  # without a run: only the rules
    assert [(r["stat"], r["threshold"], r["glyph"]) for r in out["rules"]] == [
        ("next", 0.5, "→"),
        ("prev", 0.5, "←"),
        ("entropy", 3.8, "B"),
        ("cls_mass", 0.6, "C"),
        ("sep_mass", 0.6, "S"),
        ("punct_mass", 0.6, "P"),
    ]
    assert out["patterns"]["classes"][3] == "vertical+diagonal"


# ---------------------------------------------------------------------------------------------------- others


def test_attention_maps(client):
    tag = "bertwatch/attention/00"
    steps = get_json(client, "steps", run="finetune-a", tag=tag)["steps"]
    assert steps[-1] == STEPS[-1] and STEPS[0] in steps
    a = get_json(client, "attention", run="finetune-a", tag=tag, layer=2)
    assert a["tokens"] == TOKENS_A and a["index"] == 0 and a["step"] == STEPS[-1]
    assert (a["layers"], a["heads"], a["length"], a["layer"], a["head"]) == (6, 12, len(TOKENS_A), 2, None)
    assert a["segments"][0] == 0 and a["segments"][-1] == 1
    expected = synthetic_maps(TOKENS_A, seed=0 + STEPS[-1]).astype(np.float16)
    np.testing.assert_array_equal(np.array(a["maps"], np.float16), expected[2])
    one = get_json(client, "attention", run="finetune-a", tag=tag, layer=2, head=5, step=STEPS[0])
    np.testing.assert_array_equal(
        np.array(one["maps"], np.float16), synthetic_maps(TOKENS_A, seed=0).astype(np.float16)[2, 5]
    )


def test_attention_tokens_are_data_not_markup(client):
    r = get(client, "attention", run=XSS_RUN, tag="bertwatch/attention/00")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    assert json.loads(r.get_data())["tokens"][1] == XSS


@pytest.mark.fast
def test_ablation_and_embedding(client):
    baseline, heads_t, layers_t, pruning = ablation_tables(seed=0)
    a = get_json(client, "ablation", run="finetune-a")
    assert a["modes"] == ["uniform", "zero"] and a["mode"] == "uniform"
    assert a["metric"] == "accuracy" and a["baseline"] == pytest.approx(baseline) and a["numExamples"] == 872
    np.testing.assert_array_equal(np.array(a["heads"], np.float32), heads_t)
    np.testing.assert_array_equal(np.array(a["layers"], np.float32), layers_t)
    np.testing.assert_array_equal(np.array(a["pruning"], np.float32), pruning)
    assert a["taskType"] == "sequence-classification" and a["taskLabel"] == "sequence classification"
    assert [(m["name"], m["label"]) for m in a["metrics"]] == [("accuracy", "accuracy"), ("f1", "F1")]
    assert [m["baseline"] for m in a["metrics"]] == pytest.approx([baseline, ABLATION_F1])
    assert "predicted class" in a["metrics"][0]["description"]
    assert a["description"] == "sequence classification · accuracy, F1"
    z = get_json(client, "ablation", run="finetune-a", mode="zero")
    assert z["mode"] == "zero" and z["pruning"] is None
    # tables written without a task type: the metric still gets its name and baseline, no task is invented
    assert z["taskType"] is None and z["taskLabel"] is None and z["description"] == "accuracy"
    assert [(m["name"], m["label"]) for m in z["metrics"]] == [("accuracy", "accuracy")]
    assert z["metrics"][0]["baseline"] == pytest.approx(baseline)
    # the full model against the constant answer: carried by the tables' content, said in Python's words
    trivial = a["trivial"]
    assert trivial["noBetter"] is False and trivial["collapsed"] is False and trivial["constantName"] == "positive"
    assert (
        trivial["value"] == pytest.approx(ABLATION_MAJORITY) and trivial["lines"] == ablation_trivial(baseline).lines()
    )
    assert trivial["lines"][0].startswith("better than always answering 'positive': accuracy 0.8612 against 0.5092")
    assert z["trivial"] is None  # tables written without one


@pytest.mark.fast
def test_ablation_route_serves_the_pruning_curves_and_their_answer(client):
    baseline, *_ = ablation_tables(seed=0)
    a = get_json(client, "ablation", run="finetune-a")
    curves = a["curves"]
    expected = ablation_curves(baseline)
    assert curves["columns"] == expected["columns"] and curves["randomOrders"] == 3 and curves["totalHeads"] == 72
    rows = np.array([[np.nan if v is None else v for v in row] for row in curves["rows"]], np.float32)
    np.testing.assert_array_equal(rows, expected["table"])
    removable = curves["removable"]
    assert curves["delta"] == 0.01 and removable["importance"]["pruned"] == CURVES_ANSWER
    assert removable["importance"]["censored"] is False and removable["iterative"]["pruned"] == CURVES_ANSWER
    assert [r["pruned"] for r in removable["random"]] == [14, 7, 0] and removable["random_median"] == 7 / 72
    assert get_json(client, "ablation", run="finetune-a", mode="zero")["curves"] is None  # tables without curves


def test_ablation_tables_of_older_versions_still_name_their_metric():
    from bertwatch.tb.queries import ablation_about

    old = {"version": 1, "kind": "ablation_heads", "mode": "zero", "metric": "entity_f1", "baseline": 0.5}
    about = ablation_about(old)  # no task_type, no metrics in the content
    assert (about["taskType"], about["taskLabel"], about["description"]) == (None, None, "entity F1 (seqeval)")
    ((metric),) = about["metrics"]
    assert (metric["name"], metric["label"], metric["baseline"]) == ("entity_f1", "entity F1 (seqeval)", None)
    assert "conlleval" in metric["description"]


@pytest.mark.parametrize(
    "route, params, status",
    [
        ("grid", {"run": "finetune-a"}, 400),
        ("grid", {"tag": "bertwatch/heads/cls_mass"}, 400),
        ("grid", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass", "step": "abc"}, 400),
        ("grid", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass", "step": "7"}, 404),
        ("grid", {"run": "nope", "tag": "bertwatch/heads/cls_mass"}, 404),
        ("grid", {"run": "../../etc", "tag": "/etc/passwd"}, 404),
        ("grid", {"run": "finetune-a", "tag": "bertwatch/clustering/js_mds"}, 404),
        ("grid", {"run": "odd", "tag": "bertwatch/heads/future"}, 404),
        ("trajectory", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass", "layer": "6", "head": "0"}, 404),
        ("trajectory", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass", "layer": "-1", "head": "0"}, 400),
        ("attention", {"run": "finetune-a", "tag": "bertwatch/attention/00", "layer": "9"}, 404),
        ("attention", {"run": "finetune-a", "tag": "bertwatch/attention/00", "step": "25"}, 404),
        ("attention", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass"}, 404),
        ("ablation", {"run": "finetune-b"}, 404),
        ("ablation", {"run": "finetune-a", "mode": "nope"}, 404),
        ("embedding", {"run": "finetune-a", "tag": "bertwatch/heads/cls_mass"}, 404),
        ("steps", {"run": "<script>", "tag": "x"}, 404),
    ],
)
@pytest.mark.fast
def test_errors_are_plain_text(client, route, params, status):
    r = get(client, route, **params)
    assert r.status_code == status, r.get_data(as_text=True)
    assert r.headers["Content-Type"].startswith("text/plain")


# ---------------------------------------------------------------------------------------------------- static


def test_static_files_served_from_the_allow_list(client):
    r = client.get(BASE + "index.js")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/javascript")
    assert re.search(r"export async function render\(\)", r.get_data(as_text=True))
    for name, mime in plugin_mod.STATIC_FILES.items():
        r = client.get(BASE + "static/" + name)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(mime), name
        assert r.get_data() == frontend_file(name).read_bytes()
    # every shipped file is allow-listed and every allow-listed file ships; one name, one file (the URLs are flat)
    shipped = [p.name for p in frontend_files()]
    assert len(shipped) == len(set(shipped)), sorted(shipped)
    assert set(plugin_mod.STATIC_FILES) | {"index.js"} == set(shipped)
    assert set(plugin_mod.FRONTEND_HOMES) <= set(plugin_mod.STATIC_FILES)


@pytest.mark.parametrize(
    "path",
    ["static/../plugin.py", "static/%2e%2e/plugin.py", "static/..%2fplugin.py", "static/api.js/../index.js",
     "static/", "static/__init__.py", "static/./api.js", "static//api.js", "static/API.JS", "static/index.js"],
)  # fmt: skip
def test_static_traversal_and_unknown_files_are_404(client, path):
    r = client.get(BASE + path)
    assert r.status_code == 404


def test_frontend_never_uses_html_sinks_or_absolute_urls():
    for f in frontend_files("*.js"):
        text = f.read_text()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "createContextualFragment",
            "eval(",
        ):
            assert sink not in text, (f.name, sink)
        assert not re.search(r"""fetch\(\s*['"`]/""", text), f.name  # relative URLs only
        assert "/data/plugin" not in text, f.name
        bare = text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace is a name, not a URL
        assert "http://" not in bare and "https://" not in bare, f.name
        for imp in re.findall(r"""from\s+['"]([^'"]+)['"]""", text):
            assert imp.startswith("./"), (f.name, imp)
            assert Path(imp).name in plugin_mod.STATIC_FILES, (f.name, imp)


def test_plugin_metadata():
    from tensorboard.plugins import base_plugin

    p = plugin_mod.BertwatchPlugin(base_plugin.TBContext(data_provider=None))
    assert p.is_active() is False
    assert p.frontend_metadata().es_module_path == "/index.js"
    assert set(p.get_plugin_apps()) >= {"/index.js", "/static/*", "/tags", "/grid", "/steps", "/trajectory"}


def _next_second() -> None:
    """Wait for the clock's next whole second. TensorBoard reads a run's event files in name order, and a name is
    the creation second then a per-process writer counter: two files of one second sort as that counter's digits
    do (".10" before ".9" once earlier tests made writers), so files meant to be read in order are a second apart."""
    start = int(time.time())
    while int(time.time()) == start:
        time.sleep(0.02)


def test_cache_sees_new_steps(tmp_path):
    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_head_grids({"prev": np.zeros((2, 2))}, 0)
    app, mux, _ = make_wsgi_app(tmp_path)
    c = Client(app)
    assert get_json(c, "grid", run="run", tag="bertwatch/heads/prev")["step"] == 0
    _next_second()
    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_head_grids({"prev": np.ones((2, 2))}, 10)
    mux.Reload()
    g = get_json(c, "grid", run="run", tag="bertwatch/heads/prev")
    assert g["step"] == 10 and g["values"] == [[1.0, 1.0], [1.0, 1.0]]
    assert get_json(c, "steps", run="run", tag="bertwatch/heads/prev")["steps"] == [0, 10]
    # a resumed run logs step 10 again: the newest value wins
    _next_second()
    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_head_grids({"prev": np.full((2, 2), 2.0)}, 10)
    mux.Reload()
    assert get_json(c, "steps", run="run", tag="bertwatch/heads/prev")["steps"] == [0, 10]
    assert get_json(c, "grid", run="run", tag="bertwatch/heads/prev", step=10)["values"] == [[2.0, 2.0], [2.0, 2.0]]


def test_labels_of_the_latest_step_read_that_step_alone(logdir, tmp_path):
    """The page opens on the latest step: its labels read one datum per grid, not six whole series; an earlier step
    reads the series. Both answer the written grids' labels, and a step logged later is seen."""
    app, _, plugin = make_wsgi_app(logdir)
    provider, reads = plugin.queries.data_provider, []
    read_tensors = provider.read_tensors

    def counted(*args, **kwargs):
        reads.append(kwargs["downsample"])
        return read_tensors(*args, **kwargs)

    provider.read_tensors = counted
    c = Client(app)
    for step, read in ((STEPS[-1], [1] * 6), (STEPS[3], [queries.DOWNSAMPLE] * 6), (STEPS[-1], [])):
        reads.clear()
        out = get_json(c, "labels", run="finetune-b", step=step)
        g = synthetic_grids(step, seed=1)
        assert out["labels"] == rules.behaviour_labels({k: g[k].astype(np.float32) for k in out["stepsUsed"]}).tolist()
        assert reads == read

    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_head_grids({"prev": np.zeros((1, 2))}, 0)
    app, mux, _ = make_wsgi_app(tmp_path)
    c = Client(app)
    assert get_json(c, "labels", run="run")["labels"] == [[None, None]]
    _next_second()
    with SummaryWriter(str(tmp_path / "run")) as w:
        w.add_head_grids({"prev": np.ones((1, 2))}, 10)
    mux.Reload()
    out = get_json(c, "labels", run="run")
    assert (out["labels"], out["stepsUsed"]["prev"]) == ([["prev", "prev"]], 10)


# ---------------------------------------------------------------------------------------------------- real server


def test_real_tensorboard_process(tmp_path):
    logdir = tmp_path / "logs"
    with SummaryWriter(str(logdir / "live")) as w:
        for step in (0, 10):
            w.add_head_grids(synthetic_grids(step, seed=4, max_step=20), step)
    with tensorboard_server(logdir, extra=["--samples_per_plugin=bertwatch=0"]) as base:
        listing = http_json(base + "/data/plugins_listing")
        assert listing["bertwatch"]["enabled"] is True
        status, headers, body = http_get(base + "/data/plugin/bertwatch/index.js")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript")
        assert body == frontend_file("index.js").read_bytes()
        tags = http_json(base + "/data/plugin/bertwatch/tags")
        assert tags["runs"]["live"]["bertwatch/heads/cls_mass"]["maxStep"] == 10
        q = urllib.parse.urlencode({"run": "live", "tag": "bertwatch/heads/cls_mass", "step": 10})
        g = http_json(base + "/data/plugin/bertwatch/grid?" + q)
        np.testing.assert_array_equal(
            np.array(g["values"], np.float32), synthetic_grids(10, seed=4, max_step=20)["cls_mass"]
        )
        # a step written while TensorBoard runs appears (reload_interval 1)
        with SummaryWriter(str(logdir / "live")) as w:
            w.add_head_grids(synthetic_grids(20, seed=4, max_step=20), 20)
        q = urllib.parse.urlencode({"run": "live", "tag": "bertwatch/heads/cls_mass"})
        steps = wait_for(
            lambda: (s := http_json(base + "/data/plugin/bertwatch/steps?" + q)["steps"]) and 20 in s and s, timeout=20
        )
        assert steps == [0, 10, 20]
        # the scalars plugin sees the layer means
        scalar_tags = http_json(base + "/data/plugin/scalars/tags")
        assert "bertwatch_layers/cls_mass/layer_0" in scalar_tags["live"]


def test_pattern_class_shares_over_steps(client):
    tag = "bertwatch/series/pattern_classes"
    info = get_json(client, "tags")["runs"]["finetune-a"][tag]
    assert info["kind"] == "named_values" and info["names"] == list(rules.PATTERN_CLASSES)
    out = get_json(client, "series", run="finetune-a", tag=tag)
    assert out["steps"] == list(STEPS) and out["names"] == list(rules.PATTERN_CLASSES)
    for k, step in enumerate(STEPS):
        want = rules.pattern_shares(rules.pattern_codes(synthetic_grids(step, seed=0, max_step=STEPS[-1])))
        got = {name: out["values"][c][k] for c, name in enumerate(out["names"])}
        assert got == pytest.approx(want, abs=1e-6)
    assert get(client, "series", run="finetune-a", tag="bertwatch/heads/cls_mass").status_code == 404


def test_embedding_over_steps_with_the_previous_map(client):
    tag = "bertwatch/clustering/js_mds_training"
    latest = get_json(client, "embedding", run="finetune-a", tag=tag)
    assert latest["steps"] == list(STEPS) and latest["step"] == STEPS[-1]
    at = get_json(client, "embedding", run="finetune-a", tag=tag, step=STEPS[2])
    base = embedding_coords(seed=0)
    np.testing.assert_allclose(np.array(at["coords"]), base + np.float32(0.02), atol=1e-6)
    np.testing.assert_allclose(np.array(at["previous"]), base + np.float32(0.01), atol=1e-6)
    assert get_json(client, "embedding", run="finetune-a", tag=tag, step=STEPS[0])["previous"] is None
    assert get(client, "embedding", run="finetune-a", tag=tag, step=STEPS[0] + 1).status_code == 404


def bh_loop(p):
    """Benjamini-Hochberg by its definition: q_i = min over j with p_j >= p_i of p_j * m / rank_j, capped at 1."""
    p = [float(x) for x in np.ravel(p)]
    finite = sorted((x, i) for i, x in enumerate(p) if np.isfinite(x))
    m = len(finite)
    q = [float("nan")] * len(p)
    for rank, (_, i) in enumerate(finite, start=1):
        q[i] = min(1.0, min(finite[k][0] * m / (k + 1) for k in range(rank - 1, m)))
    return q


@pytest.mark.fast
def test_ablation_cells_carry_bh_q_values(client):
    _, heads_t, layers_t, _ = ablation_tables(seed=0)
    a = get_json(client, "ablation", run="finetune-a")
    q = np.array(a["headsQ"], dtype=np.float64)
    assert q.shape == heads_t.shape[:2]
    np.testing.assert_allclose(q.ravel(), bh_loop(heads_t[..., 4]), rtol=1e-6)
    np.testing.assert_allclose(np.array(a["layersQ"], np.float64), bh_loop(layers_t[..., 4]), rtol=1e-6)
    assert (q >= heads_t[..., 4] - 1e-7).all()
