"""The monitoring options as one frozen, checked value: ``WatchSettings`` (and ``ProbeSettings``, its probe part).

``WatchSettings`` is the one home of every option of ``BertWatchCallback``, the single-purpose callbacks,
``bertwatch.watch`` and ``bertwatch run``: a front of a dozen options a run needs, and five nested values for the
rest (``probing=ProbeOptions(...)``, ``alerts=AlertSettings(...)``, ``verdict=VerdictSettings(...)``,
``ablation=AblationOptions(...)``, ``expert=ExpertOptions(...)``). The fields carry the names, defaults, help texts, checks and command-line flags
(``bertwatch run`` builds its options from them, :func:`option_specs`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from bertwatch.core.alerts import AlertSettings
from bertwatch.core.budget import DEFAULT_OVERHEAD_BUDGET, check_budget
from bertwatch.core.schema import (
    Checked,
    Flag,
    callable_or_none,
    check_options,
    check_probe_texts,
    check_stats,
    default_of,
    frozen_value,
    instance_of,
    option,
    path_or_none,
    sized_dataset,
    switch,
    whole,
)
from bertwatch.core.stat_names import ALL_STATS, MAP_STATS
from bertwatch.core.verdict import VerdictSettings
from bertwatch.options.groups import GROUPS, AblationOptions, ExpertOptions, ProbeOptions

__all__ = [
    "ALL_STATS",
    "COMMON_OPTIONS",
    "GROUPS",
    "MAP_STATS",
    "ON_ALERT_CHOICES",
    "AblationOptions",
    "AlertSettings",
    "ExpertOptions",
    "Flag",
    "OptionSpec",
    "ProbeOptions",
    "PROBE_PART",
    "ProbeSettings",
    "VerdictSettings",
    "WatchSettings",
    "callback_settings",
    "check_options",
    "option_specs",
]


_GROUP_CLASS = {name: cls for name, cls, _ in GROUPS}

#: The string values of ``on_alert`` (a callable is the other choice).
ON_ALERT_CHOICES: tuple[str, ...] = ("warn", "stop", "none")


def _on_alert(name: str, value: Any) -> Any:
    if callable(value) or value in ON_ALERT_CHOICES:
        return value
    kind = ValueError if isinstance(value, str) else TypeError
    raise kind(f"{name} must be one of {', '.join(map(repr, ON_ALERT_CHOICES))} or a callable(alerts), not {value!r}")


@dataclass(frozen=True, eq=False, init=False)
class WatchSettings(Checked):
    """Every monitoring option of bertwatch's callbacks, ``watch()`` and ``bertwatch run``, in one checked value.

    The fields are the callbacks' keyword arguments, with the same names and defaults (``docs/callbacks.md`` lists
    them with their flags): the options most runs set, then five nested values for the rest. ``BertWatchCallback(
    settings=s)``, ``watch(trainer, settings=s)`` and keyword arguments are the same thing: keywords given beside
    ``settings`` replace its fields. The single-purpose callbacks take the options that concern them as keywords,
    and ignore the others in a ``settings`` value. Plain data (numbers, strings, paths, lists of them, such as two
    equal lists of probe texts) compares by value; objects (a dataset, tokenizer, collator, model or loss function)
    by identity.

    Args:
        probe_texts: probe with these texts: strings, ``(text, text_pair)`` tuples or dicts with ``'text'`` (and
            ``'text_pair'``, ``'label'``). Default: a sample of the evaluation set.
        probe_dataset: sample the probe set from this (tokenized) dataset instead of the evaluation set.
        num_probe_examples: how many examples the probe set samples.
        stats: the statistics to measure (default: the callback's own; ``bertwatch stats`` lists them all).
        every_n_steps: measure every N optimiser steps (0: only at start, evaluations and end; None: as often as
            ``overhead_budget`` allows).
        overhead_budget: bertwatch's share of wall time when ``every_n_steps`` is None.
        logging_dir: the TensorBoard run folder (default: the Trainer's).
        loss_fn: ``loss_fn(outputs, batch) -> [batch]`` per-example loss for the gradient statistics.
        num_maps: probe examples whose attention maps are written.
        ablate_on_end: run the head and layer ablation sweep when training ends.
        on_alert: what a stability alert does: ``"warn"``, ``"stop"``, ``"none"`` or a callable.
        quiet: print no start and end lines (``BERTWATCH_QUIET=1`` does the same).
        probing: how the probe pass runs and when (:class:`ProbeOptions`).
        alerts: the thresholds of the stability alerts (:class:`~bertwatch.core.alerts.AlertSettings`).
        verdict: the thresholds of the run verdict (:class:`~bertwatch.core.verdict.VerdictSettings`).
        ablation: the sweep of ``ablate_on_end`` (:class:`AblationOptions`).
        expert: extra measurements and machinery (:class:`ExpertOptions`).

    Returns:
        A frozen value: :meth:`replace` makes a changed copy, :meth:`probe` the part that decides the probe pass.

    Raises:
        TypeError: a value of the wrong type, or an unknown option name (the message suggests the closest).
        ValueError: a value out of its range, or an unknown statistic (the message suggests the closest).

    Example:
        >>> s = WatchSettings(every_n_steps=20, probing=ProbeOptions(max_length=256))
        >>> s.replace(num_maps=2).num_maps, s.probing.max_length
        (2, 256)
        >>> WatchSettings(probe_texts="a good film")
        Traceback (most recent call last):
        TypeError: probe_texts must be a list of texts, e.g. ["a good film"]; got the string 'a good film'
    """

    probe_texts: Sequence[Any] | None = option(
        None, "probe with these texts: strings, (text, text_pair) tuples or dicts {'text', 'text_pair', 'label'} "
        "(default: a sample of the evaluation set)", check_probe_texts,
        Flag(("--probe-texts",), "lines", metavar="FILE",
             help="a file of probe texts, one per line (a tab before a second sentence)"),
    )  # fmt: skip
    probe_dataset: Any = option(
        None, "sample the probe set from this (tokenized) dataset instead of the evaluation set", sized_dataset
    )
    num_probe_examples: int = option(
        32, "how many examples the probe set samples", whole(1), Flag(("--num-probe-examples",), "int")
    )
    stats: Sequence[str] | None = option(
        None, "statistics to measure (default: the callback's own; `bertwatch stats` lists them all)",
        check_stats(ALL_STATS),
        Flag(("--stats",), "names", metavar="A,B",
             help="statistics to measure, comma-separated (default: those `bertwatch stats` marks with *)"),
    )  # fmt: skip
    every_n_steps: int | None = option(
        None, "measure every N optimiser steps (0: only at start, evaluations and end; None: as often as the "
        "overhead budget allows)", whole(0, optional=True, meaning=" (0 = only at start, evaluation and end)"),
        Flag(("--every-n-steps",), "int",
             help="measure every N steps (0: only at start, evaluations and end; default: as the budget allows)"),
    )  # fmt: skip
    overhead_budget: float = option(
        DEFAULT_OVERHEAD_BUDGET, "the share of the training time bertwatch may take when every_n_steps is None",
        lambda name, value: check_budget(value),
        Flag(("--overhead-budget",), "float", metavar="SHARE",
             help="the share of the training time bertwatch may take when --every-n-steps is not given "
             "(default 0.02)"),
    )  # fmt: skip
    logging_dir: str | os.PathLike | None = option(
        None, "the TensorBoard run folder (default: the Trainer's)", path_or_none,
        Flag(("--logdir",), "str", metavar="DIR"),
    )  # fmt: skip
    loss_fn: Callable | None = option(
        None, "loss_fn(outputs, batch) -> per-example loss, for the gradient statistics",
        callable_or_none("a function loss_fn(outputs, batch) -> per-example loss"),
    )  # fmt: skip
    num_maps: int = option(4, "probe examples whose attention maps are written", whole(0), Flag(("--num-maps",), "int"))
    ablate_on_end: bool = option(
        False, "when training ends, disable each head and layer in turn and measure what it costs", switch(),
        Flag(("--ablate", "--ablate-on-end"), "true"),
    )  # fmt: skip
    on_alert: Any = option(
        "warn", "what a stability alert does: 'warn', 'stop' (save a checkpoint and stop training), 'none', or a "
        "callable(alerts) (return 'stop' to stop)", _on_alert,
        Flag(("--on-alert",), "choice", choices=ON_ALERT_CHOICES,
             help="what a stability alert does: warn, stop (save a checkpoint and stop training) or none"),
    )  # fmt: skip
    quiet: bool = option(
        False, "print no start and end lines; BERTWATCH_QUIET=1 does the same", switch(), Flag(("--quiet",), "true")
    )
    probing: ProbeOptions = option(
        None, "how the probe pass runs and when", instance_of(ProbeOptions, "ProbeOptions(max_length=256)"),
        factory=ProbeOptions,
    )  # fmt: skip
    alerts: AlertSettings = option(
        None, "the thresholds of the stability alerts", instance_of(AlertSettings, "AlertSettings(patience=3)"),
        factory=AlertSettings,
    )  # fmt: skip
    verdict: VerdictSettings = option(
        None,
        "the thresholds of the run verdict (healthy, at risk, failing)",
        instance_of(VerdictSettings, "VerdictSettings(hold_share=0.4)"),
        factory=VerdictSettings,
    )
    ablation: AblationOptions = option(
        None, "the sweep of ablate_on_end", instance_of(AblationOptions, "AblationOptions(mode='zero')"),
        factory=AblationOptions,
    )  # fmt: skip
    expert: ExpertOptions = option(
        None, "extra measurements and machinery", instance_of(ExpertOptions, "ExpertOptions(word_classes=True)"),
        factory=ExpertOptions,
    )  # fmt: skip

    @classmethod
    def option_prefix(cls) -> str:
        return ""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every top-level option name, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def value(self, spelled: str) -> Any:
        """The value of one option: ``"every_n_steps"``, or ``"probing.seed"`` for a field of a nested value."""
        found: Any = self
        for name in spelled.split("."):
            found = getattr(found, name)
        return found

    def replace(self, **options: Any) -> WatchSettings:
        """A copy with ``options`` changed (checked as the constructor checks them; unknown names refused)."""
        if not options:
            return self
        return WatchSettings(**{**{name: getattr(self, name) for name in self.names()}, **options})

    def probe(self) -> ProbeSettings:
        """The part of these settings that decides the probe pass (shared between callbacks when equal)."""
        return ProbeSettings(**{name: self.value(spelled) for name, spelled in PROBE_PART.items()})


def _field(spelled: str) -> dataclasses.Field:
    """The field that declares an option spelled ``"loss_fn"`` or ``"probing.seed"``."""
    *group, name = spelled.split(".")
    owner = _GROUP_CLASS[group[0]] if group else WatchSettings
    return next(f for f in dataclasses.fields(owner) if f.name == name)


#: What decides what a probe pass computes: each field of ``ProbeSettings`` and the option of ``WatchSettings`` it
#: is (``"group.field"``: a nested value's field), whose default, check and help it takes.
PROBE_PART: dict[str, str] = {
    "texts": "probe_texts",
    "dataset": "probe_dataset",
    "tokenizer": "probing.tokenizer",
    "collator": "probing.data_collator",
    "num_examples": "num_probe_examples",
    "seed": "probing.seed",
    "batch_size": "probing.batch_size",
    "max_length": "probing.max_length",
    "reference_model": "probing.reference_model",
    "cache_reference": "probing.cache_reference",
    "logging_dir": "logging_dir",
    "loss_fn": "loss_fn",
    "ig_steps": "expert.ig_steps",
    "normalize_importance": "expert.normalize_importance",
    "compat_length": "probing.compat_length",
    "layer_gradients": "verdict.layer_gradients",
}


def _projection(name: str, part: Mapping[str, str], doc: str) -> type:
    """A frozen settings value whose fields are the options ``part`` names (field -> option), each with the
    option's type, default, check and help."""
    fields = [(field, _field(spelled).type, dataclasses.field(default=default_of(_field(spelled)),
               metadata=_field(spelled).metadata)) for field, spelled in part.items()]  # fmt: skip
    namespace = {"__module__": __name__, "__doc__": doc}
    return dataclasses.make_dataclass(name, fields, bases=(Checked,), namespace=namespace, frozen=True, eq=False,
                                      init=False)  # fmt: skip


ProbeSettings = _projection(
    "ProbeSettings",
    PROBE_PART,
    """Everything that decides what a probe pass computes: a projection of ``WatchSettings`` (``PROBE_PART``).
    Callbacks with equal probe settings in one run share its watched run (``callbacks.watched_run.join``). Built
    from a ``WatchSettings`` with :meth:`WatchSettings.probe`, or by keywords, checked as their options are.""",
)


#: The options every callback takes (``WatchCallback.options``): the front's probe, cadence and logging options,
#: how the probe pass runs, and the tracker switch (``"group.field"``: one field of a nested value).
COMMON_OPTIONS: tuple[str, ...] = (
    "probe_texts",
    "probe_dataset",
    "num_probe_examples",
    "stats",
    "every_n_steps",
    "overhead_budget",
    "logging_dir",
    "loss_fn",
    "quiet",
    *(f"probing.{name}" for name in ("seed", "batch_size", "max_length", "tokenizer", "data_collator")),
    *(f"probing.{name}" for name in ("reference_model", "cache_reference", "at_start", "on_evaluate", "at_end")),
    "expert.log_to_trackers",
)


def callback_settings(owner: str, valid: Sequence[str], settings: Any, options: dict[str, Any]) -> WatchSettings:
    """The settings of a callback: ``settings`` (None: the defaults) with ``options`` replacing its fields.

    ``valid`` lists the options the callback takes: top-level names, and ``"group.field"`` for the fields of a
    nested value it takes only some of. An option it does not take (a top-level name or a field set in a nested
    value) is a ``TypeError`` from ``owner`` that suggests the closest."""
    base = WatchSettings() if settings is None else settings
    if not isinstance(base, WatchSettings):
        raise TypeError(f"settings must be a WatchSettings, e.g. settings=WatchSettings(every_n_steps=20), not "
                        f"{type(base).__name__}")  # fmt: skip
    tops = list(dict.fromkeys(name.split(".")[0] for name in valid))
    check_options(list(options), tops, owner)
    made = base.replace(**options)
    for group, cls, _ in GROUPS:
        if group not in valid:
            changed = [f.name for f in dataclasses.fields(cls)
                       if frozen_value(made.value(f"{group}.{f.name}")) != frozen_value(base.value(f"{group}.{f.name}"))]  # fmt: skip
            check_options([f"{group}.{n}" for n in changed], [n for n in valid if n.startswith(group + ".")], owner)
    return made


class OptionSpec(NamedTuple):
    """One option as ``bertwatch run`` and the docs show it: its ``group`` (None: the front, else a nested
    value's field), ``name``, ``default``, ``help`` and ``flags``."""

    group: str | None
    name: str
    default: Any
    help: str
    flags: tuple[Flag, ...]

    @property
    def spelled(self) -> str:
        """``every_n_steps`` or ``probing.seed``."""
        return self.name if self.group is None else f"{self.group}.{self.name}"


def option_specs() -> list[OptionSpec]:
    """Every option, the front first, then each nested value's (``GROUPS`` order)."""
    specs = [OptionSpec(None, f.name, default_of(f), f.metadata["help"], f.metadata["flags"])
             for f in dataclasses.fields(WatchSettings) if f.name not in _GROUP_CLASS]  # fmt: skip
    for group, cls, _ in GROUPS:
        specs += [OptionSpec(group, f.name, default_of(f), f.metadata["help"], f.metadata["flags"])
                  for f in dataclasses.fields(cls)]  # fmt: skip
    return specs
