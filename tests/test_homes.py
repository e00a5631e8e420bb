"""Rules with one home: every entry point that takes a disabling mode refuses a wrong one with the same message
(``core.modes.check_mode``), and every per-family table is keyed by ``core.families.model_family``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bertwatch.ablation.runner import Runner
from bertwatch.ablation.settings import AblationSettings
from bertwatch.callbacks.ablate_on_end import AblationCallback
from bertwatch.core.families import model_family
from bertwatch.core.modes import MODES, check_mode
from bertwatch.heads.capture import Intervention
from bertwatch.options.settings import AblationOptions, WatchSettings
from tests.support.models import tiny_model

MESSAGE = "unknown mode 'ones': use 'uniform' (Kovaleva) or 'zero' (Michel)"


def test_every_mode_check_is_the_one_rule():
    assert [check_mode(m) for m in MODES] == list(MODES)
    refusals = [
        lambda: check_mode("ones"),
        lambda: Intervention.disable(torch.zeros(2, 2, dtype=torch.bool), "ones"),
        lambda: AblationSettings(mode="ones"),
        lambda: AblationCallback(modes=("uniform", "ones")),
        lambda: Runner(tiny_model("bert"), "ones"),
    ]
    for refuse in refusals:
        with pytest.raises(ValueError) as error:
            refuse()
        assert str(error.value) == MESSAGE
    with pytest.raises(ValueError, match=r"^unknown AblationOptions.mode 'ones': use 'uniform' \(Kovaleva\)"):
        WatchSettings(ablation=AblationOptions(mode="ones"))


def test_model_family_spells_with_dashes_from_a_model_or_its_config():
    config = SimpleNamespace(model_type="deberta_v2")
    assert model_family(config) == "deberta-v2"
    assert model_family(SimpleNamespace(config=config)) == "deberta-v2"
    assert model_family(SimpleNamespace(), "Plain") == "Plain"
    assert model_family(None) == ""
    assert model_family(tiny_model("bert")) == "bert"
