"""``bertwatch ablate``, ``bertwatch ship`` and the report on the same checkpoint and the same MRPC examples name
the metric the same way ("F1", as the plugin does: ``core.task_names``) and give the same share of one example
(the ablation's rule, ``ablation.scoring.one_example_change``), so no answer says it is "not known" where another
states it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertwatch.cli import main
from tests.support.ship_models import save_checkpoint

SHARE = re.compile(r"one example moves (\S+) by up to ([0-9.]+)")


def test_ablate_ship_and_the_report_agree_on_the_metrics_name_and_one_examples_share(
    tmp_path: Path, glue_dir: Path, capsys
) -> None:
    ckpt = save_checkpoint(tmp_path / "ckpt")
    data = ["--task", "mrpc", "--glue-dir", str(glue_dir), "--limit", "60", "--max-length", "64", "--resamples", "100"]
    data += ["--quiet"]
    quick = ["--no-prune", "--no-keep-only", "--no-iterative", "--random-orders", "0"]
    assert main(["ablate", "--model", str(ckpt), *data, *quick, "--out", str(tmp_path / "abl")]) == 0
    ablated = capsys.readouterr().out
    ship = ["--repeats", "2", "--threads", "1", "--attribution-examples", "0"]
    assert main(["ship", "--model", str(ckpt), *data, *ship, "--out", str(tmp_path / "shp")]) == 0
    shipped = capsys.readouterr().out
    assert SHARE.findall(ablated) == SHARE.findall(shipped) != [], (ablated, shipped)
    assert SHARE.findall(ablated)[0][0] == "F1"
    assert "not known" not in shipped and "(F1, one request at a time)" in shipped.splitlines()[0]
    assert any(line.startswith("variant ") and "  F1, batch 1  " in line for line in shipped.splitlines())
    saved = json.loads((tmp_path / "shp" / "ship.json").read_text())
    assert saved["one_example_how"] == "flip" and f"{saved['one_example']:.2g}" == SHARE.findall(shipped)[0][1]
    for folder in ("abl", "shp"):
        assert main(["report", str(tmp_path / folder), "--out", str(tmp_path / f"{folder}.html")]) == 0
    capsys.readouterr()
    page = (tmp_path / "abl.html").read_text(encoding="utf-8")
    assert "Δ F1 when one head is disabled" in page and "Δ f1" not in page
    assert "one example moves F1 by up to" in (tmp_path / "shp.html").read_text(encoding="utf-8")
