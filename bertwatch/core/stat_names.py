"""Every head statistic's name and the group it is shown in, torch-free: the TensorBoard plugin serves these at
``/stat_names`` and the frontend builds its statistic menu, its drift view and its [0, 1] scales from them.

This is the names' one home: the modules that compute the statistics (``bertwatch.heads.maps.stats``, ``.norms``,
``.importance``) import their tuples from here, and the plugin (which must not import torch) reads them here too.
"""

from __future__ import annotations

__all__ = [
    "ALL_STATS",
    "DEFAULT_STATS",
    "DEFINITIONS",
    "DRIFT_NAMES",
    "FAMILIES",
    "GRADIENT_NAMES",
    "IG_NAME",
    "LOGIT_NAMES",
    "MAP_STATS",
    "MASS_BY_MEASURE",
    "MIXING_HEAD_NAMES",
    "MIXING_LAYER_NAMES",
    "MIXING_MEASURES",
    "MIXING_NAMES",
    "NORM_NAMES",
    "OUTLIER_FFN_NAMES",
    "OUTLIER_NAMES",
    "PER_LAYER_NAMES",
    "PROPORTION_NAMES",
    "QK_NAME",
    "RULE_CLASSES",
    "STAT_GROUPS",
    "STAT_NAMES",
    "STABILITY_NAMES",
    "UD_SHARE_CLASSES",
    "stat_names_json",
]

#: Statistics of the attention maps alone.
STAT_NAMES: tuple[str, ...] = (
    "cls_mass",
    "sep_mass",
    "punct_mass",
    "sep_to_sep",
    "sep_mass_kovaleva",
    "self",
    "prev",
    "next",
    "entropy",
    "cls_entropy",
    "intra_segment_mass",
)
#: Kobayashi et al.'s norm-based statistics.
NORM_NAMES: tuple[str, ...] = ("cls_mass_norm", "sep_mass_norm", "punct_mass_norm", "norm_ratio")
#: Context mixing (``bertwatch.heads.mixing.mixing_scores``), per head ``[layers, heads]``: ALTI inside each head.
MIXING_HEAD_NAMES: tuple[str, ...] = ("cls_mass_alti", "sep_mass_alti")
#: Context mixing per layer, written as ``[layers, 1]`` grids (one column; never copied over the heads): Kobayashi
#: 2021's mixing ratio, the layer's ALTI [CLS]/[SEP] masses, attention rollout's [CLS]/[SEP] masses.
MIXING_LAYER_NAMES: tuple[str, ...] = (
    "mixing_ratio",
    "cls_mass_alti_layer",
    "sep_mass_alti_layer",
    "cls_mass_rollout",
    "sep_mass_rollout",
)
MIXING_NAMES: tuple[str, ...] = MIXING_HEAD_NAMES + MIXING_LAYER_NAMES
#: The token x token maps of one example, one per measure (the Attention maps view's selector; ``weights`` are the
#: attention probabilities themselves). ``weights`` and ``norms`` are ``[layers, heads, n, n]``, the others
#: ``[layers, n, n]``; ``value_zeroing`` only when asked for.
MIXING_MEASURES: tuple[str, ...] = ("weights", "norms", "alti", "alti_composed", "rollout", "value_zeroing")
#: Distances to the reference (pretrained) model's maps.
DRIFT_NAMES: tuple[str, ...] = ("drift_cosine", "drift_js")
#: Gradient-based importance.
GRADIENT_NAMES: tuple[str, ...] = ("head_importance", "attn_grad_sep", "attn_grad_punct", "attn_grad_other")
IG_NAME = "head_attribution_ig"
#: Training stability (Dehghani et al. 2023; Wortsman et al. 2023): per example and head, the largest pre-softmax
#: score over real query/key pairs and the scores' standard deviation (``bertwatch.heads.stability.logits``).
LOGIT_NAMES: tuple[str, ...] = ("max_logit", "logit_std")
#: Zhai et al. 2023: the spectral norm of each head's W_Q W_Kᵀ, from the weights alone
#: (``bertwatch.heads.stability.spectral_norms``).
QK_NAME = "qk_spectral_norm"
STABILITY_NAMES: tuple[str, ...] = (*LOGIT_NAMES, QK_NAME)
#: Activation outliers per layer (``bertwatch.heads.outliers.activations``; Bondarenko et al. 2023), written as
#: ``[layers, 1]`` grids like the per-layer mixing measures: the feed-forward output's and the residual stream's max |x|
#: and kurtosis, then of the residual stream the share of components with |x| >= 6, the delimiters' share of their
#: mass, the dimension holding the largest |x|, the overlap of the top-3 dimensions with the first measured step's,
#: and the max |x| on [CLS], [SEP], "."/"," and the other (content) tokens.
OUTLIER_NAMES: tuple[str, ...] = (
    "ffn_inf_norm",
    "ffn_kurtosis",
    "residual_inf_norm",
    "residual_kurtosis",
    "outlier_share",
    "delimiter_share",
    "outlier_dim",
    "outlier_dim_overlap",
    "cls_inf_norm",
    "sep_inf_norm",
    "punct_inf_norm",
    "content_inf_norm",
)
#: The outlier statistics of the feed-forward output (a family whose feed-forward block bertwatch knows).
OUTLIER_FFN_NAMES: tuple[str, ...] = OUTLIER_NAMES[:2]
#: The statistics of whole layers, written as ``[layers, 1]`` grids.
PER_LAYER_NAMES: tuple[str, ...] = MIXING_LAYER_NAMES + OUTLIER_NAMES
#: The classes the token rules give (Kovaleva's noun and verb need a tagger): the ``wordclass_<c>`` and
#: ``cls_target_<c>`` grids.
RULE_CLASSES: tuple[str, ...] = ("pron", "subj", "obj", "neg")
#: The keys of ``bertwatch.linguistics.wordclass.UD_CLASSES``: the ``class_share_<c>`` grids.
UD_SHARE_CLASSES: tuple[str, ...] = ("noun", "verb", "pron", "det", "subj", "obj", "neg", "punct")

#: The statistics computed from the attention maps (and the value vectors) of the probe pass, in logging order.
MAP_STATS: tuple[str, ...] = STAT_NAMES + NORM_NAMES + MIXING_NAMES + DRIFT_NAMES
#: Every statistic a callback's ``stats=`` may name, in logging order.
ALL_STATS: tuple[str, ...] = MAP_STATS + GRADIENT_NAMES + (IG_NAME,) + STABILITY_NAMES + OUTLIER_NAMES

#: The statistics ``BertWatchCallback`` (``watch()``, ``bertwatch run``) measures when ``stats=`` is not given: every
#: one but the context-mixing measures and integrated gradients, which cost a pass each (``bertwatch stats`` marks
#: them).
DEFAULT_STATS: tuple[str, ...] = (
    STAT_NAMES + NORM_NAMES + DRIFT_NAMES + GRADIENT_NAMES + STABILITY_NAMES + OUTLIER_NAMES
)

#: Statistics that are shares of a row's attention, so always in [0, 1] (the frontend's scale is then [0, 1]).
PROPORTION_NAMES: tuple[str, ...] = STAT_NAMES[:8] + NORM_NAMES + MIXING_NAMES

#: (group title, statistics) in menu order; a statistic in no group is listed last under "Other".
STAT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Special tokens", STAT_NAMES[:5]),
    ("Norm-based (Kobayashi)", NORM_NAMES),
    ("Mixing", MIXING_NAMES),
    ("Position", STAT_NAMES[5:8]),
    ("Spread", STAT_NAMES[8:10]),
    ("Segments", STAT_NAMES[10:]),
    ("Drift from pretrained", DRIFT_NAMES),
    ("Importance", (GRADIENT_NAMES[0], IG_NAME, *GRADIENT_NAMES[1:])),
    ("Stability", STABILITY_NAMES),
    ("Activation outliers", OUTLIER_NAMES),
    (
        "Word classes (Kovaleva)",
        tuple(f"wordclass_{c}" for c in RULE_CLASSES) + tuple(f"cls_target_{c}" for c in RULE_CLASSES),
    ),
    ("Word classes (UD share)", tuple(f"class_share_{c}" for c in UD_SHARE_CLASSES)),
)


#: The mass on [CLS] and on [SEP] by attention weight, by norm (Kobayashi et al. 2020) and by ALTI contribution
#: (Ferrando et al. 2022; per head, and of the whole layer with residual and LayerNorm), and on punctuation by weight
#: and by norm: ``(target, ((label, statistic), ...))``, the weight-based statistic first. The plugin's Heads view and
#: the report compare their layer means: Clark et al.'s "no-op" reading of [SEP] attention holds where the weight is
#: high and the contribution low.
MASS_BY_MEASURE: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "[CLS]",
        (
            ("weights", "cls_mass"),
            ("norms", "cls_mass_norm"),
            ("ALTI per head", "cls_mass_alti"),
            ("ALTI of the layer", "cls_mass_alti_layer"),
            ("rollout", "cls_mass_rollout"),
        ),
    ),
    (
        "[SEP]",
        (
            ("weights", "sep_mass"),
            ("norms", "sep_mass_norm"),
            ("ALTI per head", "sep_mass_alti"),
            ("ALTI of the layer", "sep_mass_alti_layer"),
            ("rollout", "sep_mass_rollout"),
        ),
    ),
    ('"." and ","', (("weights", "punct_mass"), ("norms", "punct_mass_norm"))),
)


#: One line per statistic, name -> definition (docs/statistics.md has the long form): the plugin's descriptions,
#: the report's and ``bertwatch stats``'s read them here.
DEFINITIONS: dict[str, str] = {
    "cls_mass": "Attention mass on [CLS], mean over queries (Clark et al. 2019, Fig. 2).",
    "sep_mass": "Attention mass on all [SEP] tokens, mean over queries (Clark et al. 2019, Fig. 2).",
    "punct_mass": 'Attention mass on "." and ",", mean over queries (Clark et al. 2019, Fig. 2).',
    "sep_to_sep": "Attention from [SEP] queries to [SEP] keys (Clark et al. 2019, Fig. 2).",
    "sep_mass_kovaleva": "Largest mean attention to a single [SEP] position (Kovaleva et al. 2019, Fig. 6).",
    "self": "Attention of each token to itself.",
    "prev": "Attention of each token to the previous token (Clark et al. 2019, Sec. 3.1).",
    "next": "Attention of each token to the following token (Clark et al. 2019, Sec. 3.1).",
    "entropy": "Mean entropy of the attention rows in nats (Clark et al. 2019, Fig. 4).",
    "cls_entropy": "Entropy of the [CLS] row in nats (Clark et al. 2019, Fig. 4).",
    "intra_segment_mass": "Attention mass on the query's own segment, mean over queries; NaN on single sentences.",
    "cls_mass_norm": "Share of the norm-weighted attention ‖A·f(x)‖ on [CLS], mean over queries (Kobayashi et al. 2020).",
    "sep_mass_norm": "Share of the norm-weighted attention ‖A·f(x)‖ on [SEP] tokens, mean over queries (Kobayashi et al. 2020).",
    "punct_mass_norm": 'Share of the norm-weighted attention ‖A·f(x)‖ on "." and ",", mean over queries (Kobayashi et al. 2020).',
    "norm_ratio": "‖Σ A·f(x)‖ / Σ A·‖f(x)‖, mean over queries; low = the weighted vectors cancel (Kobayashi et al. 2020).",
    "drift_cosine": "Cosine similarity to the pretrained model's maps; 1 = unchanged (Kovaleva et al. 2019, Fig. 5).",
    "drift_js": "Jensen-Shannon divergence from the pretrained model's maps, in nats; 0 = unchanged.",
    "head_importance": "Gradient head importance E|dL/d gate| (Michel et al. 2019).",
    "attn_grad_sep": "Mean |dL/dA| on keys that are [SEP] (Clark et al. 2019, Fig. 3).",
    "attn_grad_punct": "Mean |dL/dA| on punctuation keys (Clark et al. 2019, Fig. 3).",
    "attn_grad_other": "Mean |dL/dA| on other keys (Clark et al. 2019, Fig. 3).",
    "head_attribution_ig": "Integrated-gradients attribution of the loss to each head's gate.",
    "max_logit": "Largest pre-softmax score q·k/√d (+ relative terms) over real query/key pairs (Dehghani et al. 2023).",
    "logit_std": "Standard deviation of the pre-softmax scores over real query/key pairs (Wortsman et al. 2023).",
    "qk_spectral_norm": "Spectral norm of the head's W_Q W_Kᵀ times the score scale, from the weights (Zhai et al. 2023).",
}


# -- activation outliers (bertwatch.heads.outliers.activations; docs/statistics.md "Activation outliers")
DEFINITIONS.update(
    {
        "ffn_inf_norm": "Per layer: max |x| of the feed-forward output over the probe set's real tokens "
        "(Bondarenko et al. 2023).",
        "ffn_kurtosis": "Per layer: kurtosis of the feed-forward output's components, pooled (Bondarenko et al. 2023).",
        "residual_inf_norm": "Per layer: max |x| of the layer's output, the residual stream (Bondarenko et al. 2023).",
        "residual_kurtosis": "Per layer: kurtosis of the residual stream's components, pooled (Bondarenko et al. 2023).",
        "outlier_share": "Per layer: share of the residual stream's components with |x| >= 6 (Dettmers et al. 2022).",
        "delimiter_share": "Per layer: share of the outliers' summed |x| on [CLS], [SEP], '.' and ',' "
        "(Bondarenko et al. 2023).",
        "outlier_dim": "Per layer: the residual-stream dimension holding the largest |x| (Kovaleva et al. 2021).",
        "outlier_dim_overlap": "Per layer: share of the top-3 outlier dimensions that were top-3 at the first "
        "measured step.",
        "cls_inf_norm": "Per layer: max |x| of the residual stream on [CLS].",
        "sep_inf_norm": "Per layer: max |x| of the residual stream on [SEP] tokens.",
        "punct_inf_norm": "Per layer: max |x| of the residual stream on '.' and ','.",
        "content_inf_norm": "Per layer: max |x| of the residual stream on the other real tokens.",
    }
)


_CLASS_WORDS = {"pron": "pronouns", "subj": "subject pronouns", "obj": "object pronouns", "neg": "negation words"}
# -- mixing (bertwatch.heads.mixing.mixing_scores; docs/statistics.md "Context mixing")
DEFINITIONS.update(
    {
        "cls_mass_alti": "Share of the head's output from [CLS] by ALTI inside the head (Ferrando et al. 2022), "
        "mean over queries.",
        "sep_mass_alti": "Share of the head's output from [SEP] by ALTI inside the head (Ferrando et al. 2022), "
        "mean over queries.",
        "mixing_ratio": "Per layer: share of a token's attention-block output (residual and LayerNorm included) "
        "that comes from the other tokens (Kobayashi et al. 2021), mean over queries.",
        "cls_mass_alti_layer": "Per layer: share of the block's output from [CLS] by ALTI (Ferrando et al. 2022).",
        "sep_mass_alti_layer": "Per layer: share of the block's output from [SEP] by ALTI (Ferrando et al. 2022).",
        "cls_mass_rollout": "Per layer: attention rollout's share on [CLS] up to this layer (Abnar & Zuidema 2020).",
        "sep_mass_rollout": "Per layer: attention rollout's share on [SEP] up to this layer (Abnar & Zuidema 2020).",
    }
)
DEFINITIONS.update(
    {
        f"wordclass_{key}": f"Largest mean attention received by one of the {words} (Kovaleva et al. 2019, Sec. 4.4)."
        for key, words in _CLASS_WORDS.items()
    }
    | {
        f"cls_target_{key}": f"Largest attention of the [CLS] row to one of the {words} (Kovaleva et al. 2019, Sec. 4.5)."
        for key, words in _CLASS_WORDS.items()
    }
)


_UD_CLASS_WORDS = {
    "noun": "nouns and proper nouns (UPOS NOUN, PROPN)",
    "verb": "verbs (UPOS VERB)",
    "pron": "pronouns (UPOS PRON)",
    "det": "determiners (UPOS DET)",
    "subj": "subjects (nsubj, csubj and their subtypes)",
    "obj": "objects (obj, iobj)",
    "neg": "negation (Polarity=Neg or PronType=Neg)",
    "punct": "punctuation (UPOS PUNCT)",
}
DEFINITIONS.update(
    {
        f"class_share_{key}": f"Share of attention on {words}, mean over queries, on UD-annotated sentences."
        for key, words in _UD_CLASS_WORDS.items()
    }
)

#: The family (menu group title) of each statistic in :data:`STAT_GROUPS`; a statistic in none is in "Other".
FAMILIES: dict[str, str] = {name: title for title, names in STAT_GROUPS for name in names}


def stat_names_json() -> dict:
    """The names as plain JSON, for the plugin's ``/stat_names``: groups in menu order, drift and [0, 1] names."""
    return {
        "groups": [[title, list(names)] for title, names in STAT_GROUPS],
        "drift": list(DRIFT_NAMES),
        "proportions": list(PROPORTION_NAMES),
        "per_layer": list(PER_LAYER_NAMES),
        "measures": list(MIXING_MEASURES),
    }
