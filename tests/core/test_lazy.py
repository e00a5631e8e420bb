"""Names loaded on first use (``core.lazy.lazy_names``), and the package root built with it: ``import bertwatch``
stays torch-free while every entry point and every settings value the docs name is importable from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bertwatch.core.lazy import lazy_names

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ("WatchSettings", "ProbeOptions", "AlertSettings", "VerdictSettings", "AblationOptions", "ExpertOptions")


def test_a_name_is_imported_on_first_use_and_kept() -> None:
    namespace: dict = {}
    getattr_ = lazy_names("pkg", {"dumps": "json", "missing": "json"}, namespace)
    assert "dumps" not in namespace
    import json

    assert getattr_("dumps") is json.dumps and namespace["dumps"] is json.dumps  # later look-ups skip the hook
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getattr_("loads")  # not declared: an ordinary AttributeError
    with pytest.raises(AttributeError):
        getattr_("missing")  # declared, but the module has no such name


def test_the_settings_values_come_from_bertwatch_itself_and_are_the_callbacks_own() -> None:
    import bertwatch
    import bertwatch.callbacks as callbacks

    for name in (*SETTINGS, "WordClassProbe"):
        assert name in bertwatch.__all__ and name in dir(bertwatch)
        assert getattr(bertwatch, name) is getattr(callbacks, name), name
    settings = bertwatch.WatchSettings(probing=bertwatch.ProbeOptions(max_length=256))
    assert settings.probing.max_length == 256


def test_the_settings_import_leaves_the_root_torch_free() -> None:
    code = (
        "import sys, bertwatch\n"
        "assert 'torch' not in sys.modules\n"
        "from bertwatch import AlertSettings, VerdictSettings\n"  # torch-free values, from core
        "assert 'torch' not in sys.modules, 'AlertSettings or VerdictSettings imported torch'\n"
        f"from bertwatch import {', '.join(SETTINGS)}\n"
        "print(ProbeOptions(seed=1).seed)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "1"
