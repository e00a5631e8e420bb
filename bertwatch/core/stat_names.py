"""Every head statistic's name and the group it is shown in, torch-free: the TensorBoard plugin serves these at
``/stat_names`` and the frontend builds its statistic menu, its drift view and its [0, 1] scales from them.

This is the names' one home: the modules that compute the statistics (``bertwatch.heads.stats``, ``.norms``,
``.importance``) import their tuples from here, and the plugin (which must not import torch) reads them here too.
"""

from __future__ import annotations

__all__ = [
    "ALL_STATS",
    "DEFINITIONS",
    "DRIFT_NAMES",
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
#: Context mixing (``bertwatch.heads.mixing``), per head ``[layers, heads]``: ALTI inside each head.
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
#: score over real query/key pairs and the scores' standard deviation (``bertwatch.heads.logits``).
LOGIT_NAMES: tuple[str, ...] = ("max_logit", "logit_std")
#: Zhai et al. 2023: the spectral norm of each head's W_Q W_Kᵀ, from the weights alone (``bertwatch.heads.stability``).
QK_NAME = "qk_spectral_norm"
STABILITY_NAMES: tuple[str, ...] = (*LOGIT_NAMES, QK_NAME)
#: ``bertwatch.callbacks.riders.RULE_CLASSES``: the ``wordclass_<c>`` and ``cls_target_<c>`` grids.
RULE_CLASSES: tuple[str, ...] = ("pron", "subj", "obj", "neg")
#: The keys of ``bertwatch.linguistics.wordclass.UD_CLASSES``: the ``class_share_<c>`` grids.
UD_SHARE_CLASSES: tuple[str, ...] = ("noun", "verb", "pron", "det", "subj", "obj", "neg", "punct")

#: The statistics computed from the attention maps (and the value vectors) of the probe pass, in logging order.
MAP_STATS: tuple[str, ...] = STAT_NAMES + NORM_NAMES + MIXING_NAMES + DRIFT_NAMES
#: Every statistic a callback's ``stats=`` may name, in logging order.
ALL_STATS: tuple[str, ...] = MAP_STATS + GRADIENT_NAMES + (IG_NAME,) + STABILITY_NAMES

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
    (
        "Word classes (Kovaleva)",
        tuple(f"wordclass_{c}" for c in RULE_CLASSES) + tuple(f"cls_target_{c}" for c in RULE_CLASSES),
    ),
    ("Word classes (UD share)", tuple(f"class_share_{c}" for c in UD_SHARE_CLASSES)),
)


_CLASS_WORDS = {"pron": "pronouns", "subj": "subjects", "obj": "objects", "neg": "negation words"}
_UD_WORDS = {"noun": "nouns", "verb": "verbs", "pron": "pronouns", "det": "determiners", "subj": "subjects",
             "obj": "objects", "neg": "negation", "punct": "punctuation"}  # fmt: skip

#: What each statistic measures, in one line of plain words (``bertwatch stats`` prints them; docs/statistics.md
#: gives the exact definitions and sources). Every statistic of ``STAT_GROUPS`` has one.
DEFINITIONS: dict[str, str] = {
    "cls_mass": "share of the head's attention that lands on [CLS]",
    "sep_mass": "share of the head's attention that lands on [SEP] tokens (every [SEP] counted)",
    "punct_mass": "share of the head's attention that lands on '.' and ','",
    "sep_to_sep": "how much the [SEP] tokens attend to [SEP] tokens",
    "sep_mass_kovaleva": "attention on the single most-attended [SEP] (Kovaleva's variant of sep_mass)",
    "self": "share of attention a token pays to itself",
    "prev": "share of attention a token pays to the token before it (above 0.5: a previous-token head)",
    "next": "share of attention a token pays to the token after it (above 0.5: a next-token head)",
    "entropy": "how spread out each token's attention is, in nats (high: broad, low: focused)",
    "cls_entropy": "how spread out the [CLS] token's attention is, in nats",
    "intra_segment_mass": "share of attention that stays inside the token's own sentence of a pair",
    "cls_mass_norm": "cls_mass weighted by the size of what each token passes on (Kobayashi)",
    "sep_mass_norm": "sep_mass weighted by the size of what each token passes on (Kobayashi)",
    "punct_mass_norm": "punct_mass weighted by the size of what each token passes on (Kobayashi)",
    "norm_ratio": "how much the vectors a head mixes point the same way (1) or cancel out (near 0)",
    "cls_mass_alti": "share of each token's head output that really comes from [CLS] (ALTI, per head)",
    "sep_mass_alti": "share of each token's head output that really comes from [SEP] (ALTI, per head)",
    "mixing_ratio": "share of a token's new representation that comes from the other tokens (per layer)",
    "cls_mass_alti_layer": "share of each token's layer output that really comes from [CLS] (ALTI, per layer)",
    "sep_mass_alti_layer": "share of each token's layer output that really comes from [SEP] (ALTI, per layer)",
    "cls_mass_rollout": "how much of the input [CLS] has flowed into this layer, by attention weights (rollout)",
    "sep_mass_rollout": "how much of the input [SEP] has flowed into this layer, by attention weights (rollout)",
    "drift_cosine": "similarity of the head's attention maps to the pretrained model's (1: unchanged)",
    "drift_js": "distance of the head's attention maps from the pretrained model's (0: unchanged)",
    "head_importance": "how much the loss would change if the head were removed (gradient estimate, Michel)",
    "attn_grad_sep": "how strongly the loss reacts to the head's attention on [SEP] (gradient size)",
    "attn_grad_punct": "how strongly the loss reacts to the head's attention on punctuation (gradient size)",
    "attn_grad_other": "how strongly the loss reacts to the head's attention on the other tokens (gradient size)",
    "head_attribution_ig": "the head's share of the loss by integrated gradients (opt-in, slower)",
    "max_logit": "the head's largest attention score before the softmax (growth warns of instability)",
    "logit_std": "the spread of the head's attention scores before the softmax",
    "qk_spectral_norm": "the size of the head's query-key weights (growth can collapse attention entropy)",
    **{
        f"wordclass_{c}": f"attention on the most-attended of the {w} (closed word lists)"
        for c, w in _CLASS_WORDS.items()
    },
    **{f"cls_target_{c}": f"attention from [CLS] to the most-attended of the {w}" for c, w in _CLASS_WORDS.items()},
    **{f"class_share_{c}": f"share of attention on {w}, from UD-annotated sentences" for c, w in _UD_WORDS.items()},
}


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


def stat_names_json() -> dict:
    """The names as plain JSON, for the plugin's ``/stat_names``: groups in menu order, drift and [0, 1] names."""
    return {
        "groups": [[title, list(names)] for title, names in STAT_GROUPS],
        "drift": list(DRIFT_NAMES),
        "proportions": list(PROPORTION_NAMES),
        "per_layer": list(MIXING_LAYER_NAMES),
        "measures": list(MIXING_MEASURES),
    }
