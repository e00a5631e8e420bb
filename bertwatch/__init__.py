"""bertwatch: watch what every attention head of a BERT-family encoder does while it fine-tunes.

``import bertwatch`` is cheap: it imports neither torch nor transformers. The public names below are
loaded on first use, so TensorBoard can import the plugin without paying for the model stack: the entry points
(``watch``, ``prune_failing``, ``analyze``, ``ablate``, the callbacks) and every settings value they take (``WatchSettings`` and its
nested ``ProbeOptions``, ``AlertSettings``, ``VerdictSettings``, ``AblationOptions``, ``ExpertOptions``, and
``WordClassProbe``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertwatch.core.lazy import lazy_names

__version__ = "0.1.0"

_LAZY = {
    "analyze": "bertwatch.analysis.text_stats",
    "Intervention": "bertwatch.heads.intervention",
    "TokenRoles": "bertwatch.heads.roles",
    "token_roles": "bertwatch.heads.roles",
    "compute_stats": "bertwatch.heads.maps.stats",
    "BertWatchCallback": "bertwatch.callbacks",
    "AttentionDriftCallback": "bertwatch.callbacks",
    "SpecialTokenMassCallback": "bertwatch.callbacks",
    "EntropyCallback": "bertwatch.callbacks",
    "GradientImportanceCallback": "bertwatch.callbacks",
    "AblationCallback": "bertwatch.callbacks",
    "ablate": "bertwatch.ablation.sweep",
    "watch": "bertwatch.callbacks.attach",
    "prune_failing": "bertwatch.callbacks.trial_pruning",
    "WatchSettings": "bertwatch.options.settings",
    "ProbeOptions": "bertwatch.options.groups",
    "AblationOptions": "bertwatch.options.groups",
    "ExpertOptions": "bertwatch.options.groups",
    "WordClassProbe": "bertwatch.options.groups",
    "AlertSettings": "bertwatch.core.alerts",
    "VerdictSettings": "bertwatch.core.verdict",
}

__all__ = sorted(_LAZY) + ["__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from bertwatch.ablation.sweep import ablate
    from bertwatch.analysis.text_stats import analyze
    from bertwatch.callbacks import (
        AblationCallback,
        AttentionDriftCallback,
        BertWatchCallback,
        EntropyCallback,
        GradientImportanceCallback,
        SpecialTokenMassCallback,
    )
    from bertwatch.callbacks.attach import watch
    from bertwatch.callbacks.trial_pruning import prune_failing
    from bertwatch.core.alerts import AlertSettings
    from bertwatch.core.verdict import VerdictSettings
    from bertwatch.heads.intervention import Intervention
    from bertwatch.heads.maps.stats import compute_stats
    from bertwatch.heads.roles import TokenRoles, token_roles
    from bertwatch.options.groups import AblationOptions, ExpertOptions, ProbeOptions, WordClassProbe
    from bertwatch.options.settings import WatchSettings


__getattr__ = lazy_names(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    return __all__
