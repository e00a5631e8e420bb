"""What differs between tokenizers, configs and devices (probe/adapt.py): a missing attribute gives its default,
a present one its value, and the training's mixed precision reaches bertwatch's own passes only where autocast
takes it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bertwatch.probe.adapt import autocast_dtype, config_value, mixed_precision, tokenizer_value

pytestmark = pytest.mark.fast


def test_a_missing_tokenizer_or_config_attribute_gives_the_default_and_a_present_one_its_value() -> None:
    tokenizer = SimpleNamespace(pad_token_id=3)
    assert tokenizer_value(tokenizer, "pad_token_id") == 3
    assert tokenizer_value(tokenizer, "padding_side", "right") == "right"
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64))
    assert config_value(model, "max_position_embeddings") == 64
    assert config_value(model, "problem_type") is None
    assert config_value(torch.nn.Linear(2, 2), "_name_or_path", "") == ""  # a bare module has no config


@pytest.mark.parametrize(
    ("bf16", "fp16", "dtype"), [(True, False, torch.bfloat16), (False, True, torch.float16), (False, False, None)]
)
def test_the_training_precision_is_read_from_its_arguments(bf16, fp16, dtype) -> None:
    assert autocast_dtype(SimpleNamespace(bf16=bf16, fp16=fp16)) is dtype


def test_mixed_precision_runs_a_pass_in_the_training_dtype_and_nothing_else_changes_without_one() -> None:
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with mixed_precision(torch.device("cpu"), torch.bfloat16):
        assert layer(x).dtype == torch.bfloat16
    with mixed_precision(torch.device("cpu"), None):
        assert layer(x).dtype == torch.float32
