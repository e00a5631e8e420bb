"""The statistic and label names have one home in Python, and the frontend agrees with it.

``bertwatch.core.stat_names`` is the torch-free home of the names: the heads' modules import their tuples from it
(checked here: the same objects) and the plugin, which may not import torch, reads them there too. The plugin serves it at ``/stat_names`` and the label rules at ``/labels``; the JS builds its menus,
drift view and scales from those, so no statistic name list may remain written in the JS.
"""

from __future__ import annotations

import json
import re

from werkzeug.test import Client

from bertwatch.callbacks.word_classes import SHARE_PREFIX
from bertwatch.core import rules, stat_names
from bertwatch.heads.gradients import importance
from bertwatch.heads.maps import stats
from bertwatch.heads.norms import norm_based
from bertwatch.linguistics.wordclass import UD_CLASSES
from bertwatch.options.settings import ALL_STATS
from bertwatch.tb.writer import metadata as md
from tests.support.tb_helpers import frontend_files, make_wsgi_app  # noqa: E402

BASE = "/data/plugin/bertwatch/"
GROUPED = [name for _, names in stat_names.STAT_GROUPS for name in names]
#: Quoted strings in the JS: '...', "..." and template-free `...`.
JS_STRING = re.compile(r"""'([^'\\\n]*)'|"([^"\\\n]*)"|`([^`$\\]*)`""")
#: A bracketed or Set(...) list literal of quoted strings, e.g. ['a', 'b'].
JS_STRING_LIST = re.compile(r"""\[\s*(?:['"`][^'"`\n]*['"`]\s*,\s*)+['"`][^'"`\n]*['"`]\s*,?\s*\]""")


def test_torch_free_names_are_the_heads_tuples():
    assert stat_names.STAT_NAMES is stats.STAT_NAMES
    assert stat_names.DRIFT_NAMES is stats.DRIFT_NAMES
    assert stat_names.NORM_NAMES is norm_based.NORM_NAMES
    assert stat_names.GRADIENT_NAMES is importance.GRADIENT_NAMES
    assert stat_names.IG_NAME == importance.IG_NAME
    assert stat_names.UD_SHARE_CLASSES == tuple(UD_CLASSES)


def test_every_logged_statistic_is_in_exactly_one_group_with_a_description():
    logged = set(ALL_STATS)
    logged |= {f"{prefix}{c}" for prefix in ("wordclass_", "cls_target_") for c in stat_names.RULE_CLASSES}
    logged |= {SHARE_PREFIX + c for c in UD_CLASSES}
    assert len(GROUPED) == len(set(GROUPED)), [n for n in GROUPED if GROUPED.count(n) > 1]
    assert set(GROUPED) == logged
    assert set(md.STAT_DESCRIPTIONS) == logged
    assert set(stat_names.PROPORTION_NAMES) < logged
    assert {rule.stat for rule in rules.BEHAVIOUR_RULES} <= logged
    assert set(rules.PATTERN_STATS) <= logged


def test_served_names_and_rules_equal_the_python_ones(tmp_path):
    client = Client(make_wsgi_app(tmp_path)[0])
    served = json.loads(client.get(BASE + "stat_names").get_data())
    assert served == json.loads(json.dumps(stat_names.stat_names_json()))
    assert [(title, tuple(names)) for title, names in served["groups"]] == list(stat_names.STAT_GROUPS)
    assert served["drift"] == list(stats.DRIFT_NAMES)
    labels = json.loads(client.get(BASE + "labels").get_data())
    assert [r["stat"] for r in labels["rules"]] == [r.stat for r in rules.BEHAVIOUR_RULES]
    assert [r["label"] for r in labels["rules"]] == [r.label for r in rules.BEHAVIOUR_RULES]
    assert labels["patterns"]["classes"] == list(rules.PATTERN_CLASSES)


def _js_sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in frontend_files("*.js")}


def test_the_js_names_no_statistic_or_label_list_of_its_own():
    known = set(GROUPED)
    labels = {rule.label for rule in rules.BEHAVIOUR_RULES} | set(rules.PATTERN_CLASSES)
    found = []
    for name, text in _js_sources().items():
        for literal in JS_STRING_LIST.finditer(text):
            strings = {next(g for g in m.groups() if g is not None) for m in JS_STRING.finditer(literal.group())}
            if len(strings & known) >= 2 or len(strings & labels) >= 2:
                found.append((name, literal.group()))
    assert not found, f"statistic or label name lists written in the JS (serve them from Python): {found}"
    assert "STAT_GROUPS" not in "".join(_js_sources().values())


def test_every_statistic_name_the_js_mentions_is_a_python_one():
    known = set(GROUPED)
    kinds = set(md.TENSOR_KINDS + md.BLOB_KINDS)
    stat_like = re.compile(r"^(?:wordclass_|cls_target_|class_share_|drift_|attn_grad_|head_)\w+$|^\w+_mass(?:_\w+)?$")
    unknown = []
    for name, text in _js_sources().items():
        for m in JS_STRING.finditer(text):
            s = next(g for g in m.groups() if g is not None)
            if stat_like.match(s) and s not in known | kinds:
                unknown.append((name, s))
    assert not unknown, f"the JS names statistics Python does not have: {unknown}"
    strings = {
        next(g for g in m.groups() if g is not None) for t in _js_sources().values() for m in JS_STRING.finditer(t)
    }
    mentioned = strings & known
    assert mentioned, "the name pattern matched nothing: the check above would be vacuous"
