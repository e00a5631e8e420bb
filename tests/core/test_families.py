"""A model's family name (``core.families.model_family``): the config's ``model_type`` with dashes, from a model or
a config, whichever way transformers spells it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import transformers as T

from bertwatch.core.families import model_family

pytestmark = pytest.mark.fast


def test_underscores_become_dashes_from_a_config_or_a_model() -> None:
    config = SimpleNamespace(model_type="deberta_v2")
    assert model_family(config) == "deberta-v2"
    assert model_family(SimpleNamespace(config=config)) == "deberta-v2"  # a model: its config is read
    assert model_family(SimpleNamespace(model_type="xlm-roberta")) == "xlm-roberta"  # already dashed: kept


def test_real_transformers_configs_are_spelled_as_bertwatch_keys_them() -> None:
    assert model_family(T.BertConfig()) == "bert"
    assert model_family(T.DebertaV2Config()) == "deberta-v2"
    assert model_family(T.XLMRobertaConfig()) == "xlm-roberta"


def test_no_model_type_gives_the_default() -> None:
    assert model_family(object()) == ""
    assert model_family(SimpleNamespace(config=SimpleNamespace()), default="unknown") == "unknown"
