"""bertwatch.tb.writer.summary: the builders' protobufs, the writer's event files, and what TensorBoard's loader
sees."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import summary_pb2
from tensorboard.util import tensor_util

from bertwatch.tb.writer import metadata as md
from bertwatch.tb.writer import summary as bs

pytestmark = pytest.mark.fast


def _content(value):
    return json.loads(value.metadata.plugin_data.content)


def _events(logdir):
    files = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))
    assert files, "no event file written"
    events = []
    for f in files:
        events += [e for e in event_file_loader.EventFileLoader(f).Load() if e.HasField("summary")]
    return files, events


def test_head_grid_summary_layout_and_values():
    grid = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    grid[1, 2] = np.nan
    grid[2, 3] = np.inf
    s = bs.head_grid_summary("cls_mass", grid)
    (v,) = s.value
    assert v.tag == "bertwatch/heads/cls_mass"
    assert v.metadata.plugin_data.plugin_name == "bertwatch"
    assert v.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    assert _content(v) == {"version": 1, "kind": "head_grid", "stat": "cls_mass", "layers": 3, "heads": 4}
    assert "[CLS]" in v.metadata.summary_description
    arr = tensor_util.make_ndarray(v.tensor)
    assert arr.dtype == np.float32 and arr.shape == (3, 4)
    np.testing.assert_array_equal(arr, grid.astype(np.float32))  # NaN stays NaN, inf stays inf
    assert np.isnan(arr[1, 2]) and arr[2, 3] == np.inf


def test_builders_accept_tensor_like_objects_without_torch():
    class FakeTensor:  # what a torch tensor offers; no torch import needed
        def __init__(self, a):
            self.a = np.asarray(a)

        def detach(self):
            return self

        def cpu(self):
            return self

        def float(self):
            return FakeTensor(self.a.astype(np.float32))

        def numpy(self):
            return self.a

    s = bs.head_grid_summary("entropy", FakeTensor([[1.5, 2.5]]))
    np.testing.assert_array_equal(tensor_util.make_ndarray(s.value[0].tensor), [[1.5, 2.5]])


@pytest.mark.parametrize(
    "call",
    [
        lambda: bs.head_grid_summary("x", np.zeros(3)),
        lambda: bs.head_grid_summary("x", np.zeros((0, 3))),
        lambda: bs.head_grid_summary("a/b", np.zeros((2, 2))),
        lambda: bs.head_grid_summary("", np.zeros((2, 2))),
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 1, 3, 3))),
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 1, 2, 3))),
        lambda: bs.attention_summary(0, ["a", "b"], np.zeros((1, 1, 2, 2)), segments=[0]),
        lambda: bs.attention_summary(-1, ["a"], np.zeros((1, 1, 1, 1))),
        lambda: bs.ablation_summaries("uniform", "acc", 0.5, 10, np.zeros((2, 3, 4)), np.zeros((2, 5))),
        lambda: bs.ablation_summaries("uniform", "acc", 0.5, 10, np.zeros((2, 3, 5)), np.zeros((3, 5))),
        lambda: bs.ablation_summaries(
            "uniform", "acc", 0.5, 10, np.zeros((2, 3, 5)), np.zeros((2, 5)), np.zeros((4, 3))
        ),
        lambda: bs.embedding_summary("mds", np.zeros((5, 2)), 2, 3),
        lambda: bs.layer_scalar_summaries("x", np.zeros((2, 2, 2))),
    ],
)
def test_builders_reject_bad_shapes_and_names(call):
    with pytest.raises(ValueError):
        call()


def test_attention_summary_is_a_blob_sequence_of_header_and_float16_maps():
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 4, 4)).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    tokens = ["[CLS]", "héllo", "<img src=x onerror=alert(1)>", "[SEP]"]
    s = bs.attention_summary(7, tokens, maps, segments=[0, 0, 1, 1])
    (v,) = s.value
    assert v.tag == "bertwatch/attention/07"
    assert v.metadata.data_class == summary_pb2.DATA_CLASS_BLOB_SEQUENCE
    assert _content(v) == {"version": 1, "kind": "attention_map", "index": 7, "measure": "weights", "unit": "head"}
    assert v.tensor.dtype == 7 and [d.size for d in v.tensor.tensor_shape.dim] == [2]  # rank-1 DT_STRING
    header = json.loads(v.tensor.string_val[0])
    assert header == {
        "tokens": tokens,
        "layers": 2,
        "heads": 3,
        "length": 4,
        "dtype": "float16",
        "segments": [0, 0, 1, 1],
        "measure": "weights",
        "unit": "head",
    }
    decoded = np.frombuffer(v.tensor.string_val[1], dtype="<f2").reshape(2, 3, 4, 4)
    np.testing.assert_array_equal(decoded, maps.astype(np.float16))


def test_ablation_summaries_tags_and_content():
    heads = np.random.default_rng(1).random((2, 3, 5)).astype(np.float32)
    layers = np.random.default_rng(2).random((2, 5)).astype(np.float32)
    pruning = np.array([[0, 0.8], [0.5, 0.7]], np.float32)
    s = bs.ablation_summaries("uniform", "accuracy", 0.81, 872, heads, layers, pruning)
    by_tag = {v.tag: v for v in s.value}
    assert set(by_tag) == {f"bertwatch/ablation/uniform/{p}" for p in ("heads", "layers", "pruning")}
    h = _content(by_tag["bertwatch/ablation/uniform/heads"])
    assert h["kind"] == "ablation_heads" and h["metric"] == "accuracy" and h["baseline"] == pytest.approx(0.81)
    assert h["num_examples"] == 872 and h["fields"] == ["value", "delta", "ci_low", "ci_high", "p"]
    assert _content(by_tag["bertwatch/ablation/uniform/layers"])["kind"] == "ablation_layers"
    assert _content(by_tag["bertwatch/ablation/uniform/pruning"])["kind"] == "pruning_curve"
    for v in s.value:
        assert v.metadata.data_class == summary_pb2.DATA_CLASS_TENSOR
    np.testing.assert_array_equal(tensor_util.make_ndarray(by_tag["bertwatch/ablation/uniform/heads"].tensor), heads)
    assert len(bs.ablation_summaries("zero", "f1", 0.5, 3, heads, layers).value) == 2


def test_embedding_and_layer_scalars():
    coords = np.arange(12, dtype=np.float32).reshape(6, 2)
    (v,) = bs.embedding_summary("js_mds", coords, 2, 3).value
    assert v.tag == "bertwatch/clustering/js_mds" and _content(v)["kind"] == "head_embedding"
    assert _content(v)["layers"] == 2 and _content(v)["heads"] == 3
    grid = np.array([[1.0, 3.0, np.nan], [np.nan, np.nan, np.nan]])
    s = bs.layer_scalar_summaries("cls_mass", grid)
    assert [v.tag for v in s.value] == ["bertwatch_layers/cls_mass/layer_0", "bertwatch_layers/cls_mass/layer_1"]
    assert s.value[0].simple_value == 2.0  # NaN heads are left out of the mean
    assert np.isnan(s.value[1].simple_value)  # an all-NaN layer stays NaN


def test_writer_writes_one_flushed_event_per_call(tmp_path):
    w = bs.SummaryWriter(str(tmp_path))
    grids = {"cls_mass": np.full((2, 3), 0.25), "entropy": np.full((2, 3), 3.0)}
    w.add_head_grids(grids, step=5, walltime=123.0)
    # flushed without close: readable now
    files, events = _events(str(tmp_path))
    assert len(files) == 1 and files[0].endswith(".bertwatch")
    assert [e.step for e in events] == [5] and events[0].wall_time == 123.0
    tags = [v.tag for v in events[0].summary.value]
    assert tags == [
        "bertwatch/heads/cls_mass", "bertwatch_layers/cls_mass/layer_0", "bertwatch_layers/cls_mass/layer_1",
        "bertwatch/heads/entropy", "bertwatch_layers/entropy/layer_0", "bertwatch_layers/entropy/layer_1",
    ]  # fmt: skip
    w.add_attention_maps([(["a", "b"], np.full((2, 3, 2, 2), 0.5))], step=6)
    w.add_ablation("zero", "accuracy", 0.5, 10, np.zeros((2, 3, 5)), np.zeros((2, 5)), step=7)
    w.add_embedding("mds", np.zeros((6, 2)), 2, 3, step=7)
    w.close()
    w.close()  # idempotent
    with pytest.raises(RuntimeError):
        w.add_head_grids(grids, step=8)
    _, events = _events(str(tmp_path))
    assert [e.step for e in events] == [5, 6, 7, 7]


def test_tensorboard_loader_sees_every_series(tmp_path):
    """The real check of plugin name + data_class: TensorBoard's loader and data provider return our data."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider as mdp
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem

    with bs.SummaryWriter(str(tmp_path / "run")) as w:
        for step in (0, 10):
            w.add_head_grids({"sep_mass": np.full((2, 2), step / 10)}, step)
        w.add_attention_maps([(["x", "y"], np.full((2, 2, 2, 2), 0.5), [0, 1])], 10)
    mux = pem.EventMultiplexer(tensor_size_guidance={"bertwatch": 0})
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    dp = mdp.MultiplexerDataProvider(mux, str(tmp_path))
    ctx = context.RequestContext()
    tensors = dp.read_tensors(ctx, experiment_id="", plugin_name="bertwatch", downsample=100)
    series = tensors["run"]["bertwatch/heads/sep_mass"]
    assert [d.step for d in series] == [0, 10]
    np.testing.assert_array_equal(series[1].numpy, np.ones((2, 2), np.float32))
    blobs = dp.read_blob_sequences(ctx, experiment_id="", plugin_name="bertwatch", downsample=10)
    (datum,) = blobs["run"]["bertwatch/attention/00"]
    header = json.loads(dp.read_blob(ctx, blob_key=datum.values[0].blob_key))
    assert header["tokens"] == ["x", "y"] and header["segments"] == [0, 1]
    scalars = dp.read_scalars(ctx, experiment_id="", plugin_name="scalars", downsample=100)
    assert [d.value for d in scalars["run"]["bertwatch_layers/sep_mass/layer_1"]] == [0.0, 1.0]


def test_from_torch_writer_duck_typed(tmp_path):
    class FakeTorchWriter:  # only the public get_logdir() is read; nothing else may be called
        def get_logdir(self):
            return str(tmp_path)

        def __getattr__(self, name):
            raise AssertionError(f"bertwatch touched the torch writer's {name}")

    w = bs.SummaryWriter.from_torch_writer(FakeTorchWriter())
    assert w.logdir == str(tmp_path)
    w.add_head_grids({"prev": np.zeros((1, 2))}, step=3, walltime=9.0)
    files, events = _events(str(tmp_path))  # flushed: readable before close
    assert len(files) == 1 and files[0].endswith(".bertwatch")
    (event,) = [e for e in events if any(v.tag == "bertwatch/heads/prev" for v in e.summary.value)]
    assert event.step == 3 and event.wall_time == 9.0
    w.close()
    with pytest.raises(TypeError):
        bs.SummaryWriter.from_torch_writer(object())


def test_from_real_torch_writer(tmp_path):
    import torch.utils.tensorboard as torch_tb

    tw = torch_tb.SummaryWriter(log_dir=str(tmp_path))
    tw.add_scalar("loss", 1.0, 4)
    w = bs.SummaryWriter.from_torch_writer(tw)
    w.add_head_grids({"cls_mass": np.full((2, 2), 0.5)}, step=4)
    _, events = _events(str(tmp_path))  # bertwatch's own file in the same run, readable before close
    assert any(v.tag == "bertwatch/heads/cls_mass" for e in events for v in e.summary.value)
    w.close()
    tw.add_scalar("loss", 0.5, 5)  # the torch writer is still the user's and still open
    tw.close()
    _, events = _events(str(tmp_path))
    assert [e.step for e in events if any(v.tag == "loss" for v in e.summary.value)] == [4, 5]


def test_summary_and_plugin_never_import_torch():
    code = (
        "import sys, numpy as np, tempfile\n"
        "import bertwatch, bertwatch.tb.writer.summary as s, bertwatch.tb, bertwatch.tb.writer.metadata\n"
        "import bertwatch.tb.plugin\n"
        "with s.SummaryWriter(tempfile.mkdtemp()) as w:\n"
        "    w.add_head_grids({'cls_mass': np.zeros((2, 2))}, 0)\n"
        "bad = [m for m in ('torch', 'transformers', 'tensorflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_metadata_content_parsing():
    m = md.create_summary_metadata("head_grid", data_class=summary_pb2.DATA_CLASS_TENSOR, stat="x")
    assert md.parse_plugin_content(m.plugin_data.content) == {"version": 1, "kind": "head_grid", "stat": "x"}
    for bad in (
        b"",
        b"not json",
        b"[]",
        b'{"kind": 3, "version": 1}',
        b'{"kind": "x"}',
        b'{"kind":"x","version":true}',
    ):
        assert md.parse_plugin_content(bad) is None
