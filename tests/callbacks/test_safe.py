"""Error containment (``callbacks._safe``): an error inside bertwatch costs one warning and stops that callback,
setup errors always propagate, and the tests' switch (never an environment variable) makes a callback re-raise."""

from __future__ import annotations

import warnings

import pytest

from bertwatch.callbacks import BertWatchWarning, SetupError, _safe
from bertwatch.callbacks._safe import contained, raising_errors
from bertwatch.heads.capture import UnsupportedModelError


class _Dummy:
    def __init__(self, strict: bool, error: Exception) -> None:
        self.strict, self.error, self.disabled, self.calls = strict, error, False, 0
        self.shown_name = "_Dummy"

    def disable(self, message=None):
        self.disabled = True
        warnings.warn(message, BertWatchWarning, stacklevel=2)

    @contained("on_step_end")
    def on_step_end(self):
        self.calls += 1
        raise self.error


def test_contained_warns_once_and_stops_the_monitor() -> None:
    dummy = _Dummy(False, RuntimeError("boom"))
    match = r"^bertwatch: _Dummy stopped after an error in on_step_end \(RuntimeError: boom\); training continues"
    with pytest.warns(BertWatchWarning, match=match) as record:
        for _ in range(3):
            assert dummy.on_step_end() is None
    assert len(record) == 1 and dummy.calls == 1 and dummy.disabled


def test_contained_reraises_when_strict_and_for_setup_errors() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _Dummy(True, RuntimeError("boom")).on_step_end()
    with pytest.raises(SetupError):
        _Dummy(False, SetupError("bad config")).on_step_end()
    with pytest.raises(UnsupportedModelError):
        _Dummy(False, UnsupportedModelError("gpt2")).on_step_end()


@pytest.mark.fast
def test_the_switch_is_the_tests_own_and_off_for_every_user(monkeypatch) -> None:
    from tests.support.strict import strict

    assert _safe.RAISE_ERRORS is False and raising_errors() is False
    monkeypatch.setenv("BERTWATCH_STRICT", "1")  # what turned it on in earlier versions: ignored now
    assert raising_errors() is False
    assert strict(raising_errors) is True and raising_errors() is False  # on only while the callback is built
    source = open(_safe.__file__, encoding="utf-8").read()
    assert "os.environ" not in source and "getenv" not in source  # the library reads no environment for it
