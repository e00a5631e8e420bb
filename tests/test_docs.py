"""The user-facing documents state what is true now: no work diary (sessions, issue numbers, dates of work, the
machine's load while something was measured). Where a figure came from belongs in commit messages; a figure in the
docs names its command, machine and commit (docs/performance.md's table)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What a diary passage looks like, each with the reason it is not a user's guide.
DIARY = {
    "a work session": re.compile(r"\bsessions?\b", re.I),
    "an issue number": re.compile(r"\bissues?[\s-]*#?\d+|(?<![\w&/#`])#\d+\b", re.I),
    "a date of work": re.compile(
        r"\b20\d\d-[01]\d-[0-3]\d\b"
        r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? [0-3]?\d(?:st|nd|rd|th)?,? 20\d\d\b"
        r"|\b[0-3]?\d(?:st|nd|rd|th)? (?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* 20\d\d\b"
        r"|\b(?:today|yesterday|tonight|this (?:morning|afternoon|evening|week))\b",
        re.I,
    ),
    "the machine's load during a measurement": re.compile(r"\bload average\b[^.\n]{0,25}?\d|\bload (?:of )?\d", re.I),
    "a slow spell of the machine": re.compile(r"\bspells?\b(?!\s+(?:it|them|out)\b)", re.I),
    "who did the work": re.compile(
        r"\b(?:this|the (?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|"
        r"tenth|last|previous|next)) (?:work|session|helper|engineer)\b|\bthe lead\b",
        re.I,
    ),
}

#: A release heading of the changelog may carry its date (Keep a Changelog: "## [0.1.0] - 2026-11-26").
RELEASE_HEADING = re.compile(r"^## \[[^\]]+\] - 20\d\d-[01]\d-[0-3]\d$")


def user_docs() -> list[Path]:
    return [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]


def diary_passages(text: str, changelog: bool = False) -> list[tuple[int, str, str]]:
    """``(line number, what, the line)`` for every diary passage of ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if changelog and RELEASE_HEADING.match(line.strip()):
            continue
        for what, pattern in DIARY.items():
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


@pytest.mark.fast
@pytest.mark.parametrize(
    "line",
    [
        "The ninth session (on 93909bf; no change to the code those figures time), the same commands:",
        "| pruning curve, CPU time | 33 s | 38 s | 0.86 (0.72–0.86 after issue 25's work) |",
        "## Targets (issue 15)",
        "see [performance.md](performance.md#the-overhead-budget-issue-26) for the figures",
        "fixed in #42",
        "Measured 2026-11-24 on the 2-core machine, one thread per run.",
        "measured on Nov 24, 2026 with one thread",
        "on a machine shared with other jobs (load average about 7):",
        "on the same machine (load average 0.7–1.2):",
        "under load 8–11 from other jobs",
        "rounds that fell in a spell (the medians moved)",
        "the machine has spells in which the statistics run slower",
        "What remains untried (no GPU was lent to this work).",
        "the lead's quiet-machine figures before the change",
        "two runs earlier today",
    ],
)
def test_the_patterns_find_diary_passages(line: str) -> None:
    assert diary_passages(line), line


@pytest.mark.fast
@pytest.mark.parametrize(
    "line",
    [
        "| `head_importance` | abs(∂L/∂ξ_h) at ξ = 1 | Michel et al. 2019 | the first-order loss change |",
        "Clark et al. (2019), *What Does BERT Look At?*, and Voita et al., ACL 2019.",
        "Layers and heads are numbered from 0: L2 H7 is the eighth head of the third layer.",
        "The benchmark prints the load average; compare figures taken on the same machine only.",
        "The family name of the configuration as transformers spells it.",
        "## [0.1.0] - 2026-11-26",
        "bertwatch writes its event file with `google-crc32c` (CRC-32C in C), 0.2 ms against 53 ms.",
        "`GlueTask` reads the columns `#1 String` and `#2 String` of MRPC.",
        "| training overhead, 100 steps | wall time **0.971** | ≤ 1.03 | `bench_overhead.py` | 2-core CPU VM | 93909bf |",
        "The issue tracker is the place for bugs; TensorBoard shows a step after 1–4 s.",
    ],
)
def test_the_patterns_leave_plain_statements_alone(line: str) -> None:
    assert not diary_passages(line, changelog=line.startswith("## [")), diary_passages(line, changelog=True)


@pytest.mark.fast
def test_the_user_docs_keep_no_diary() -> None:
    docs = user_docs()
    missing = [str(p.relative_to(ROOT)) for p in docs if not p.is_file()]
    assert not missing, f"expected documents missing: {missing}"
    assert len(docs) >= 10
    found = [
        f"{path.relative_to(ROOT)}:{number}: {what}: {line}"
        for path in docs
        for number, what, line in diary_passages(path.read_text(encoding="utf-8"), path.name == "CHANGELOG.md")
    ]
    assert not found, "diary passages in the user docs (state what is true now; history goes in commits):\n" + (
        "\n".join(found)
    )
