"""The monitoring options as one frozen, checked value: ``WatchSettings`` (and ``ProbeSettings``, its probe part).

``WatchSettings`` is the one home of every option of ``BertWatchCallback``, the single-purpose callbacks,
``bertwatch.watch`` and ``bertwatch run``: a front of a dozen options a run needs, and five nested values for the
rest (``probing=ProbeOptions(...)``, ``alerts=AlertSettings(...)``, ``verdict=VerdictSettings(...)``,
``ablation=AblationOptions(...)``, ``expert=ExpertOptions(...)``). The fields carry the names, defaults, help texts, checks and command-line flags
(``bertwatch run`` builds its options from them, :func:`option_specs`). The flat names of earlier versions
(``probe_seed=``, ``alert_patience=``, ...) still work, each with a ``FutureWarning`` that gives the new spelling.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable, Sequence
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
from bertwatch.heads.loading import DEFAULT_MAX_LENGTH
from bertwatch.options.groups import AblationOptions, ExpertOptions, ProbeOptions

__all__ = [
    "ALL_STATS",
    "COMMON_OPTIONS",
    "GROUPS",
    "MAP_STATS",
    "OLD_NAMES",
    "ON_ALERT_CHOICES",
    "AblationOptions",
    "AlertSettings",
    "ExpertOptions",
    "Flag",
    "OptionSpec",
    "ProbeOptions",
    "ProbeSettings",
    "VerdictSettings",
    "WatchSettings",
    "callback_settings",
    "check_options",
    "new_spelling",
    "option_specs",
]


@dataclass(frozen=True, eq=False)
class ProbeSettings(Checked):
    """Everything that decides what a probe pass computes; callbacks with equal settings in one run share
    its watched run (``callbacks.watched_run.join``). Built from a ``WatchSettings`` with :meth:`WatchSettings.probe`."""

    texts: Sequence[Any] | None = None
    dataset: Any = None
    tokenizer: Any = None
    collator: Callable | None = None
    num_examples: int = 32
    seed: int = 0
    batch_size: int = 16
    max_length: int | None = DEFAULT_MAX_LENGTH
    reference_model: Any = None
    cache_reference: bool = True
    logging_dir: str | os.PathLike | None = None
    loss_fn: Callable | None = None
    ig_steps: int = 20
    normalize_importance: bool = False
    compat_length: int | None = None
    layer_gradients: bool = True


#: The string values of ``on_alert`` (a callable is the other choice).
ON_ALERT_CHOICES: tuple[str, ...] = ("warn", "stop", "none")


def _on_alert(name: str, value: Any) -> Any:
    if callable(value) or value in ON_ALERT_CHOICES:
        return value
    kind = ValueError if isinstance(value, str) else TypeError
    raise kind(f"{name} must be one of {', '.join(map(repr, ON_ALERT_CHOICES))} or a callable(alerts), not {value!r}")


@dataclass(frozen=True, eq=False)
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
        instance_of(VerdictSettings, "VerdictSettings(hold_share=0.3)"),
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

    def __getattr__(self, name: str) -> Any:
        """The value of an old flat name (``settings.probe_seed``), with the ``FutureWarning`` of its new spelling."""
        if name not in OLD_NAMES or OLD_NAMES[name] is None:
            raise AttributeError(f"'WatchSettings' object has no attribute {name!r}")
        group, field = OLD_NAMES[name].split(".")
        warnings.warn(f"settings.{name} is deprecated: use settings.{group}.{field}", FutureWarning, stacklevel=2)
        return getattr(getattr(self, group), field)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every top-level option name, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **options: Any) -> WatchSettings:
        """A copy with ``options`` changed (checked as the constructor checks them; unknown names refused)."""
        return self._replaced(options, stacklevel=3)

    def _replaced(self, options: dict[str, Any], stacklevel: int) -> WatchSettings:
        options = new_spelling(options, self, stacklevel=stacklevel)
        check_options(options, self.names(), renamed=_RENAMED)
        return dataclasses.replace(self, **options) if options else self

    def probe(self) -> ProbeSettings:
        """The part of these settings that decides the probe pass (shared between callbacks when equal)."""
        p, e = self.probing, self.expert
        return ProbeSettings(
            texts=self.probe_texts,
            dataset=self.probe_dataset,
            tokenizer=p.tokenizer,
            collator=p.data_collator,
            num_examples=self.num_probe_examples,
            seed=p.seed,
            batch_size=p.batch_size,
            max_length=p.max_length,
            reference_model=p.reference_model,
            cache_reference=p.cache_reference,
            logging_dir=self.logging_dir,
            loss_fn=self.loss_fn,
            ig_steps=e.ig_steps,
            normalize_importance=e.normalize_importance,
            compat_length=p.compat_length,
            layer_gradients=self.verdict.layer_gradients,
        )


#: The nested values: (field of WatchSettings, its class, the title of its group in ``bertwatch run --help``).
GROUPS: tuple[tuple[str, type, str], ...] = (
    ("probing", ProbeOptions, "probe tuning"),
    ("alerts", AlertSettings, "stability alerts"),
    ("verdict", VerdictSettings, "run verdict"),
    ("ablation", AblationOptions, "ablation at the end"),
    ("expert", ExpertOptions, "expert"),
)
_GROUP_CLASS = {name: cls for name, cls, _ in GROUPS}

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

#: The flat names of earlier versions: old name -> its new place ``"group.field"`` (None: no longer an option).
OLD_NAMES: dict[str, str | None] = {
    **{f"probe_{n}": f"probing.{n}" for n in ("seed", "batch_size", "max_length")},
    **{n: f"probing.{n}" for n in ("tokenizer", "data_collator", "reference_model", "cache_reference")},
    **{n: f"probing.{n}" for n in ("compat_length", "at_start", "on_evaluate", "at_end")},
    **{
        f"alert_{f.name}": f"alerts.{f.name}" for f in dataclasses.fields(AlertSettings) if f.name != "outlier_multiple"
    },  # newer than flat names
    "ablation_mode": "ablation.mode",
    "ablation_kwargs": "ablation.kwargs",
    **{f.name: f"expert.{f.name}" for f in dataclasses.fields(ExpertOptions)},
    "strict": None,
    "offload_stats": None,
}
#: Why each retired option (``OLD_NAMES`` None) is ignored.
_RETIRED = {
    "strict": "an error inside bertwatch costs one warning and training goes on",
    "offload_stats": "the statistics run on the training thread, as fast as a worker thread on a CPU and faster "
    "than a side CUDA stream on a GPU (docs/performance.md)",
}


def _spelling(group: str, field: str, value: Any = ...) -> str:
    """``probing=ProbeOptions(seed=1)``: how a nested option is written (``...`` for an object's value)."""
    plain = value is None or isinstance(value, (bool, int, float, str, os.PathLike))
    shown = repr(os.fspath(value) if isinstance(value, os.PathLike) else value) if plain else "..."
    return f"{group}={_GROUP_CLASS[group].__name__}({field}={shown})"


_RENAMED = {old: _spelling(*new.split(".")) for old, new in OLD_NAMES.items() if new}


def new_spelling(options: dict[str, Any], base: WatchSettings, stacklevel: int = 1) -> dict[str, Any]:
    """``options`` with each old flat name folded into its nested value (taken from ``options``, else from
    ``base``), after a ``FutureWarning`` that gives the new spelling (``stacklevel`` as for ``warnings.warn``
    called where this is called). A retired option (``strict``, ``offload_stats``) is dropped with its warning."""
    options = dict(options)
    for old in [name for name in options if name in OLD_NAMES]:
        value = options.pop(old)
        new = OLD_NAMES[old]
        if new is None:
            warnings.warn(
                f"{old}= is deprecated and ignored: {_RETIRED[old]}", FutureWarning, stacklevel=stacklevel + 1
            )
            continue
        group, field = new.split(".")
        spelled = _spelling(group, field, value)
        warnings.warn(f"{old}= is deprecated: use {spelled}", FutureWarning, stacklevel=stacklevel + 1)
        nested = options.get(group, getattr(base, group))
        if not isinstance(nested, _GROUP_CLASS[group]):
            continue  # the nested value's own check names the problem
        try:
            options[group] = dataclasses.replace(nested, **{field: value})
        except (TypeError, ValueError) as err:
            raise type(err)(f"{old}={value!r:.40} (now {spelled}): {err}") from None
    return options


def callback_settings(
    owner: str, valid: Sequence[str], settings: Any, options: dict[str, Any], stacklevel: int = 1
) -> WatchSettings:
    """The settings of a callback: ``settings`` (None: the defaults) with ``options`` replacing its fields.

    ``valid`` lists the options the callback takes: top-level names, and ``"group.field"`` for the fields of a
    nested value it takes only some of. An option it does not take (a top-level name, an old flat name or a field
    set in a nested value) is a ``TypeError`` from ``owner`` that suggests the closest."""
    base = WatchSettings() if settings is None else settings
    if not isinstance(base, WatchSettings):
        raise TypeError(f"settings must be a WatchSettings, e.g. settings=WatchSettings(every_n_steps=20), not "
                        f"{type(base).__name__}")  # fmt: skip
    tops = list(dict.fromkeys(name.split(".")[0] for name in valid))

    def taken(old: str) -> bool:  # an old flat name this callback takes (strict: taken, and dropped)
        new = OLD_NAMES[old]
        return new is None or new.split(".")[0] in valid or new in valid

    check_options([name for name in options if name not in OLD_NAMES or not taken(name)], tops, owner, _RENAMED)
    options = new_spelling(options, base, stacklevel=stacklevel + 1)
    for group, cls, _ in GROUPS:
        given = options.get(group)
        if group in valid or not isinstance(given, cls):
            continue
        before = getattr(base, group)
        changed = [f.name for f in dataclasses.fields(cls)
                   if frozen_value(getattr(given, f.name)) != frozen_value(getattr(before, f.name))]  # fmt: skip
        check_options([f"{group}.{name}" for name in changed], [n for n in valid if n.startswith(group + ".")], owner)
    return base.replace(**options)


def _accepting_old_names(init: Callable[..., None]) -> Callable[..., None]:
    """``WatchSettings.__init__`` that also takes the old flat names (``probe_seed=1``), with their warnings."""

    @functools.wraps(init)
    def __init__(self: WatchSettings, *args: Any, **options: Any) -> None:
        if any(name in OLD_NAMES for name in options):
            defaults = WatchSettings()
            options = new_spelling(options, defaults, stacklevel=2)
        init(self, *args, **options)

    return __init__


WatchSettings.__init__ = _accepting_old_names(WatchSettings.__init__)  # type: ignore[method-assign]


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


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def option_specs() -> list[OptionSpec]:
    """Every option, the front first, then each nested value's (``GROUPS`` order)."""
    specs = [OptionSpec(None, f.name, _default(f), f.metadata["help"], f.metadata["flags"])
             for f in dataclasses.fields(WatchSettings) if f.name not in _GROUP_CLASS]  # fmt: skip
    for group, cls, _ in GROUPS:
        specs += [OptionSpec(group, f.name, _default(f), f.metadata["help"], f.metadata["flags"])
                  for f in dataclasses.fields(cls)]  # fmt: skip
    return specs
