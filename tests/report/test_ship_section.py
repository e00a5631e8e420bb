"""The report's ``bertwatch ship`` section: the table of ``ship.json`` as ``bertwatch ship`` prints it, escaped, at
which batch the metric was measured, and ``bertwatch report`` finding it in a folder."""

from __future__ import annotations

import html
import json

import pytest

from bertwatch.cli import main
from bertwatch.report.ship_section import (
    batching_lines,
    cause_lines,
    layer_columns,
    mixed_offer,
    outlier_lines,
    ship_columns,
    ship_files,
    ship_readings,
    ship_section,
)
from bertwatch.ship.table import format_table

pytestmark = pytest.mark.fast


ONE = {"batch_size": 1, "padded": False, "sorted": False}
SORTED = {"batch_size": 32, "padded": True, "sorted": True}


def _result() -> dict:
    variant = {"file": "model.onnx", "size_mb": 90.0, "latency_ms": 8.0, "throughput": 100.0, "p": 1.0}
    return {
        "checkpoint": "out/<model>",
        "task": "sst2",
        "metric": "accuracy",
        "num_examples": 64,
        "confidence": 0.95,
        "n_resamples": 1000,
        "timing": {"repeats": 5, "warmup": 2, "batch_size": 32, "batch_tokens": 44},
        "runtime": {"onnxruntime": "1.32.0", "threads": 1},
        "removed_heads": None,
        "batching": {"metric": ONE, "sorted_batches": SORTED, "attribution": ONE},
        "variants": [
            {
                **variant,
                "name": "fp32",
                "value": 0.5,
                "delta": 0.0,
                "ci_low": 0.0,
                "ci_high": 0.0,
                "agreement": 1.0,
                "sorted_batches": {"changed": 0, "value": 0.5},
            },
            {
                **variant,
                "name": "int8",
                "file": "model.int8.onnx",
                "size_mb": 22.5,
                "latency_ms": 2.0,
                "throughput": 250.0,
                "value": 0.5,
                "delta": -0.015625,
                "ci_low": -0.0625,
                "ci_high": 0.03125,
                "agreement": 0.96875,
                "sorted_batches": {"changed": 2, "value": 0.53125},
            },
        ],  # fmt: skip
    }


def test_the_section_shows_the_printed_table_and_readings_escaped(tmp_path) -> None:
    path = tmp_path / "ship" / "ship.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_result()), encoding="utf-8")
    assert ship_files(tmp_path) == [path] and ship_files(path) == [path] and ship_files(tmp_path / "none") == []
    page = ship_section(path)
    assert "out/&lt;model&gt;" in page and "<model>" not in page
    columns = ship_columns(_result())
    for _, cells, _ in columns:
        assert all(f"<td>{cell}</td>" in page for cell in cells)
    (reading,) = ship_readings(_result())
    assert reading == (
        "int8: 4.00x smaller; 4.00x faster at batch 1, 2.50x faster at batch 32; accuracy one request at a time "
        "-0.0156 (95% CI -0.0625 to +0.0312); 96.9% of predictions unchanged"
    )
    assert reading in format_table(_result()) and reading in page
    assert "<th>accuracy, batch 1</th>" in page and "accuracy one request at a time with its paired-bootstrap" in page
    first, int8, same, cause = batching_lines(_result())
    assert int8 == "  int8: 2 of 64 predictions differ; accuracy 0.5312 in these batches (0.5000 one request at a time)"
    assert same == "  fp32: the same predictions" and cause.startswith("dynamic INT8 computes")
    first, cause = first[0].upper() + first[1:], cause[0].upper() + cause[1:]
    assert f"<h3>At which batch it was measured</h3><p>{html.escape(first)}</p>" in page
    assert f"<ul><li>{html.escape(int8.strip())}</li><li>fp32: the same predictions</li></ul>" in page
    assert f"<p>{html.escape(cause)}.</p>" in page


def test_bertwatch_report_adds_the_ship_table_of_a_folder(tmp_path, capsys) -> None:
    (tmp_path / "ship.json").write_text(json.dumps(_result()), encoding="utf-8")
    assert main(["report", str(tmp_path)]) == 0
    assert "the ship table ->" in capsys.readouterr().out
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Will it ship?" in page and "model.int8.onnx" in page
    # the first table says it in one line, linked to the section
    (reading,) = ship_readings(_result())
    anchor = page.index('<dt>will it ship</dt><dd><a href="#')
    target = page[anchor:].split('href="#', 1)[1].split('"', 1)[0]
    assert page.index(f'id="{target}"') > anchor and html.escape(reading) in page[anchor : anchor + 400]


def test_the_outlier_lines_rank_the_layers_by_their_largest_feed_forward_output() -> None:
    layer = {"kurtosis": 3.0, "outlier_share": 0.0, "top_dims": [1, 2, 3], "delimiter_share": None}
    result = {**_result(), "outliers": {"examples": 64, "ffn": [{**layer, "inf_norm": 2.0},
              {**layer, "inf_norm": 90.0, "delimiter_share": 0.875, "outlier_share": 0.001}, {**layer, "inf_norm": 5.0}],
              "residual": []}}  # fmt: skip
    lines = outlier_lines(result, count=2)
    assert lines[0] == "activation outliers of the fp32 model (64 examples), the largest feed-forward outputs:"
    assert lines[1].startswith("  layer 1: max |x| 90.0") and "88% of the outlier mass on [CLS]/[SEP]" in lines[1]
    assert lines[2].startswith("  layer 2: max |x| 5.0") and lines[2].endswith("no component reaches 6")
    assert outlier_lines(_result()) == [] and lines[1] in format_table(result)


def _attributed(int8_high: float, mixed_high: float) -> dict:
    """A result with two layers' attribution (layer 1 the worst) and the mixed variant, its intervals chosen."""
    result = _result()
    fp32, int8 = result["variants"]
    int8 = {**int8, "ci_low": int8_high - 0.05, "ci_high": int8_high, "delta": int8_high - 0.02}
    mixed = {
        **int8,
        "name": "int8, layer 1 fp32",
        "file": "model.int8.layer1fp32.onnx",
        "latency_ms": 4.0,
        "delta": mixed_high - 0.02,
        "ci_low": mixed_high - 0.05,
        "ci_high": mixed_high,
        "agreement": 0.99,
    }
    result["variants"] = [fp32, int8, mixed]
    layer = {"kurtosis": 900.0, "outlier_share": 0.001, "top_dims": [7, 1, 2], "delimiter_share": 0.75}
    result["outliers"] = {
        "examples": 64,
        "ffn": [{**layer, "inf_norm": 20.0}, {**layer, "inf_norm": 196.0}],
        "residual": [],
    }
    heads = [
        {"layer": 1, "head": 3, "by_weight": 0.85, "by_norm": 0.4},
        {"layer": 1, "head": 0, "by_weight": 0.6, "by_norm": None},
    ]
    result["attribution"] = {
        "examples": 64, "int8": {"mean_max_abs": 0.2, "changed": 0.03125}, "kept_fp32": 1,
        "layers": [{"layer": 0, "only": {"mean_max_abs": 0.05, "changed": 0.0}, "kept": {"mean_max_abs": 0.18,
                    "changed": 0.03}, "recovery": 0.1},
                   {"layer": 1, "only": {"mean_max_abs": 0.15, "changed": 0.02}, "kept": {"mean_max_abs": 0.05,
                    "changed": 0.0}, "recovery": 0.75}],
        "heads": heads, "heads_from_layer": heads,
    }  # fmt: skip
    return result


def test_the_cause_names_the_layer_its_outliers_and_its_heads(tmp_path) -> None:
    result = _attributed(-0.01, 0.01)
    lines = cause_lines(result)
    assert lines[0].startswith("where the INT8 error comes from (64 examples one request at a time;")
    assert "0.200, 3.1% of" in lines[0]
    assert lines[1] == (
        "INT8 error comes mostly from layer 1: quantized alone it gives 0.150 of the 0.200, and keeping it in fp32 "
        "removes 75% of it"
    )
    assert lines[2] == (
        "Its feed-forward output reaches 196 (kurtosis 900), 75% of the outlier mass on [CLS], [SEP] and punctuation"
    )
    assert lines[3] == (
        "Its heads (layer-head) 1-3, 1-0 put 85% / 60% of their attention on [CLS], [SEP] and punctuation (by norm: 40% / n/a)"
    )
    assert len(lines) == 4  # the heads from layer 1 on are the same: not repeated
    columns = dict((header, cells) for header, cells, _ in layer_columns(result))
    assert columns["this layer fp32: INT8 error removed"] == ["10%", "75%"] and columns["layer"] == ["0", "1"]
    assert columns["feed-forward output max |x|"] == ["20.0", "196.0"]
    path = tmp_path / "ship.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    page = ship_section(path)
    assert "Where the INT8 error comes from" in page and all(html.escape(line) in page for line in lines[1:])
    assert "<td><b>75%</b></td>" in page and "<td>10%</td>" in page and html.escape(mixed_offer(result)) in page
    assert "with every layer INT8 it is 0.200 (3.1% of predictions changed)" in page
    printed = format_table(result)
    assert all(line in printed for line in lines) and "INT8 with one layer in fp32: offered" in printed


def test_the_mixed_variant_is_offered_only_when_it_recovers_the_metric() -> None:
    offered = mixed_offer(_attributed(-0.01, 0.01))
    assert offered.startswith(
        "offered: int8, layer 1 fp32 recovers the accuracy one request at a time (-0.0100 [-0.0400, +0.0100]"
    )
    assert "2.00x faster than fp32 at batch 1 (int8 4.00x)" in offered
    assert mixed_offer(_attributed(-0.01, -0.001)).startswith(
        "int8, layer 1 fp32 does not recover the accuracy one request at a time"
    )
    assert mixed_offer(_attributed(0.02, 0.03)).startswith("not needed: INT8's accuracy change one request at a time")
    assert mixed_offer(_result()) is None and cause_lines(_result()) == [] and layer_columns(_result()) == []
    spread = _attributed(-0.01, 0.01)
    spread["attribution"]["kept_fp32"] = None
    assert cause_lines(spread)[1] == "no single layer kept in fp32 removes INT8 error: it is spread over the layers"


def _no_better() -> dict:
    """_result() with every variant compared with always answering 'positive' (40 of 64): accuracy 0.5 against
    0.625, measured by bertwatch.ship.measure.against_constant on predictions that give it."""
    import numpy as np

    from bertwatch.ship.measure import against_constant

    labels = np.array([1] * 40 + [0] * 24)
    fp32 = np.array([1] * 20 + [0] * 20 + [0] * 12 + [1] * 12)  # 32 of 64 right
    int8 = fp32.copy()
    int8[0] = 0  # one fewer right: 0.4844, as the table's int8 row
    found = against_constant(
        {"fp32": fp32, "int8": int8}, labels, 2, "accuracy", 300, 0, 0.95, ("negative", "positive")
    )
    result = _result()
    for k, row in enumerate(result["variants"]):
        row["vs_constant"] = {
            "delta": found.delta[k],
            "ci_low": found.ci_low[k],
            "ci_high": found.ci_high[k],
            "no_better": found.no_better(k),
        }
    found = found.about("its ship figures")
    return {**result, "no_better_than_constant": found.no_better(), "trivial_baseline": found.to_json()}


def test_a_model_no_better_than_the_constant_is_said_first_in_the_table_and_the_section(tmp_path) -> None:
    result = _no_better()
    assert result["trivial_baseline"]["value"] == pytest.approx(40 / 64, rel=1e-12)
    lines = format_table(result).splitlines()
    assert lines[0].startswith("bertwatch ship: this model is no better than always answering 'positive' (accuracy ")
    assert lines[0].endswith(": its ship figures describe a model not worth shipping")
    assert (
        lines[1] == "bertwatch ship: predicted: negative 50.0%, positive 50.0%; labels: positive 62.5%, negative 37.5%"
    )
    header = next(line for line in lines if line.startswith("variant"))
    assert "vs always 'positive' 0.6250 [95% CI]" in header
    path = tmp_path / "ship.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    page = ship_section(path)
    assert page.index("this model is no better than always answering") < page.index("<table>")
    assert main(["report", str(tmp_path)]) == 0
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    glance = report[report.index("<dt>will it ship</dt>") :][:900]
    assert "this model is no better than always answering &#x27;positive&#x27;" in glance
    # a model that beats it: one line after the header, nothing said first
    better = {**_result()}
    assert not format_table(better).startswith("bertwatch ship:")  # a ship.json without the comparison still reads


def test_an_int8_gain_is_called_a_model_not_at_its_best() -> None:
    result = _result()
    result["variants"][1].update(delta=0.05, ci_low=0.01, ci_high=0.09, value=0.55)
    (reading,) = ship_readings(result)
    assert "+0.0500 (95% CI +0.0100 to +0.0900): an improvement, which says the model was not at its best" in reading
    assert "not a gain of removing parts; 96.9% of predictions unchanged" in reading
