"""The advanced monitoring options, in three frozen values beside ``AlertSettings`` and ``VerdictSettings``: ``ProbeOptions`` (how the probe
pass runs and when), ``AblationOptions`` (the sweep at the end of training) and ``ExpertOptions`` (extra
measurements and machinery). ``WatchSettings`` holds one of each (``probing=``, ``ablation=``, ``expert=``,
and ``alerts=AlertSettings(...)``, ``verdict=VerdictSettings(...)``); their defaults suit most runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bertwatch.ablation.settings import AblationSettings
from bertwatch.core.alerts import AlertSettings
from bertwatch.core.modes import MODES
from bertwatch.core.schema import (
    Checked,
    Flag,
    callable_or_none,
    check_options,
    option,
    option_of,
    path_or_none,
    switch,
    whole,
)
from bertwatch.core.verdict import VerdictSettings
from bertwatch.heads.loading import DEFAULT_MAX_LENGTH, model_source
from bertwatch.linguistics.syntax import Sentence

__all__ = [
    "GROUPS",
    "AblationOptions",
    "ExpertOptions",
    "ProbeOptions",
    "WordClassProbe",
    "word_class_option",
]


def _on_by_default(help_text: str, flag: str, off_help: str) -> Any:
    """A switch that is on unless its ``--no-...`` flag (``off_help``: what the flag does) turns it off."""
    return option(True, help_text, switch(), Flag((flag,), "false", help=off_help))


def _reference(name: str, value: Any) -> Any:
    """None, a saved model's folder (a path; ``"minilm"``: the packaged model's folder) or a model object."""
    if isinstance(value, str) and path_or_none(name, value):
        return model_source(value)
    if isinstance(value, os.PathLike):
        return path_or_none(name, value)
    if value is None or callable(value):
        return value
    raise TypeError(f"{name} must be a model or a saved model's folder (a path), or None, not {type(value).__name__}")


@dataclass(frozen=True, eq=False, init=False)
class ProbeOptions(Checked):
    """How the probe pass runs, and at which events it runs besides the cadence (``WatchSettings(probing=...)``).

    Args:
        seed: seed for drawing the probe examples from the evaluation set.
        batch_size: probe examples per forward pass.
        max_length: probe texts longer than this many tokens ([CLS] and [SEP] included) are cut to it (None: the
            model's maximum).
        tokenizer: tokenize the probe texts with this instead of the Trainer's.
        data_collator: collate the probe set with this instead of the Trainer's.
        reference_model: measure drift from this model (a model, a folder, a Hub name or ``"minilm"``) instead of
            from the model before its first step.
        cache_reference: save the starting model's attention in ``<output_dir>/bertwatch/reference.pt``, so that a
            resumed run measures drift from the same start.
        compat_length: compute ``drift_cosine`` on attention maps padded to this many tokens, to reproduce
            Kovaleva et al.'s figures.
        at_start: measure at step 0, before the first optimiser step.
        on_evaluate: measure at every evaluation.
        at_end: measure when training ends.

    Raises:
        TypeError / ValueError: a value of the wrong type or out of its range, naming the option.

    Example:
        >>> ProbeOptions(max_length=256, seed=1).max_length
        256
    """

    seed: int = option(0, "seed for drawing the probe examples from the evaluation set", whole(0),
                       Flag(("--probe-seed",), "int"))  # fmt: skip
    batch_size: int = option(16, "probe examples per forward pass", whole(1), Flag(("--probe-batch-size",), "int"))
    max_length: int | None = option(
        DEFAULT_MAX_LENGTH, "probe texts longer than this many tokens ([CLS] and [SEP] included) are cut to it",
        whole(2, optional=True, meaning=" (or None: the model's maximum)"),
        Flag(("--probe-max-length",), "int_or_none", metavar="N|none"),
    )  # fmt: skip
    tokenizer: Any = option(
        None, "tokenize the probe texts with this instead of the Trainer's", callable_or_none("a tokenizer")
    )
    data_collator: Callable | None = option(
        None, "collate the probe set with this instead of the Trainer's", callable_or_none("a collator function")
    )
    reference_model: Any = option(
        None, "measure drift from this model (a folder, a Hub name or 'minilm') instead of from the model before its "
        "first step",
        _reference, Flag(("--reference-model",), "str", metavar="PATH"),
    )  # fmt: skip
    cache_reference: bool = _on_by_default(
        "save the starting model's attention in <output_dir>/bertwatch/reference.pt, so that a resumed run "
        "measures drift from the same start",
        "--no-cache-reference",
        "do not save the starting model's attention (a resumed run measures drift from where it resumed)",
    )
    compat_length: int | None = option(
        None, "compute drift_cosine on attention maps padded to N tokens, to reproduce Kovaleva et al.'s figures",
        whole(1, optional=True),
        Flag(("--compat-length",), "int"),
    )  # fmt: skip
    at_start: bool = _on_by_default(
        "measure at step 0, before the first optimiser step", "--no-at-start", "do not measure at step 0"
    )
    on_evaluate: bool = _on_by_default(
        "measure at every evaluation", "--no-on-evaluate", "do not measure at evaluations"
    )
    at_end: bool = _on_by_default("measure when training ends", "--no-at-end", "do not measure when training ends")


#: The keywords the sweep at the end takes (``AblationOptions.kwargs``): ``AblationCallback``'s own and ``ablate()``'s.
_ABLATION_KEYWORDS: tuple[str, ...] = ("eval_dataset", "compute_metrics", "tokenizer", "loss_fn", "settings") + tuple(
    n for n in AblationSettings.names() if n != "mode"
)


def _keywords(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of keywords, e.g. {{'n_resamples': 200}}, not {type(value).__name__}")
    if "mode" in value:
        raise ValueError(f"{name} holds 'mode': give it as AblationOptions(mode=...)")
    check_options([str(k) for k in value], _ABLATION_KEYWORDS, owner=name)
    return dict(value)


@dataclass(frozen=True, eq=False, init=False)
class AblationOptions(Checked):
    """The ablation sweep that ``ablate_on_end=True`` runs when training ends (``WatchSettings(ablation=...)``).

    Args:
        mode: how a head is switched off: ``"uniform"`` (it attends to every token equally, as Kovaleva et al.) or
            ``"zero"`` (its output is zeroed, as Michel et al.).
        kwargs: keywords of the sweep: ``eval_dataset=`` (default: the Trainer's), then :func:`bertwatch.ablate`'s
            (``metric``, ``n_resamples``, ``batch_size``, ...).

    Raises:
        TypeError / ValueError: an unknown mode or keyword, or a value of the wrong type, naming the option.

    Example:
        >>> AblationOptions(mode="zero", kwargs={"n_resamples": 200}).kwargs
        {'n_resamples': 200}
    """

    mode: str = option_of(AblationSettings, "mode", Flag(("--ablation-mode",), "choice", choices=MODES))
    kwargs: Mapping[str, Any] = option(
        None, "keywords of the sweep: eval_dataset=, then bertwatch.ablate()'s (metric, n_resamples, ...)", _keywords,
        Flag(("--ablation-kwargs",), "json", metavar="JSON",
             help="more settings of the sweep as a JSON object of bertwatch.ablate()'s keywords, e.g. "
             "'{\"n_resamples\": 200}'"), factory=dict,
    )  # fmt: skip


def _source(name: str, value: Any) -> str | os.PathLike | tuple[Sentence, ...]:
    """A CoNLL-U path, or ``Sentence`` objects (kept as a tuple)."""
    if isinstance(value, (str, os.PathLike)):
        return path_or_none(name, value)
    if isinstance(value, Sequence) and all(isinstance(s, Sentence) for s in value):
        return tuple(value)
    raise TypeError(
        f"{name} must be a CoNLL-U path or a list of bertwatch.linguistics.syntax.Sentence, not {type(value).__name__}"
    )


@dataclass(frozen=True, eq=False, init=False)
class WordClassProbe(Checked):
    """UD-annotated sentences whose word classes bertwatch measures attention to
    (``WatchSettings(expert=ExpertOptions(word_classes=WordClassProbe(...)))``).

    Args:
        source: a CoNLL-U path, or ``bertwatch.linguistics.syntax.Sentence`` objects (``read_conllu``,
            ``parse_conllu``); the one option that may be given by position.
        num_sentences: how many sentences: the first that fit in ``max_length`` word pieces.
        batch_size: sentences per forward pass.
        max_length: the longest sentence used, in word pieces (None: ``ProbeOptions.max_length``, capped by the
            model's positions).

    Raises:
        TypeError: a source that is neither a path nor sentences, a count that is not a whole number, or an unknown
            option name (the message suggests the closest).
        ValueError: a count below 1, or ``max_length`` below 3.

    Example:
        >>> WordClassProbe("en_ewt-ud-dev.conllu", num_sentences=64).num_sentences
        64
    """

    source: str | os.PathLike | Sequence[Sentence] = option(
        None, "a CoNLL-U path, or Sentence objects (read_conllu, parse_conllu)", _source
    )
    num_sentences: int = option(32, "how many sentences: the first that fit in max_length word pieces", whole(1))
    batch_size: int = option(16, "sentences per forward pass", whole(1))
    max_length: int | None = option(
        None, "the longest sentence used, in word pieces (default: ProbeOptions.max_length, capped by the model's "
        "positions)", whole(3, optional=True),
    )  # fmt: skip

    def __init__(self, source: Any = None, **options: Any) -> None:
        """``source`` by position or by name; the other options by name."""
        super().__init__(source=source, **options)


def word_class_option(value: Any) -> bool | WordClassProbe:
    """``word_classes=``: False/None (off), True (the token rules on the probe set), a CoNLL-U path, a sequence of
    ``Sentence`` or a ``WordClassProbe`` (UD annotations)."""
    if value is None or value is False:
        return False
    if value is True or isinstance(value, WordClassProbe):
        return value
    if isinstance(value, (str, os.PathLike)):
        return WordClassProbe(value)
    if isinstance(value, Sequence) and all(isinstance(s, Sentence) for s in value):
        return WordClassProbe(tuple(value))
    raise TypeError(
        "word_classes must be True (token rules), a CoNLL-U path, a list of bertwatch.linguistics.syntax.Sentence "
        f"or a WordClassProbe, not {type(value).__name__}"
    )


def _word_classes(name: str, value: Any) -> Any:
    if isinstance(value, (str, os.PathLike)):
        path_or_none(name, value)
    word_class_option(value)
    return value


@dataclass(frozen=True, eq=False, init=False)
class ExpertOptions(Checked):
    """Extra measurements and the machinery behind them (``WatchSettings(expert=...)``); the defaults suit most runs.

    Args:
        integrated_gradients: also measure each head's integrated-gradients attribution (``head_attribution_ig``;
            needs captum, slower).
        ig_steps: steps along the integrated-gradients path (more: closer to exact, slower).
        normalize_importance: scale ``head_importance`` so that each layer's heads have unit L2 norm.
        word_classes: attention to word classes: True (closed word lists on the probe tokens), or UD annotations
            (a CoNLL-U path, a list of ``Sentence`` or a ``WordClassProbe``).
        head_clusters: at every measured step, log how alike the heads' attention is (the plugin's Clusters view).
        cluster_examples: probe examples the Clusters view compares the heads on.
        maps_every_n_steps: write the attention maps every N steps (default 4 x ``every_n_steps``, or every
            fourth measured step; always at step 0 and the end).
        log_to_trackers: send each statistic's layer means to the Trainer's ``report_to`` trackers.

    Raises:
        TypeError / ValueError: a value of the wrong type or out of its range, naming the option.

    Example:
        >>> ExpertOptions(word_classes=True, head_clusters=True).head_clusters
        True
    """

    integrated_gradients: bool = option(
        False,
        "also measure each head's integrated-gradients attribution (head_attribution_ig; needs captum, slower)",
        switch(),
        Flag(("--integrated-gradients",), "true"),
    )
    ig_steps: int = option(
        20, "steps along the integrated-gradients path (more: closer to exact, slower)", whole(1),
        Flag(("--ig-steps",), "int"),
    )  # fmt: skip
    normalize_importance: bool = option(
        False,
        "scale head_importance so that each layer's heads have unit L2 norm (as Michel et al. did)",
        switch(),
        Flag(("--normalize-importance",), "true"),
    )
    word_classes: Any = option(
        False, "attention to word classes: True (closed word lists on the probe tokens), or UD annotations "
        "(a CoNLL-U path, a list of Sentence or a WordClassProbe)", _word_classes,
        Flag(("--word-classes",), "true", help="log attention to pronouns, subjects, objects and negation from closed "
             "word lists on the probe tokens"),
        Flag(("--word-classes-from",), "str", metavar="CONLLU", help="log attention to UD word classes (nouns, verbs, "
             "subjects, objects...) of this treebank's sentences, e.g. UD English-EWT dev"),
    )  # fmt: skip
    head_clusters: bool = option(
        False,
        "at every measured step, log how alike the heads' attention is (the plugin's Clusters view)",
        switch(),
        Flag(("--head-clusters",), "true"),
    )
    cluster_examples: int = option(
        8, "probe examples the Clusters view compares the heads on", whole(1), Flag(("--cluster-examples",), "int")
    )
    maps_every_n_steps: int | None = option(
        None, "write the attention maps every N steps (default: 4 x every_n_steps, or every fourth measured step; "
        "always at step 0 and the end)", whole(0, optional=True), Flag(("--maps-every-n-steps",), "int"),
    )  # fmt: skip
    log_to_trackers: bool = _on_by_default(
        "send each statistic's layer means to the Trainer's report_to trackers (W&B, MLflow...)",
        "--no-trackers",
        "do not send the layer means to the Trainer's report_to trackers",
    )


#: The nested values of ``WatchSettings``: (its field, the value's class, the title of its group in
#: ``bertwatch run --help-all``).
GROUPS: tuple[tuple[str, type, str], ...] = (
    ("probing", ProbeOptions, "probe tuning"),
    ("alerts", AlertSettings, "stability alerts"),
    ("verdict", VerdictSettings, "run verdict"),
    ("ablation", AblationOptions, "ablation at the end"),
    ("expert", ExpertOptions, "expert"),
)
