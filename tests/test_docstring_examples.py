"""The examples in bertwatch's docstrings run and print what they say (doctest, offline, tiny random models), and
the entry points are documented with Args / Returns / Raises / Example sections."""

from __future__ import annotations

import doctest
import importlib
import inspect
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

PACKAGE = Path(__file__).resolve().parents[1] / "bertwatch"

#: Modules whose docstring examples run as doctests.
RUN = (
    "bertwatch.ablation.settings",
    "bertwatch.ablation.sweep",
    "bertwatch.analysis.text_stats",
    "bertwatch.callbacks.alert_lines",
    "bertwatch.callbacks.announce",
    "bertwatch.callbacks.attach",
    "bertwatch.callbacks.judging",
    "bertwatch.callbacks.trial_pruning",
    "bertwatch.core.alerts",
    "bertwatch.core.baseline",
    "bertwatch.report.alerts_section",
    "bertwatch.report.changes",
    "bertwatch.report.html",
    "bertwatch.report.sweep_table",
    "bertwatch.core.sweep_verdicts",
    "bertwatch.report.markup",
    "bertwatch.report.ship_section",
    "bertwatch.probe.measurements",
    "bertwatch.probe.probe_pass",
    "bertwatch.core.schema",
    "bertwatch.options.groups",
    "bertwatch.options.settings",
    "bertwatch.cli.list_stats",
    "bertwatch.callbacks.watch",
    "bertwatch.core.budget",
    "bertwatch.core.evidence",
    "bertwatch.core.readings",
    "bertwatch.core.verdict",
    "bertwatch.core.families",
    "bertwatch.core.lazy",
    "bertwatch.core.modes",
    "bertwatch.core.removable",
    "bertwatch.core.verdict_settings",
    "bertwatch.core.resolution",
    "bertwatch.ablation.estimate",
    "bertwatch.tb.colours",
    "bertwatch.core.warnings",
    "bertwatch.heads.capture",
    "bertwatch.heads.host",
    "bertwatch.heads.layout",
    "bertwatch.heads.gradients.length_groups",
    "bertwatch.heads.loading",
    "bertwatch.heads.stability.logits",
    "bertwatch.heads.stability.spectral_norms",
    "bertwatch.heads.maps.stats",
    "bertwatch.heads.task_heads",
    "bertwatch.ship.delimiters",
    "bertwatch.ship.layer_error",
    "bertwatch.ship.measure",
    "bertwatch.tb.views.heads.measures",
    "bertwatch.tb.writer.summary",
)
#: Modules whose examples are sketches (they need a trained checkpoint, write a model folder, or show calls on
#: tensors they do not build): read, not run.
SKETCHES = {
    "bertwatch.ablation.gain": "needs a fine-tuned model and its pruned copy",
    "bertwatch.ablation.physical": "saves and reloads a pruned checkpoint with trust_remote_code",
    "bertwatch.heads.pruned_modeling": "the modeling file copied into a pruned checkpoint",
    "bertwatch.analysis.text_mixing": "shows the calls on a model and tokenized texts the example does not build",
    "bertwatch.heads.mixing.mixing_scores": "shows the calls on a captured batch the example does not build",
    "bertwatch.heads.mixing.mixing_model": "shows the calls on a model and batch the example does not build",
    "bertwatch.ship.export": "needs a fine-tuned classifier and writes ONNX files",
    "bertwatch.ship.shipping": "needs a fine-tuned classifier and its evaluation set",
    "bertwatch.ship.table": "reads the ship.json a run wrote",
}

#: The entry points a user meets first, and the sections their docstrings must have.
ENTRY_POINTS = {
    "bertwatch.ablation.sweep:ablate": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.analysis.text_stats:analyze": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.heads.capture:capture": ("Args:", "Yields:", "Raises:", "Example:"),
    "bertwatch.heads.maps.stats:compute_stats": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.tb.writer.summary:SummaryWriter": ("Args:", "Raises:", "Example:"),
    "bertwatch.ablation.settings:AblationSettings": ("Args:", "Raises:", "Example:"),
    "bertwatch.ship.shipping:ship_model": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.ship.export:export_onnx": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.options.settings:WatchSettings": ("Args:", "Returns:", "Raises:", "Example:"),
    "bertwatch.options.groups:ProbeOptions": ("Args:", "Raises:", "Example:"),
    "bertwatch.core.alerts:AlertSettings": ("Args:", "Raises:", "Example:"),
    "bertwatch.core.verdict:VerdictSettings": ("Args:", "Raises:", "Example:"),
    "bertwatch.options.groups:AblationOptions": ("Args:", "Raises:", "Example:"),
    "bertwatch.options.groups:ExpertOptions": ("Args:", "Raises:", "Example:"),
    "bertwatch.options.groups:WordClassProbe": ("Args:", "Raises:", "Example:"),
}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


@pytest.mark.parametrize("name", RUN)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    tests = [t for t in finder.find(module, name) if t.examples]
    for test in tests:
        runner.run(test, out=report.append)
    outcome = runner.summarize(verbose=False)
    assert outcome.attempted > 0, f"{name} has no docstring example to run"
    assert outcome.failed == 0, "".join(report)


def test_every_module_with_examples_runs_them_or_says_why_not() -> None:
    with_examples = {module_name(p) for p in PACKAGE.rglob("*.py") if ">>>" in p.read_text()}
    unlisted = sorted(with_examples - set(RUN) - set(SKETCHES))
    assert not unlisted, f"modules with docstring examples neither run (RUN) nor listed as SKETCHES: {unlisted}"
    gone = sorted((set(RUN) | set(SKETCHES)) - with_examples)
    assert not gone, f"listed modules without examples: {gone}"


@pytest.mark.parametrize("target", sorted(ENTRY_POINTS))
def test_entry_points_document_their_arguments_results_errors_and_an_example(target: str) -> None:
    module, _, name = target.partition(":")
    doc = inspect.getdoc(getattr(importlib.import_module(module), name)) or ""
    missing = [section for section in ENTRY_POINTS[target] if section not in doc]
    assert not missing, f"{target}'s docstring lacks {missing}"
