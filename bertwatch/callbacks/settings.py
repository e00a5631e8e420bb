"""The monitoring options as one frozen, validated value: ``WatchSettings`` (and ``ProbeSettings``, its probe part).

``WatchSettings`` is the one home of every option of ``BertWatchCallback``, the single-purpose callbacks,
``bertwatch.watch`` and ``bertwatch run``: its fields carry the names, defaults, help text and command-line flags
(``bertwatch run`` builds its options from them), and ``__post_init__`` checks them. Two settings are equal when
their options are: plain data (numbers, strings, paths, and lists, tuples and dicts of them, such as two equal
lists of probe texts) compares by value; any other object (a tokenizer, dataset, collator, model or loss function)
by identity, since bertwatch cannot tell whether two of them would give the same probe pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bertwatch.core.alerts import AlertSettings
from bertwatch.core.budget import DEFAULT_OVERHEAD_BUDGET, check_budget
from bertwatch.core.modes import MODES, check_mode
from bertwatch.core.stat_names import MIXING_NAMES, STABILITY_NAMES
from bertwatch.heads.importance import GRADIENT_NAMES, IG_NAME
from bertwatch.heads.loading import DEFAULT_MAX_LENGTH
from bertwatch.heads.norms import NORM_NAMES
from bertwatch.heads.stats import DRIFT_NAMES, STAT_NAMES

__all__ = ["ALL_STATS", "MAP_STATS", "ON_ALERT_CHOICES", "Flag", "ProbeSettings", "WatchSettings", "check_options"]

MAP_STATS: tuple[str, ...] = STAT_NAMES + NORM_NAMES + MIXING_NAMES + DRIFT_NAMES
ALL_STATS: tuple[str, ...] = MAP_STATS + GRADIENT_NAMES + (IG_NAME,) + STABILITY_NAMES


@dataclass(frozen=True)
class Flag:
    """One command-line flag of an option: its ``names`` and ``kind``, how ``bertwatch run`` reads it.

    Kinds: ``"int"``, ``"int_or_none"`` (a number or ``none``), ``"float"``, ``"str"``, ``"choice"`` (one of ``choices``),
    ``"true"`` / ``"false"`` (a switch that sets the option to True / False), ``"names"`` (comma-separated),
    ``"float"``, ``"lines"`` (a file, one probe text per line, a tab before a second sentence), ``"json"`` (a JSON object).
    ``help`` replaces the option's own help for this flag.
    """

    names: tuple[str, ...]
    kind: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    help: str | None = None


def _option(default: Any, help: str, *flags: Flag, factory: Callable[[], Any] | None = None) -> Any:
    """A ``WatchSettings`` field: its default, help text and flags (none: set from Python only)."""
    metadata = {"help": help, "flags": flags}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _flag(name: str, kind: str, *aliases: str, **more: Any) -> Flag:
    return Flag((name, *aliases), kind, **more)


class _Same:
    """An object that counts as the same option only when it is the same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return object.__hash__(self.obj)


def _frozen(value: Any) -> Any:
    """A hashable stand-in for ``value``: plain data by value, any other object by identity."""
    if value is None or isinstance(value, (str, bytes, numbers.Number)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        try:
            return ("map", frozenset((k, _frozen(v)) for k, v in value.items()))
        except TypeError:
            return _Same(value)
    return _Same(value)


class _ByValue:
    """Equality and hash from the fields' values (``_frozen``), for frozen dataclasses declared with ``eq=False``."""

    def _value(self) -> tuple:
        return tuple(_frozen(getattr(self, f.name)) for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._value() == other._value()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._value())


def check_options(options: Collection[str], valid: Sequence[str], owner: str = "WatchSettings") -> None:
    """Refuse option names not in ``valid`` with a ``TypeError`` that suggests the closest and lists them all.

    Example:
        >>> check_options(["probe_max_lenght"], WatchSettings.names())
        Traceback (most recent call last):
        TypeError: WatchSettings: unknown option 'probe_max_lenght' (did you mean 'probe_max_length'?); valid: ...
    """
    unknown = [name for name in options if name not in valid]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, valid, n=1)
        parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    raise TypeError(
        f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(parts)}; valid: {', '.join(valid)}"
    )


@dataclass(frozen=True, eq=False)
class ProbeSettings(_ByValue):
    """Everything that decides what a probe pass computes; callbacks with equal settings on one model share a
    monitor (``callbacks.monitor.monitor_for``). Built from a ``WatchSettings`` with :meth:`WatchSettings.probe`;
    the fields are those of ``WatchSettings`` without their ``probe_`` prefix where they have one."""

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
    offload: bool | None = None


_ALERT_DEFAULTS = AlertSettings()
#: The string values of ``on_alert`` (a callable is the other choice).
ON_ALERT_CHOICES: tuple[str, ...] = ("warn", "stop", "none")


#: The help of each ``alert_<rule>`` option (``AlertSettings`` holds its default and checks it).
_ALERT_HELP: dict[str, str] = {
    "logit_multiple": "logit growth: max_logit above this multiple of its reference",
    "logit_bound": "logit growth: max_logit above this bound (the tau of QK clipping)",
    "entropy_fraction": "entropy collapse: entropy below this fraction of its reference",
    "entropy_min_drop": "entropy collapse: and at least this many nats below it",
    "sink_fraction": "sink collapse / desertion: the share lost keeps at most this fraction",
    "sink_min_change": "sink collapse / desertion: and cls+sep mass moved by at least this",
    "patience": "measured steps in a row a rule must hold before an alert",
}


def _alert_option(rule: str, kind: str = "float") -> Any:
    """The ``alert_<rule>`` field: the default of ``AlertSettings.<rule>`` and its flag ``--alert-<rule>``."""
    metavar = "X" if kind == "float" else None
    return _option(
        getattr(_ALERT_DEFAULTS, rule),
        _ALERT_HELP[rule],
        _flag("--alert-" + rule.replace("_", "-"), kind, metavar=metavar),
    )


_INT_BOUNDS = {  # option: (lowest value, whether None is allowed)
    "every_n_steps": (0, True),
    "num_probe_examples": (1, False),
    "probe_seed": (None, False),
    "probe_batch_size": (1, False),
    "probe_max_length": (2, True),
    "num_maps": (0, False),
    "maps_every_n_steps": (0, True),
    "ig_steps": (1, False),
    "compat_length": (1, True),
    "cluster_examples": (1, False),
}
_BOUND_MEANING = {
    "every_n_steps": " (0 = only at start, evaluation and end; None = as the overhead budget allows)",
    "probe_max_length": " (or None: the model's maximum)",
}


@dataclass(frozen=True, eq=False)
class WatchSettings(_ByValue):
    """Every monitoring option of bertwatch's callbacks, ``watch()`` and ``bertwatch run``, in one checked value.

    The fields are the callbacks' keyword arguments, with the same names and defaults (the table of
    ``docs/callbacks.md`` lists them with their flags). ``BertWatchCallback(settings=s)``, ``watch(trainer,
    settings=s)`` and keyword arguments are the same thing: keywords given beside ``settings`` replace its fields.
    The single-purpose callbacks take the options that concern them as keywords, and ignore the others in a
    ``settings`` value. Object options (``probe_dataset``, ``tokenizer``, ``data_collator``, ``loss_fn``, and
    ``reference_model``, ``word_classes``, ``ablation_kwargs`` when they hold objects) compare by identity.

    Args:
        The fields below, by keyword, each with its default and help text (``WatchSettings.names()`` lists them;
        ``bertwatch run --help`` prints the help of their flags).

    Returns:
        A frozen value: :meth:`replace` makes a changed copy, :meth:`probe` the part that decides the probe pass.

    Raises:
        ValueError: an option out of its range (``every_n_steps=-1``), an unknown statistic or ablation mode.
        TypeError: a value of the wrong type; from :meth:`from_kwargs` / :meth:`replace`, an unknown option name.

    Example:
        >>> s = WatchSettings.from_kwargs(every_n_steps=20, probe_texts=["a good film", "a dull plot"])
        >>> s == WatchSettings(every_n_steps=20, probe_texts=["a good film", "a dull plot"])
        True
        >>> s.replace(num_maps=2).num_maps
        2
    """

    stats: Sequence[str] | None = _option(
        None, "statistics to measure (default: the callback's own; all but IG and the opt-in mixing statistics "
        "for BertWatchCallback)",
        _flag("--stats", "names", metavar="A,B"),
    )  # fmt: skip
    every_n_steps: int | None = _option(
        None, "measure every N optimiser steps, pinned (0: only at start, evaluation and end; None: as the "
        "overhead budget allows)",
        _flag("--every-n-steps", "int", "--probe-every"),
    )  # fmt: skip
    overhead_budget: float = _option(
        DEFAULT_OVERHEAD_BUDGET, "bertwatch's share of wall time when every_n_steps is None: probe steps are spaced "
        "to keep within it (core/budget.py)",
        _flag("--overhead-budget", "float", metavar="SHARE"),
    )  # fmt: skip
    on_evaluate: bool = _option(True, "measure at every evaluation", _flag("--no-on-evaluate", "false"))
    at_start: bool = _option(
        True, "measure at step 0, before the first optimiser step", _flag("--no-at-start", "false")
    )
    at_end: bool = _option(
        True, "measure when training ends (skipped if that step was already measured)", _flag("--no-at-end", "false")
    )
    probe_texts: Sequence[Any] | None = _option(
        None, "probe with these texts: strings, (text, text_pair) tuples or dicts {'text', 'text_pair', 'label'}",
        _flag("--probe-texts", "lines", metavar="FILE",
              help="a file with one probe text per line (a tab separates a sentence pair)"),
    )  # fmt: skip
    probe_dataset: Any = _option(None, "sample the probe set from this (tokenized) dataset instead of the eval set")
    num_probe_examples: int = _option(
        32, "size of the seeded sample of the evaluation set", _flag("--num-probe-examples", "int")
    )
    probe_seed: int = _option(0, "seed of that sample", _flag("--probe-seed", "int"))
    probe_batch_size: int = _option(16, "examples per probe forward pass", _flag("--probe-batch-size", "int"))
    probe_max_length: int | None = _option(
        DEFAULT_MAX_LENGTH, "the longest probe text measured, in tokens with specials (None: the model's maximum)",
        _flag("--probe-max-length", "int_or_none", metavar="N|none"),
    )  # fmt: skip
    tokenizer: Any = _option(None, "tokenize the probe texts with this instead of the Trainer's")
    data_collator: Callable | None = _option(None, "collate the probe set with this instead of the Trainer's")
    reference_model: Any = _option(
        None, "a model (or path) whose attention is the drift reference, instead of the model before its first step",
        _flag("--reference-model", "str", metavar="PATH"),
    )  # fmt: skip
    cache_reference: bool = _option(
        True, "keep the reference in <output_dir>/bertwatch/reference.pt", _flag("--no-cache-reference", "false")
    )
    logging_dir: str | os.PathLike | None = _option(
        None, "TensorBoard run directory (default: the Trainer's run)", _flag("--logdir", "str")
    )
    loss_fn: Callable | None = _option(None, "loss_fn(outputs, batch) -> [batch] per-example loss for gradients")
    log_to_trackers: bool = _option(
        True, "send the layer means to the Trainer's report_to trackers",
        _flag("--no-trackers", "false", help="do not send the layer means to the Trainer's report_to trackers"),
    )  # fmt: skip
    quiet: bool = _option(
        False, "print no start and end lines (the environment variable BERTWATCH_QUIET=1 does the same)",
        _flag("--quiet", "true"),
    )  # fmt: skip
    offload_stats: bool | None = _option(
        None, "compute the statistics off the training thread while training goes on: True, False, or None "
        "(automatic: a side CUDA stream on a GPU; on a CPU a worker thread only when the process has cores the "
        "training's threads leave idle; callbacks/offload.py)",
        _flag("--offload-stats", "true", help="always compute the statistics off the training thread (default: "
              "automatic: on a GPU, or on a CPU with cores the training leaves idle)"),
        _flag("--no-offload-stats", "false", help="always compute the statistics on the training thread"),
    )  # fmt: skip
    strict: bool = _option(False, "re-raise errors instead of warning (for tests)", _flag("--strict", "true"))
    num_maps: int = _option(4, "probe examples whose attention maps are kept", _flag("--num-maps", "int"))
    maps_every_n_steps: int | None = _option(
        None, "write the maps every N steps (budgeted: at the first measured step N after the last maps; default 4 x "
        "every_n_steps, or every fourth budgeted step; also at step 0 and the end)",
        _flag("--maps-every-n-steps", "int"),
    )  # fmt: skip
    integrated_gradients: bool = _option(
        False, "add captum's integrated-gradients head attribution", _flag("--integrated-gradients", "true")
    )
    ig_steps: int = _option(20, "integration steps of integrated gradients", _flag("--ig-steps", "int"))
    normalize_importance: bool = _option(
        False, "divide head_importance by each layer's L2 norm", _flag("--normalize-importance", "true")
    )
    compat_length: int | None = _option(
        None, "pad maps to N tokens for drift_cosine, as Kovaleva's notebook did", _flag("--compat-length", "int")
    )
    ablate_on_end: bool = _option(
        False, "run the head/layer ablation sweep on the eval set when training ends",
        _flag("--ablate", "true", "--ablate-on-end"),
    )  # fmt: skip
    ablation_mode: str = _option("uniform", "how a head is disabled", _flag("--ablation-mode", "choice", choices=MODES))
    ablation_kwargs: Mapping[str, Any] = _option(
        None, "keywords of the AblationCallback run at the end (eval_dataset=, then ablate()'s)",
        _flag("--ablation-kwargs", "json", metavar="JSON"), factory=dict,
    )  # fmt: skip
    word_classes: Any = _option(
        False, "attention to word classes: True (closed word lists on the probe tokens), or UD annotations "
        "(a CoNLL-U path, a list of Sentence or a WordClassProbe)",
        _flag("--word-classes", "true", help="log attention to pronouns, subjects, objects and negation from closed "
              "word lists on the probe tokens"),
        _flag("--word-classes-from", "str", metavar="CONLLU", help="log attention to UD word classes (nouns, verbs, "
              "subjects, objects...) of this treebank's sentences, e.g. UD English-EWT dev"),
    )  # fmt: skip
    head_clusters: bool = _option(
        False, "log the heads' JS distance map (MDS) at every probe step", _flag("--head-clusters", "true")
    )
    cluster_examples: int = _option(8, "probe examples the head clusters use", _flag("--cluster-examples", "int"))
    # -- stability alerts (bertwatch.core.alerts holds the rules; these fields only carry their thresholds)
    on_alert: Any = _option(
        "warn", "what a stability alert does: 'warn' (one warning per head and rule), 'stop' (save a checkpoint and "
        "stop training), 'none', or a callable(alerts) (return 'stop' to save and stop)",
        _flag("--on-alert", "choice", choices=ON_ALERT_CHOICES),
    )  # fmt: skip
    alert_logit_multiple: float = _alert_option("logit_multiple")
    alert_logit_bound: float = _alert_option("logit_bound")
    alert_entropy_fraction: float = _alert_option("entropy_fraction")
    alert_entropy_min_drop: float = _alert_option("entropy_min_drop")
    alert_sink_fraction: float = _alert_option("sink_fraction")
    alert_sink_min_change: float = _alert_option("sink_min_change")
    alert_patience: int = _alert_option("patience", kind="int")

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for f in dataclasses.fields(self):
            if f.type == "bool":
                set_(self, f.name, _checked_bool(f.name, getattr(self, f.name)))
        for name, (lowest, optional) in _INT_BOUNDS.items():
            set_(self, name, _checked_int(name, getattr(self, name), lowest, optional))
        if self.stats is not None:
            if isinstance(self.stats, str):
                raise TypeError(f"stats must be a list of statistic names, not the string {self.stats!r}")
            set_(self, "stats", tuple(self.stats))
            unknown = [s for s in self.stats if s not in ALL_STATS]
            if unknown:
                raise ValueError(f"unknown bertwatch statistic(s) {unknown}; choose from {', '.join(ALL_STATS)}")
            if not self.stats:
                raise ValueError("stats must name at least one statistic")
        if self.offload_stats is not None:
            set_(self, "offload_stats", _checked_bool("offload_stats", self.offload_stats))
        set_(self, "overhead_budget", check_budget(self.overhead_budget))
        check_mode(self.ablation_mode, "ablation_mode")
        if not isinstance(self.ablation_kwargs, Mapping):
            raise TypeError(f"ablation_kwargs must be a mapping, not {type(self.ablation_kwargs).__name__}")
        set_(self, "ablation_kwargs", dict(self.ablation_kwargs))
        if not callable(self.on_alert) and self.on_alert not in ON_ALERT_CHOICES:
            raise ValueError(f"on_alert must be one of {ON_ALERT_CHOICES} or a callable, not {self.on_alert!r}")
        try:
            self.alert_settings()
        except (TypeError, ValueError) as err:
            raise type(err)(f"alert_{err}") from None

    def alert_settings(self) -> AlertSettings:
        """The alert thresholds (``alert_*`` fields) as the ``AlertSettings`` that checks and applies them."""
        return AlertSettings(**{f.name: getattr(self, f"alert_{f.name}") for f in dataclasses.fields(AlertSettings)})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every option name, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_kwargs(cls, **options: Any) -> WatchSettings:
        """The defaults with ``options`` set; an unknown name is a ``TypeError`` that lists the valid ones."""
        return cls().replace(**options)

    def replace(self, **options: Any) -> WatchSettings:
        """A copy with ``options`` changed (checked as the constructor checks them; unknown names refused)."""
        check_options(options, self.names())
        return dataclasses.replace(self, **options) if options else self

    def probe(self) -> ProbeSettings:
        """The part of these settings that decides the probe pass (shared between callbacks when equal)."""
        return ProbeSettings(
            texts=self.probe_texts,
            dataset=self.probe_dataset,
            tokenizer=self.tokenizer,
            collator=self.data_collator,
            num_examples=self.num_probe_examples,
            seed=self.probe_seed,
            batch_size=self.probe_batch_size,
            max_length=self.probe_max_length,
            reference_model=self.reference_model,
            cache_reference=self.cache_reference,
            logging_dir=self.logging_dir,
            loss_fn=self.loss_fn,
            ig_steps=self.ig_steps,
            normalize_importance=self.normalize_importance,
            compat_length=self.compat_length,
            offload=self.offload_stats,
        )


def _checked_bool(name: str, value: Any) -> bool:
    if isinstance(value, numbers.Integral) or type(value).__name__ == "bool_":
        return bool(value)
    raise TypeError(f"{name} must be True or False, not {value!r}")


def _checked_int(name: str, value: Any, lowest: int | None, optional: bool) -> int | None:
    if value is None and optional:
        return None
    whole = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        allowed = " or None" if optional else ""
        raise TypeError(f"{name} must be a whole number{allowed}, not {value!r}")
    if lowest is not None and value < lowest:
        raise ValueError(f"{name} must be >= {lowest}{_BOUND_MEANING.get(name, '')}, got {value}")
    return int(value)
