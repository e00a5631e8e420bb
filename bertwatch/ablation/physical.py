"""From the pruning curve to a smaller model: remove attention heads for real and save a loadable folder.

transformers 5 removed ``prune_heads`` and ``head_mask``. :func:`prune_model` cuts the chosen heads' rows of Q, K, V
and columns of the output projection (whole attention computations when a layer loses every head), so the model
computes exactly what the full model computes with those heads zeroed (bertwatch's "zero" mode), with fewer
parameters and less work. :func:`save_pruned` writes a folder that plain transformers loads with
``trust_remote_code=True`` and bertwatch's ``load_model`` loads without running the folder's code.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertwatch.core.jsonable import jsonable
from bertwatch.core.schema import Checked, Flag, option
from bertwatch.heads import pruned_modeling as pm
from bertwatch.report.gain_section import GAIN_FILE

__all__ = [
    "GAIN_FILE",
    "MODELING_FILE",
    "PruneShare",
    "heads_from_ablation",
    "prune_model",
    "save_pruned",
    "write_gain",
]

#: The modelling code written into a pruned folder (``auto_map`` points at it).
MODELING_FILE = "modeling_bertwatch_pruned.py"
#: Auto classes whose mapping names a saved class, in the order they are tried.
_AUTO = {
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": "AutoModelForSequenceClassification",
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": "AutoModelForTokenClassification",
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": "AutoModelForQuestionAnswering",
    "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES": "AutoModelForMultipleChoice",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "AutoModelForMaskedLM",
    "MODEL_FOR_PRETRAINING_MAPPING_NAMES": "AutoModelForPreTraining",
    "MODEL_MAPPING_NAMES": "AutoModel",
}


def _share(name: str, value: Any) -> float | None:
    """None, or a share of all heads: a number in [0, 1] (0 removes none, 1 every head)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"the {name} of heads to prune must be a number in [0, 1], not {value!r}")
    if not 0 <= value <= 1:
        raise ValueError(f"the {name} of heads to prune must be in [0, 1], got {value}")
    return float(value)


@dataclass(frozen=True, eq=False, init=False)
class PruneShare(Checked):
    """How many heads to remove from a bertwatch ablation output's importance order (:func:`heads_from_ablation`):
    the ``--fraction`` of ``bertwatch prune --from-ablation DIR`` and ``bertwatch ship --prune-from DIR``, declared
    once for both.

    Args:
        fraction: the share of all heads to remove, the least important first, in [0, 1]; None: not given.

    Raises:
        ValueError: a share outside [0, 1]. TypeError: a value that is not a number.

    Example:
        >>> PruneShare(fraction=0.25).fraction, PruneShare().fraction
        (0.25, None)
        >>> PruneShare(fraction=1.5)
        Traceback (most recent call last):
        ValueError: the fraction of heads to prune must be in [0, 1], got 1.5
    """

    fraction: float | None = option(
        None, "the share of all heads to remove, the least important first, in [0, 1]", _share,
        Flag(("--fraction",), "float", metavar="FRACTION", help="with the ablation output: share of all heads to "
             "remove, the least important first (e.g. 0.5)"),
    )  # fmt: skip

    @classmethod
    def option_prefix(cls) -> str:
        return ""


def heads_from_ablation(folder: str | Path, fraction: float) -> dict[int, list[int]]:
    """The first ``fraction`` of all heads in the importance order of a bertwatch ablation output.

    Reads ``importance`` (``[layers, heads]``, Michel's score) from ``FOLDER/ablation.json`` and takes the
    ``round(fraction * layers * heads)`` least important heads (ties: lower layer, then lower head first), the
    order ``prune:k`` removes them in.

    Args:
        folder: an output folder of ``bertwatch ablate`` / ``ablate()`` (or the ablation.json file itself).
        fraction: share of all heads to remove, in [0, 1].

    Returns:
        ``{layer: [heads to remove]}`` (layers without a removed head are left out).

    Raises:
        FileNotFoundError: no ablation.json there. ValueError: it has no importance (run without
        ``--no-prune``), a non-finite score, or ``fraction`` outside [0, 1].
    """
    path = Path(folder)
    path = path / "ablation.json" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: pass the output folder of 'bertwatch ablate'")
    fraction = _share("fraction", fraction)
    importance = json.loads(path.read_text(encoding="utf-8")).get("importance")
    if not importance:
        raise ValueError(f"{path} has no head importance: run 'bertwatch ablate' without --no-prune")
    scores = [(value, layer, head) for layer, row in enumerate(importance) for head, value in enumerate(row)]
    if any(value is None or not math.isfinite(value) for value, _, _ in scores):
        raise ValueError(f"{path}: the importance has undefined scores; it cannot order the heads")
    chosen: dict[int, list[int]] = {}
    for _, layer, head in sorted(scores)[: round(fraction * len(scores))]:
        chosen.setdefault(layer, []).append(head)
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}


def _kept(config: Any, remove: Mapping[Any, Sequence[int]]) -> dict[int, list[int]]:
    """The heads each layer of the unpruned ``config`` keeps after removing ``remove``."""
    layers, heads, _ = pm.head_counts(config)
    kept = {layer: list(range(heads)) for layer in range(layers)}
    for raw_layer, raw_heads in remove.items():
        layer = int(raw_layer)
        if not 0 <= layer < layers:
            raise ValueError(f"layer {raw_layer} does not exist: the model has layers 0..{layers - 1}")
        for raw_head in raw_heads:
            head = int(raw_head)
            if not 0 <= head < heads:
                raise ValueError(f"head {raw_head} of layer {layer} does not exist: heads are 0..{heads - 1}")
            if head in kept[layer]:
                kept[layer].remove(head)
    return kept


def prune_model(model: Any, heads: Mapping[Any, Sequence[int]]) -> Any:
    """A copy of ``model`` with ``heads`` physically removed; ``model`` is left unchanged.

    Args:
        model: a transformers model of a supported family (``bertwatch.heads.pruned_modeling.FAMILIES``: BERT,
            RoBERTa, DistilBERT, ALBERT, ELECTRA, XLM-R, DeBERTa-v2/v3, MPNet, ModernBERT, ...), any head.
        heads: ``{layer: [heads to remove]}`` with the original head indices.

    Returns:
        The pruned model (eval mode). Its outputs equal ``model``'s under
        ``capture(model, intervention=Intervention.zero(mask))`` with those heads marked; its configuration records
        the kept heads under ``bertwatch_kept_heads``.

    Raises:
        ValueError: an unknown layer or head, a head already removed, an unsupported family, a model already pruned, or an ALBERT
            (one layer's weights shared by all layers) pruned differently in different layers: prune the same
            heads in every layer of an ALBERT.

    Example:
        >>> small = prune_model(model, {0: [1, 5], 3: list(range(12))})
    """
    if pm.family(model.config) not in pm.FAMILIES:
        raise ValueError(
            f"cannot prune heads of a {model.config.model_type!r} model: supported families are "
            f"{', '.join(sorted(pm.FAMILIES))}"
        )
    if pm.recorded_heads(model.config) is not None:
        raise ValueError("this model is already pruned: prune the original model, removing all the heads at once")
    kept = _kept(model.config, heads)
    pruned = pm.shrink(copy.deepcopy(model), kept)
    pruned.config = copy.deepcopy(model.config)
    setattr(pruned.config, pm.KEPT_HEADS_KEY, {str(layer): keep for layer, keep in kept.items()})
    return pruned.eval()


def _auto_classes(model: Any) -> dict[str, str]:
    """Auto class -> transformers class name for the model's own head and the bare encoder."""
    from transformers.models.auto import modeling_auto

    model_type = model.config.model_type
    names = {type(model).__name__, type(model.base_model).__name__}
    found: dict[str, str] = {}
    for mapping, auto in _AUTO.items():
        name = getattr(modeling_auto, mapping).get(model_type)
        if name in names and auto not in found:
            found[auto] = name
    return found


def save_pruned(model: Any, folder: str | Path, tokenizer: Any = None) -> Path:
    """Save a model returned by :func:`prune_model` as a self-contained folder.

    The folder holds the weights, ``config.json`` (with ``bertwatch_kept_heads`` and an ``auto_map`` naming the
    folder's ``modeling_bertwatch_pruned.py``, which imports only torch and transformers), and the tokenizer.

    Args:
        model: a pruned model.
        folder: where to write (created).
        tokenizer: saved beside the model when given.

    Returns:
        The folder.

    Raises:
        ValueError: ``model`` was not pruned by :func:`prune_model`.

    Example:
        >>> save_pruned(prune_model(model, {0: [1]}), "small/", tokenizer)
        >>> AutoModelForSequenceClassification.from_pretrained("small/", trust_remote_code=True)
    """
    if pm.recorded_heads(model.config) is None:
        raise ValueError("this model was not pruned by bertwatch's prune_model; prune it first")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    classes = _auto_classes(model)
    module = MODELING_FILE.removesuffix(".py")
    model.config.auto_map = {auto: f"{module}.Pruned{name}" for auto, name in classes.items()}
    source = Path(pm.__file__).read_text(encoding="utf-8")
    tail = "".join(
        pm.SUBCLASS_TEMPLATE.format(name=name, key=pm.KEPT_HEADS_KEY) for name in sorted(set(classes.values()))
    )
    (folder / MODELING_FILE).write_text(source + pm.SUBCLASS_HEADER + tail, encoding="utf-8")
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def write_gain(folder: str | Path, gain: Mapping[str, Any]) -> Path:
    """Write what pruning bought (see ``bertwatch.ablation.gain``) as ``FOLDER/pruning_gain.json``."""
    path = Path(folder) / GAIN_FILE
    path.write_text(json.dumps(jsonable(dict(gain)), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path
