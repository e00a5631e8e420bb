"""AblationSettings: defaults, validation, keyword overrides of ablate(), the sweep's steps stay short."""

from __future__ import annotations

import ast
import inspect

import numpy as np
import pytest

from bertwatch.ablation import sweep as SW
from bertwatch.ablation.settings import AblationSettings
from tests.support.tiny_trainer import tiny_bert, tiny_tokenizer, toy_texts

pytestmark = pytest.mark.fast


def test_defaults_overrides_and_refusals() -> None:
    s = AblationSettings()
    assert (s.mode, s.n_resamples, s.batch_size, s.prune_step, s.confidence) == ("uniform", 1000, 32, 0.1, 0.95)
    t = AblationSettings.resolve(s, n_resamples=10, mode="zero")
    assert (t.n_resamples, t.mode, s.n_resamples) == (10, "zero", 1000)
    with pytest.raises(TypeError, match="n_resample"):
        AblationSettings.resolve(s, n_resample=10)
    with pytest.raises(ValueError, match="unknown mode"):
        AblationSettings(mode="mean")
    with pytest.raises(ValueError, match="batch_size"):
        AblationSettings(batch_size=0)
    with pytest.raises(ValueError, match="prune_step"):
        AblationSettings(prune_step=0)
    with pytest.raises(AttributeError):
        s.mode = "zero"  # frozen


def test_settings_object_and_keywords_give_the_same_sweep() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_bert(tokenizer).eval()
    examples = toy_texts(12, seed=2)
    kwargs = dict(n_resamples=30, prune=False, keep_only=False, progress=False, batch_size=4)
    by_keywords = SW.ablate(model, examples, tokenizer, mode="zero", **kwargs)
    settings = AblationSettings(mode="zero", **kwargs)
    by_object = SW.ablate(model, examples, tokenizer, settings=settings)
    mixed = SW.ablate(model, examples, tokenizer, settings=AblationSettings(mode="zero", **kwargs), n_resamples=31)
    np.testing.assert_array_equal(by_keywords.heads, by_object.heads)
    assert by_object.config["n_resamples"] == 30 and mixed.config["n_resamples"] == 31
    with pytest.raises(TypeError, match="unexpected keyword"):
        SW.ablate(model, examples, tokenizer, n_resample=3)


def test_every_step_of_the_sweep_is_short() -> None:
    """Each step's code (its docstring not counted) fits on a screen."""
    tree = ast.parse(inspect.getsource(SW))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    lengths = {n.name: n.end_lineno - (n.body[1] if ast.get_docstring(n) else n.body[0]).lineno + 2 for n in functions}
    steps = {
        "prepare_sweep",
        "evaluate_unit_configs",
        "run_pruning_curves",
        "bootstrap_tables",
        "write_result",
        "ablate",
    }
    assert steps <= set(lengths)
    assert max(lengths.values()) <= 80, lengths


def test_the_settings_docstring_states_the_runner_limits() -> None:
    """The default stacking the docstring promises is the one ``runner.default_configs_per_batch`` applies."""
    from bertwatch.ablation import runner

    doc = " ".join(AblationSettings.__doc__.split())
    assert runner.MEMORY_SHARE == 0.5 and "as many as fit in half its free memory" in doc
    assert f"at most {runner.MAX_CONFIGS};" in doc
    assert f"elsewhere {runner.CPU_ROWS} rows, i.e. {runner.CPU_ROWS} // ``batch_size``" in doc
