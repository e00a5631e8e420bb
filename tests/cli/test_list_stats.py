"""``bertwatch stats``: every statistic by family with its one-line definition, the default set marked; quiet into a
reader that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertwatch.callbacks import BertWatchCallback
from bertwatch.cli import main
from bertwatch.core.stat_names import ALL_STATS, DEFINITIONS, STAT_GROUPS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.fast
def test_bertwatch_stats_lists_every_statistic_by_family_with_its_definition(capsys) -> None:
    assert main(["stats"]) == 0
    out = capsys.readouterr().out
    assert set(ALL_STATS) <= set(DEFINITIONS) and all(DEFINITIONS[n].strip() for n in DEFINITIONS)
    legend, *blocks = out.strip().split("\n\n")
    assert legend.startswith("* measured by default")
    assert [b.splitlines()[0].split(" (measured")[0] for b in blocks] == [title for title, _ in STAT_GROUPS]
    default = set(BertWatchCallback.default_stats)  # what a callback without stats= measures
    for block, (_, names) in zip(blocks, STAT_GROUPS, strict=True):
        rows = [(line[:2], *line[2:].split(None, 1)) for line in block.splitlines()[1:]]
        assert rows == [("* " if n in default else "  ", n, DEFINITIONS[n]) for n in names]
    marked = {line.split()[1] for line in out.splitlines()[1:] if line.startswith("* ")}
    assert marked == default and "mixing_ratio" not in marked and "head_attribution_ig" not in marked
    assert "Word classes (UD share) (measured with --word-classes, not --stats)" in out
    assert "Special tokens\n" in out and "--stats" not in blocks[0]


@pytest.mark.fast
def test_bertwatch_stats_into_a_reader_that_stops_early_ends_quietly() -> None:
    """``bertwatch stats | head -1``: the reader closes the pipe (here before a word is written); no traceback,
    exit 0."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    read, write = os.pipe()
    os.close(read)
    with subprocess.Popen(
        [sys.executable, "-m", "bertwatch", "stats"], stdout=write, stderr=subprocess.PIPE, env=env, cwd=ROOT
    ) as proc:
        os.close(write)
        stderr = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert code == 0 and "Traceback" not in stderr, stderr
