"""The plugin's names and metadata (``tb.writer.metadata``): every tag built under its prefix, the versioned JSON
content written and read back, and the malformed or older content that must read as absent rather than wrong."""

from __future__ import annotations

import json

import pytest
from tensorboard.compat.proto import summary_pb2

from bertwatch.tb.writer import metadata as md

pytestmark = pytest.mark.fast


def test_tags_sit_under_their_prefixes() -> None:
    assert md.heads_tag("cls_mass") == "bertwatch/heads/cls_mass"
    assert md.attention_tag(3) == "bertwatch/attention/03"
    assert md.attention_tag(12, "alti") == "bertwatch/attention/12/alti"
    assert md.ablation_tag("zero", "heads") == "bertwatch/ablation/zero/heads"
    assert md.series_tag("run_health") == "bertwatch/series/run_health"
    assert md.layer_scalar_tag("entropy", 5) == "bertwatch_layers/entropy/layer_5"
    assert md.alerts_scalar_tag("logit_growth") == "bertwatch_alerts/logit_growth"
    assert md.series_scalar_tag("verdict", "level") == "bertwatch_series/verdict/level"
    assert md.clustering_tag("js") == "bertwatch/clustering/js" and md.text_tag("t") == "bertwatch/text/t"
    assert md.VIEW_FLAGS == ("--samples_per_plugin=bertwatch=0", "--reload_interval", "1")


def test_the_content_written_is_read_back() -> None:
    meta = md.create_summary_metadata(
        md.KIND_HEAD_GRID, data_class=summary_pb2.DATA_CLASS_TENSOR, description="d", stat="entropy", layers=6
    )
    assert meta.plugin_data.plugin_name == "bertwatch" and meta.summary_description == "d"
    assert meta.data_class == summary_pb2.DATA_CLASS_TENSOR
    content = md.parse_plugin_content(meta.plugin_data.content)
    assert content == {"version": md.FORMAT_VERSION, "kind": "head_grid", "stat": "entropy", "layers": 6}
    assert md.parse_plugin_content(meta.plugin_data.content.decode()) == content


@pytest.mark.parametrize(
    "raw",
    [None, b"", b"\xff\xfe", b"not json", b"[1, 2]", json.dumps({"version": 1}).encode(),
     json.dumps({"kind": "head_grid", "version": True}).encode(), json.dumps({"kind": "x", "version": "1"}).encode()],
)  # fmt: skip
def test_malformed_content_reads_as_none(raw) -> None:
    assert md.parse_plugin_content(raw) is None


def test_the_measure_of_an_older_attention_map_is_the_weights() -> None:
    assert md.attention_measure({}) == "weights" and md.attention_measure({"measure": ""}) == "weights"
    assert md.attention_measure({"measure": "rollout"}) == "rollout"


def test_the_recorded_probe_length_reads_as_counts_or_not_at_all() -> None:
    good = {"max_length": 128, "truncated": 2, "examples": 32, "longest": None, "model": "minilm", "other": 1}
    assert md.probe_info(good) == {"max_length": 128, "truncated": 2, "examples": 32, "longest": None,
                                   "model": "minilm"}  # fmt: skip
    assert md.probe_info({}) == {key: None for key in md.PROBE_KEYS}  # nothing recorded: each one None
    for bad in (None, [], {"max_length": -1}, {"truncated": True}, {"examples": 3.0}, {"longest": "9"}):
        assert md.probe_info(bad) is None, bad
    assert "model" not in md.probe_info({"model": 3})
