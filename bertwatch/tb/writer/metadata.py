"""Names, format version and ``SummaryMetadata`` for the bertwatch TensorBoard plugin.

Shared by the writer (:mod:`bertwatch.tb.writer.summary`) and the reader (:mod:`bertwatch.tb.plugin`). Imports only
``json`` and tensorboard's protobufs, never torch.

Tag layout (``docs/architecture.md``):

=====================================  ==============  =============================================
tag                                    data class      content ``kind``
=====================================  ==============  =============================================
``bertwatch/heads/{stat}``             TENSOR          ``head_grid``       float32 ``[layers, heads]``
``bertwatch/attention/{i:02d}``        BLOB_SEQUENCE   ``attention_map``   [JSON header, float16 maps]
``.../attention/{i:02d}/{measure}``    BLOB_SEQUENCE   ``attention_map``   the same for a measure, see below
``bertwatch/ablation/{mode}/heads``    TENSOR          ``ablation_heads``  float32 ``[layers, heads, 5]``
``bertwatch/ablation/{mode}/layers``   TENSOR          ``ablation_layers`` float32 ``[layers, 5]``
``bertwatch/ablation/{mode}/pruning``  TENSOR          ``pruning_curve``   float32 ``[k, 2]``
``.../{mode}/pruning_curves``          TENSOR          ``pruning_curves``  float32 ``[k, columns]``, see below
``bertwatch/clustering/{name}``        TENSOR          ``head_embedding``  float32 ``[layers*heads, 2]``
``bertwatch/series/{name}``            TENSOR          ``named_values``    float32 ``[k]``, names in content
``bertwatch/text/{name}``              TENSOR          ``step_text``       string ``[k]``: k lines of UTF-8 text
``bertwatch/alerts/heads``             TENSOR          ``alerts``          float32 ``[layers, heads, rules, 4]``
``bertwatch_alerts/{rule}``            scalar          (scalars plugin)    heads in alert per rule, and total
``bertwatch_layers/{stat}/layer_{l}``  scalar          (scalars plugin)
``bertwatch_series/{name}/{key}``      scalar          (scalars plugin)
=====================================  ==============  =============================================

Attention maps carry a ``measure`` (:data:`ATTENTION_MEASURES`): the attention weights at
``bertwatch/attention/{i:02d}`` (content without ``measure`` in logs written before measures: weights), every other
measure of the same example at ``bertwatch/attention/{i:02d}/{measure}``. A measure is per head (``unit: "head"``,
maps ``[layers, heads, T, T]``) or per layer (``unit: "layer"``, maps ``[layers, 1, T, T]``).
"""

from __future__ import annotations

import json
from typing import Any

from tensorboard.compat.proto import summary_pb2

from bertwatch.core.significance import ABLATION_FIELDS  # noqa: F401 (re-exported: the tables' field order)
from bertwatch.core.stat_names import DEFINITIONS

PLUGIN_NAME = "bertwatch"
#: The flags ``tensorboard`` wants to show bertwatch's runs live: every logged step kept (TensorBoard otherwise
#: samples 100 steps a statistic and 10 of the maps), new events read every second.
VIEW_FLAGS: tuple[str, ...] = (f"--samples_per_plugin={PLUGIN_NAME}=0", "--reload_interval", "1")
#: Version of the JSON in ``plugin_data.content`` that summaries are written with; the plugin skips tags written by a
#: newer format than :data:`READ_VERSION`. Optional keys added since (a ``head_grid``'s ``probe``, see
#: :func:`probe_info`) keep the version: older readers ignore them and logs without them still load.
FORMAT_VERSION = 1
#: The version of attention maps of a measure other than the weights: a plugin from before measures reads version 1
#: only, so it lists them as written by a newer bertwatch instead of showing an ALTI map as attention weights.
MEASURE_FORMAT_VERSION = 2
#: The newest content version this plugin reads.
READ_VERSION = MEASURE_FORMAT_VERSION
#: The keys of a ``head_grid``'s ``probe`` content: the length the probe texts were cut to (null: not cut by
#: bertwatch), how many were cut, how many examples were measured and the longest measured, in tokens.
PROBE_KEYS = ("max_length", "truncated", "examples", "longest")
#: The optional key of the same content naming the model watched (its folder or Hub name, else its class).
PROBE_MODEL_KEY = "model"

HEADS_PREFIX = "bertwatch/heads/"
ATTENTION_PREFIX = "bertwatch/attention/"
ABLATION_PREFIX = "bertwatch/ablation/"
CLUSTERING_PREFIX = "bertwatch/clustering/"
SERIES_PREFIX = "bertwatch/series/"
SERIES_SCALAR_ROOT = "bertwatch_series"
#: Lines of text per step (a tag's description is kept from its first write only; these are kept at every step).
TEXT_PREFIX = "bertwatch/text/"
#: The stability alerts of a step (``bertwatch.core.alerts.alert_table``); rules and columns in the content.
ALERTS_TAG = "bertwatch/alerts/heads"
ALERTS_SCALAR_ROOT = "bertwatch_alerts"
#: The ``named_values`` series of Kovaleva's pattern-class shares.
PATTERN_SERIES = "pattern_classes"
#: The ``named_values`` series of the attention shares of the UD word classes (mean over heads, uniform head).
WORD_CLASS_SERIES = "word_classes"
WORD_CLASS_TEXT = (
    "Share of attention on each UD word class, mean over heads, and <class>_uniform: the share of a uniform head"
)
LAYER_SCALAR_ROOT = "bertwatch_layers"

KIND_HEAD_GRID = "head_grid"
KIND_ATTENTION = "attention_map"
KIND_ABLATION_HEADS = "ablation_heads"
KIND_ABLATION_LAYERS = "ablation_layers"
KIND_PRUNING = "pruning_curve"
#: Δ with intervals of the importance, iterative and random pruning orders; the columns and the "N% at δ"
#: answers are in the content (``columns``, ``delta``, ``confidence``, ``removable``, ``random_orders``).
KIND_PRUNING_CURVES = "pruning_curves"
KIND_EMBEDDING = "head_embedding"
KIND_NAMED_VALUES = "named_values"
KIND_ALERTS = "alerts"
KIND_STEP_TEXT = "step_text"

TENSOR_KINDS = (
    KIND_HEAD_GRID,
    KIND_ABLATION_HEADS,
    KIND_ABLATION_LAYERS,
    KIND_PRUNING,
    KIND_PRUNING_CURVES,
    KIND_EMBEDDING,
    KIND_NAMED_VALUES,
    KIND_ALERTS,
    KIND_STEP_TEXT,
)
BLOB_KINDS = (KIND_ATTENTION,)

#: The measure of attention maps written without one (every log from before measures).
DEFAULT_MEASURE = "weights"
#: Each measure of how much a query token takes from each key token: its label and what it answers, in the order of
#: ``bertwatch.core.stat_names.MIXING_MEASURES`` (helper mix's branch). Per head or per layer is read from the maps
#: (``unit``). See docs/plugin.md and docs/statistics.md.
ATTENTION_MEASURES: dict[str, dict[str, str]] = {
    "weights": {
        "label": "Weights",
        "description": "Attention probabilities α (softmax rows): where each head looks, not what it moves.",
    },
    "norms": {
        "label": "Norms",
        "description": "α·‖f(x)‖, each weight times the norm of the transformed value vector it weighs, rows "
        "normalised per head (Kobayashi et al. 2020): a large weight on a small vector moves little.",
    },
    "alti": {
        "label": "ALTI",
        "description": "Each input token's contribution to the layer's output, residual and LayerNorm included "
        "(Ferrando et al. 2022): one map per layer, not composed.",
    },
    "alti_composed": {
        "label": "ALTI composed",
        "description": "ALTI's contributions multiplied through the layers below (Ferrando et al. 2022): how much "
        "each input token makes up a token's representation at that layer.",
    },
    "rollout": {
        "label": "Rollout",
        "description": "Raw attention averaged over heads, mixed with the residual identity and multiplied "
        "through the layers (Abnar & Zuidema 2020): mixing up to that layer, by weight.",
    },
    "value_zeroing": {
        "label": "Value zeroing",
        "description": "How much each token's output changes when one key's value vector is zeroed "
        "(Mohebbi et al. 2023): mixing measured by what removing a token changes.",
    },
}


#: One line per statistic (``bertwatch.core.stat_names.DEFINITIONS``, their one home); unknown statistics get a
#: generic one.
STAT_DESCRIPTIONS = DEFINITIONS


def heads_tag(stat: str) -> str:
    return HEADS_PREFIX + stat


def attention_tag(index: int, measure: str = DEFAULT_MEASURE) -> str:
    """``bertwatch/attention/{index:02d}`` for the weights, ``.../{index:02d}/{measure}`` for another measure."""
    base = "%s%02d" % (ATTENTION_PREFIX, int(index))
    return base if measure == DEFAULT_MEASURE else "%s/%s" % (base, measure)


def attention_measure(content: dict) -> str:
    """The measure of an ``attention_map`` tag's content (``weights`` when absent: logs from before measures)."""
    measure = content.get("measure")
    return measure if isinstance(measure, str) and measure else DEFAULT_MEASURE


def ablation_tag(mode: str, part: str) -> str:
    return "%s%s/%s" % (ABLATION_PREFIX, mode, part)


def clustering_tag(name: str) -> str:
    return CLUSTERING_PREFIX + name


def series_tag(name: str) -> str:
    return SERIES_PREFIX + name


def text_tag(name: str) -> str:
    return TEXT_PREFIX + name


def series_scalar_tag(name: str, key: str) -> str:
    return "%s/%s/%s" % (SERIES_SCALAR_ROOT, name, key)


def alerts_scalar_tag(rule: str) -> str:
    return "%s/%s" % (ALERTS_SCALAR_ROOT, rule)


def layer_scalar_tag(stat: str, layer: int) -> str:
    return "%s/%s/layer_%d" % (LAYER_SCALAR_ROOT, stat, int(layer))


def create_summary_metadata(
    kind: str, *, data_class: int, description: str = "", version: int = FORMAT_VERSION, **content: Any
) -> summary_pb2.SummaryMetadata:
    """``SummaryMetadata`` of plugin ``bertwatch`` with an explicit data class and versioned JSON content
    (``version``: the oldest format that reads it right)."""
    payload = {"version": int(version), "kind": kind}
    payload.update(content)
    return summary_pb2.SummaryMetadata(
        summary_description=description,
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME,
            content=json.dumps(payload, sort_keys=True).encode("utf-8"),
        ),
        data_class=data_class,
    )


def probe_info(value: Any) -> dict[str, Any] | None:
    """The ``probe`` content of a head grid as ``{key: int or None}`` over :data:`PROBE_KEYS`, with ``"model"`` (the
    model watched, :data:`PROBE_MODEL_KEY`) when the run recorded it; None when it is absent (logs written before it
    was recorded) or malformed."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for key in PROBE_KEYS:
        item = value.get(key)
        if item is not None and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            return None
        out[key] = None if item is None else int(item)
    if isinstance(value.get(PROBE_MODEL_KEY), str):
        out[PROBE_MODEL_KEY] = value[PROBE_MODEL_KEY]
    return out


def parse_plugin_content(content: bytes | str | None) -> dict | None:
    """The JSON dict in ``plugin_data.content``, or ``None`` when it is missing or malformed."""
    if not content:
        return None
    try:
        if isinstance(content, bytes):
            content = content.decode("utf-8")
        value = json.loads(content)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        return None
    version = value.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    return value
