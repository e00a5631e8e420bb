"""How a head is disabled (``core.modes``): the two modes and the one check of a mode's name."""

from __future__ import annotations

import pytest

from bertwatch.core.modes import MODES, check_mode

pytestmark = pytest.mark.fast


def test_the_two_modes_pass_unchanged() -> None:
    assert MODES == ("uniform", "zero")
    for mode in MODES:
        assert check_mode(mode) is mode


@pytest.mark.parametrize("wrong", ["Zero", "uniform ", "mean", ""])
def test_any_other_name_is_refused_naming_the_setting_and_both_modes(wrong: str) -> None:
    with pytest.raises(ValueError, match=rf"unknown ablation_mode {wrong!r}: use 'uniform' \(Kovaleva\) or 'zero'"):
        check_mode(wrong, "ablation_mode")
    with pytest.raises(ValueError, match=r"^unknown mode "):
        check_mode(wrong)
