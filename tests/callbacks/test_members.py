"""What a callback brings to its run (``callbacks.members``): which of its statistics need a loss, whether it gives
the run-health signals, and what a loss it cannot have does to it."""

from __future__ import annotations

import pytest

from bertwatch.callbacks import BertWatchWarning, SetupError
from bertwatch.callbacks.members import Member
from bertwatch.callbacks.pacing import ProbePacing
from bertwatch.heads.gradients.importance import GRADIENT_NAMES, IG_NAME

pytestmark = pytest.mark.fast


def _member(*names: str, required: bool = False) -> Member:
    return Member("EntropyCallback", frozenset(names), ProbePacing(1, 0.02), required)


def test_the_gradient_rule() -> None:
    mixed = _member("entropy", GRADIENT_NAMES[0], IG_NAME)
    assert mixed.gradients == {GRADIENT_NAMES[0], IG_NAME} and mixed.gives_health
    ig = _member("entropy", IG_NAME)
    assert ig.gradients == {IG_NAME} and not ig.gives_health  # integrated gradients run no gradient pass
    assert not _member("entropy").gradients and not _member("entropy").gives_health


def test_a_refused_loss_drops_the_gradient_statistics_with_a_warning_or_stops_the_run() -> None:
    member = _member("entropy", *GRADIENT_NAMES)
    with pytest.warns(BertWatchWarning, match=r"bertwatch: EntropyCallback skips the gradient statistics .*: no loss"):
        member.drop_gradients("no loss")
    assert member.stat_names == {"entropy"} and not member.gives_health  # the same member, without them
    with pytest.raises(SetupError, match="cannot be measured: no loss"):
        _member("entropy", *GRADIENT_NAMES, required=True).drop_gradients("no loss")  # asked for by name
    with pytest.raises(SetupError, match="cannot be measured"):
        _member(*GRADIENT_NAMES).drop_gradients("no loss")  # nothing else to measure
    plain = _member("entropy")
    plain.drop_gradients("no loss")
    assert plain.stat_names == {"entropy"}
