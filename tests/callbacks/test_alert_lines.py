"""The alert lines: one per rule and first step, naming its heads (the furthest past the threshold first, up to 8
and how many more), and the first failing verdict's line."""

from __future__ import annotations

import re

import pytest

from bertwatch.callbacks.alert_lines import alert_lines, verdict_line
from bertwatch.core.alerts import Alert

pytestmark = pytest.mark.fast


def _alert(layer, head, rule="logit_growth", value=30.0, since=10, stat="max_logit"):
    return Alert(layer, head, rule, stat, since, since, value, 5.0, 15.0)


def test_an_alert_line_names_every_head_of_its_rule_or_says_how_many_more() -> None:
    few = [_alert(1, 2, value=20.0), _alert(5, 9, value=41.0), _alert(0, 3, value=16.0)]
    assert alert_lines(few, 0) == [
        "3 heads in alert since step 10: logit growth on L5 H9, L1 H2, L0 H3 (L5 H9: largest attention logit 41, "
        "from 5 at step 0)"
    ]
    many = [_alert(layer, head, value=16.0 + layer + head / 100) for layer in range(3) for head in range(4)]
    (line,) = alert_lines(many, 0)
    assert line.startswith("12 heads in alert since step 10: logit growth on L2 H3, L2 H2, L2 H1, L2 H0, L1 H3, ")
    assert len(re.findall(r"L\d H\d", line.split(" (")[0])) == 8 and line.split(" (")[0].endswith(" and 4 more")
    mixed = [
        _alert(0, 1, "entropy_collapse", 0.3, stat="entropy"),
        _alert(4, None, "outlier_growth", 230.0, stat="ffn_inf_norm"),
        _alert(2, 2, value=float("nan"), rule="non_finite"),
        _alert(3, 3, since=20),
    ]
    lines = alert_lines(mixed, 0)
    assert len(lines) == 4, "one line per rule and first step"
    assert lines[0].startswith("1 head in alert since step 10: entropy collapse on L0 H1 (L0 H1: attention entropy 0.3")
    assert lines[1].startswith("1 layer in alert since step 10: outlier growth on L4 (L4: largest feed-forward ")
    assert lines[2] == "1 head in alert since step 10: non finite on L2 H2 (L2 H2: largest attention logit is nan)"
    assert lines[3].startswith("1 head in alert since step 20: logit growth on L3 H3")


def test_the_verdict_line_gives_its_step_and_words() -> None:
    assert verdict_line(40, "failing: a reason") == "verdict at step 40: failing: a reason"
