"""Attention maps of a measure (weights, norms, ALTI, rollout, value zeroing) and the weight-vs-contribution gap of
[CLS]/[SEP] mass: the summaries' format, the ``/attention_measures``, ``/attention`` and ``/mass_gap`` routes, and
the report's comparison. Synthetic maps and grids; expected numbers from plain float64 loops over what was written.
"""

from __future__ import annotations

import json
import urllib.parse

import numpy as np
import pytest
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util
from werkzeug.test import Client

from bertwatch.core.stat_names import MASS_BY_MEASURE, MIXING_MEASURES
from bertwatch.report.html import build_html
from bertwatch.tb.views.heads import measures
from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer import summary as bs
from bertwatch.tb.writer.summary import SummaryWriter
from tests.support.tb_helpers import TOKENS_A, make_wsgi_app, segments_of, synthetic_maps  # noqa: E402

BASE = "/data/plugin/bertwatch/"
L, H = 4, 8  # synthetic_maps gives heads 3, 5 and 7 fixed roles
STEPS = (0, 10, 20)
TOKENS = TOKENS_A


def per_layer_map(seed: int) -> np.ndarray:
    """``[L, T, T]`` rows summing to one, a stand-in for ALTI or rollout."""
    rng = np.random.default_rng(seed)
    m = rng.random((L, len(TOKENS), len(TOKENS)))
    return (m / m.sum(-1, keepdims=True)).astype(np.float32)


def grids_at(step: int) -> dict[str, np.ndarray]:
    """Weight-, norm- and ALTI-based masses per head, and the layer's ALTI masses as ``[layers, 1]``; the ALTI grids
    are logged from step 10 on, one head of one grid is NaN."""
    rng = np.random.default_rng(step + 1)
    out = {}
    for stat in ("cls_mass", "sep_mass", "cls_mass_norm", "sep_mass_norm", "cls_mass_alti", "sep_mass_alti"):
        out[stat] = rng.random((L, H)).astype(np.float32)
    for stat in ("cls_mass_alti_layer", "sep_mass_alti_layer"):
        out[stat] = rng.random((L, 1)).astype(np.float32)
    out["sep_mass_norm"][2, 1] = np.nan
    if step == 0:
        for stat in ("cls_mass_alti", "sep_mass_alti", "cls_mass_alti_layer", "sep_mass_alti_layer"):
            del out[stat]
    return out


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("measures") / "logs"
    seg = segments_of(TOKENS)
    with SummaryWriter(str(root / "run")) as w:
        for step in STEPS:
            w.add_head_grids(grids_at(step), step)
            w.add_attention_maps([(TOKENS, synthetic_maps(TOKENS, layers=L, heads=H, seed=step), seg)], step)
            norms = synthetic_maps(TOKENS, layers=L, heads=H, seed=step + 100) * np.float32(3.0)
            w.add_attention_maps([(TOKENS, norms, seg)], step, measure="norms")
            if step >= 10:
                w.add_attention_maps([(TOKENS, per_layer_map(step), seg)], step, measure="alti")
        w.add_attention_maps([(TOKENS, per_layer_map(99), seg)], 20, measure="rollout")
        # a measure map from a newer format: skipped, never served as this example's
        newer = bs.attention_summary(0, TOKENS, per_layer_map(5), measure="value_zeroing")
        newer.value[0].metadata.plugin_data.content = json.dumps(
            {"version": md.READ_VERSION + 1, "kind": "attention_map", "index": 0, "measure": "value_zeroing"}
        ).encode()
        w.add_summary(newer, 20)
    # maps written before measures existed: content without measure or unit, a header without them either
    with SummaryWriter(str(root / "old")) as w:
        s = summary_pb2.Summary()
        header = {"tokens": ["a", "b"], "layers": 1, "heads": 1, "length": 2, "dtype": "float16", "segments": None}
        blob = np.array([[[[0.25, 0.75], [1.0, 0.0]]]], dtype="<f2").tobytes()
        s.value.add(
            tag="bertwatch/attention/00",
            metadata=summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(
                    plugin_name="bertwatch", content=b'{"version":1,"kind":"attention_map","index":0}'
                ),
                data_class=summary_pb2.DATA_CLASS_BLOB_SEQUENCE,
            ),
            tensor=tensor_util.make_tensor_proto([json.dumps(header).encode(), blob], dtype=np.object_),
        )
        w.add_summary(s, 3)
    return root


@pytest.fixture(scope="module")
def client(logdir):
    return Client(make_wsgi_app(logdir)[0])


def get_json(client, route, **params):
    r = client.get(BASE + route + "?" + urllib.parse.urlencode(params))
    assert r.status_code == 200, r.get_data(as_text=True)
    return json.loads(r.get_data())


def as_float(values) -> np.ndarray:
    return np.array(json.loads(json.dumps(values), parse_constant=float), dtype=np.float64)


def plain_layer_means(grid: np.ndarray) -> list[float]:
    """Mean over each layer's heads, NaN heads left out, in float64 by a loop."""
    out = []
    for row in np.asarray(grid, dtype=np.float64):
        kept = [float(v) for v in row if not np.isnan(v)]
        out.append(sum(kept) / len(kept) if kept else float("nan"))
    return out


# ------------------------------------------------------------------------------------------------ summaries


def test_the_plugins_measures_are_the_mixing_measures_in_their_order():
    assert tuple(md.ATTENTION_MEASURES) == MIXING_MEASURES


def test_a_measure_map_is_its_own_tag_of_a_newer_format():
    s = bs.attention_summary(2, ["a", "b", "c"], per_layer_map(0)[:, :3, :3], measure="alti")
    value = s.value[0]
    assert value.tag == "bertwatch/attention/02/alti"
    content = json.loads(value.metadata.plugin_data.content)
    assert content == {"version": 2, "kind": "attention_map", "index": 2, "measure": "alti", "unit": "layer"}
    assert md.MEASURE_FORMAT_VERSION > md.FORMAT_VERSION  # a plugin from before measures skips it
    header = json.loads(value.tensor.string_val[0])
    assert (header["layers"], header["heads"], header["length"], header["unit"]) == (L, 1, 3, "layer")
    weights = bs.attention_summary(2, ["a", "b"], np.full((1, 2, 2, 2), 0.5))
    assert weights.value[0].tag == "bertwatch/attention/02"
    assert json.loads(weights.value[0].metadata.plugin_data.content)["version"] == md.FORMAT_VERSION


@pytest.mark.parametrize(
    "call",
    [
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 2, 2)), measure="weights"),  # weights are per head
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 1, 2, 2)), measure="attention_flow"),
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 2, 3)), measure="alti"),
        lambda: bs.attention_summary(0, ["a", "b", "c"], np.zeros((1, 2, 2)), measure="rollout"),
    ],
)
def test_malformed_measure_maps_are_refused(call):
    with pytest.raises(ValueError):
        call()


# ------------------------------------------------------------------------------------------------ routes


def test_content_of_measure_tags(client):
    run = get_json(client, "tags")["runs"]["run"]
    assert run["bertwatch/attention/00"]["measure"] == "weights"
    assert (run["bertwatch/attention/00/alti"]["measure"], run["bertwatch/attention/00/alti"]["unit"]) == (
        "alti",
        "layer",
    )
    assert run["bertwatch/attention/00/norms"]["unit"] == "head"


def test_attention_measures_lists_each_measure_with_its_steps(client):
    body = get_json(client, "attention_measures", run="run", index=0)
    got = [(m["measure"], m["tag"], m["unit"], m["steps"]) for m in body["measures"]]
    assert got == [
        ("weights", "bertwatch/attention/00", "head", list(STEPS)),
        ("norms", "bertwatch/attention/00/norms", "head", list(STEPS)),
        ("alti", "bertwatch/attention/00/alti", "layer", [10, 20]),
        ("rollout", "bertwatch/attention/00/rollout", "layer", [20]),
    ]  # value_zeroing was written by a newer format: left out
    assert [m["label"] for m in body["measures"]] == [md.ATTENTION_MEASURES[m[0]]["label"] for m in got]
    assert all(m["description"] for m in body["measures"])
    assert client.get(BASE + "attention_measures?run=run&index=7").status_code == 404
    assert client.get(BASE + "attention_measures?run=run&index=x").status_code == 400


def test_a_per_layer_measure_serves_the_written_map_with_the_same_tokens(client):
    alti = get_json(client, "attention", run="run", tag="bertwatch/attention/00/alti", layer=2, step=10)
    weights = get_json(client, "attention", run="run", tag="bertwatch/attention/00", layer=2, step=10)
    assert (alti["measure"], alti["unit"], alti["heads"], alti["layers"]) == ("alti", "layer", 1, L)
    assert (weights["measure"], weights["unit"], weights["heads"]) == ("weights", "head", H)
    assert alti["tokens"] == weights["tokens"] == TOKENS and alti["segments"] == weights["segments"]
    np.testing.assert_array_equal(np.array(alti["maps"], np.float16)[0], per_layer_map(10)[2].astype(np.float16))
    norms = get_json(client, "attention", run="run", tag="bertwatch/attention/00/norms", layer=1, head=2, step=20)
    expected = (synthetic_maps(TOKENS, layers=L, heads=H, seed=120) * np.float32(3.0)).astype(np.float16)[1, 2]
    np.testing.assert_array_equal(np.array(norms["maps"], np.float16), expected)


def test_maps_from_before_measures_are_weights(client):
    body = get_json(client, "attention_measures", run="old", index=0)
    assert [(m["measure"], m["unit"], m["steps"]) for m in body["measures"]] == [("weights", "head", [3])]
    a = get_json(client, "attention", run="old", tag="bertwatch/attention/00", layer=0)
    assert (a["measure"], a["unit"]) == ("weights", "head") and a["maps"] == [[[0.25, 0.75], [1.0, 0.0]]]


def test_a_reader_of_version_one_skips_measure_maps(logdir, monkeypatch):
    monkeypatch.setattr(md, "READ_VERSION", md.FORMAT_VERSION)
    tags = get_json(Client(make_wsgi_app(logdir)[0]), "tags")
    assert "bertwatch/attention/00" in tags["runs"]["run"]
    assert not [t for t in tags["runs"]["run"] if t.startswith("bertwatch/attention/00/")]
    skipped = {s["tag"] for s in tags["skipped"] if s["run"] == "run"}
    assert {"bertwatch/attention/00/norms", "bertwatch/attention/00/alti"} <= skipped


@pytest.mark.parametrize("step", [None, 10, 15, 0])
def test_mass_gap_is_each_layers_mean_over_heads_and_their_difference(client, step):
    params = {"run": "run"} if step is None else {"run": "run", "step": step}
    body = get_json(client, "mass_gap", **params)
    used = STEPS[-1] if step is None else max(s for s in STEPS if s <= step)
    grids = grids_at(used)
    assert [t["target"] for t in body["targets"]] == ["[CLS]", "[SEP]"]
    for target, (name, pairs) in zip(body["targets"], MASS_BY_MEASURE):
        assert target["target"] == name
        present = [(label, stat) for label, stat in pairs if stat in grids]
        assert len(present) == (4 if used else 2)
        assert [(m["label"], m["stat"]) for m in target["measures"]] == present
        expected = {stat: plain_layer_means(grids[stat]) for _, stat in present}
        weight = pairs[0][1]
        for m in target["measures"]:
            assert m["step"] == used
            # float32 grids, means in float64, sent as float32: one float32 rounding
            np.testing.assert_allclose(as_float(m["layerMeans"]), expected[m["stat"]], rtol=np.finfo(np.float32).eps)
        assert set(target["gaps"]) == {stat for _, stat in present[1:]}
        for stat, gap in target["gaps"].items():
            want = np.subtract(expected[weight], expected[stat])
            # the difference of float64 means, rounded to float32 once when sent
            bound = np.finfo(np.float32).eps * np.abs(want)
            assert np.all(np.abs(as_float(gap) - want) <= bound + 1e-12)
    assert body["steps"]["cls_mass"] == used


def test_mass_gap_lists_the_run_once(logdir):
    """Which masses the run has and whether each cached series is current both come from one listing: every provider
    call is a round trip to TensorBoard's data server."""
    app, _, plugin = make_wsgi_app(logdir)
    provider, calls = plugin.queries.data_provider, []
    list_tensors = provider.list_tensors

    def counted(*args, **kwargs):
        calls.append(kwargs.get("run_tag_filter"))
        return list_tensors(*args, **kwargs)

    provider.list_tensors = counted
    client = Client(app)
    first = get_json(client, "mass_gap", run="run")  # reads the series
    calls.clear()
    assert get_json(client, "mass_gap", run="run", step=10) != first
    assert len(calls) == 1


def test_mass_gap_of_a_run_without_masses_is_empty(client):
    assert get_json(client, "mass_gap", run="old")["targets"] == []


def test_mass_by_measure_skips_a_grid_of_another_model_shape():
    grids = {"sep_mass": np.ones((3, 2)), "sep_mass_norm": np.zeros((3, 2)), "sep_mass_alti": np.zeros((4, 2))}
    (sep,) = measures.mass_by_measure(grids)
    assert [m["stat"] for m in sep["measures"]] == ["sep_mass", "sep_mass_norm"]
    np.testing.assert_array_equal(sep["gaps"]["sep_mass_norm"], [1.0, 1.0, 1.0])
    (only,) = measures.mass_by_measure({"cls_mass_norm": np.ones((2, 2))})
    assert only["gaps"] == {}


# ------------------------------------------------------------------------------------------------ report


def test_report_compares_the_masses_per_layer():
    first, last = grids_at(10), grids_at(20)
    training = {"grids": {stat: {"first": (10, first[stat]), "last": (20, last[stat])} for stat in last}}
    page = build_html([], training)
    assert 'id="mass-gap"' in page and "data:image/png;base64," in page
    section = page[page.index('id="mass-gap"') :]
    cls_w, cls_n = plain_layer_means(last["cls_mass"]), plain_layer_means(last["cls_mass_norm"])
    sep_w, sep_a = plain_layer_means(last["sep_mass"]), plain_layer_means(last["sep_mass_alti_layer"])
    for layer in range(L):
        assert f'<td class="">{cls_w[layer] - cls_n[layer]:.3f}</td>' in section
        assert f'<td class="">{sep_w[layer] - sep_a[layer]:.3f}</td>' in section
    assert "weights − ALTI of the layer" in section and "[SEP] norms" in section
