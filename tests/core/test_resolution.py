"""What an evaluation set resolves (bertwatch.core.resolution) and the pruning headline built on it
(bertwatch.core.removable.headline): the words, the numbers, and the issue's 128-example case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertwatch.core.removable import answer_lines, headline, short_answer
from bertwatch.core.resolution import Resolution, examples_text, round_up, typical_half_width

pytestmark = pytest.mark.fast


def test_typical_half_width_is_the_median_of_the_intervals_that_have_a_width() -> None:
    rng = np.random.default_rng(0)
    lows, highs = -rng.random(31), rng.random(31)
    lows[:5] = highs[:5] = 0.0  # configurations that changed no prediction: width 0, left out
    lows[5], highs[5] = np.nan, 0.1  # undefined: left out
    plain = float(np.median([(h - l) / 2 for l, h in zip(lows[6:], highs[6:])]))
    assert typical_half_width(lows, highs) == pytest.approx(plain, rel=1e-12)
    assert typical_half_width([0.0, None], [0.0, None]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.037, 0.04), (0.011, 0.015), (0.02, 0.02), (0.0081, 0.01), (0.26, 0.3), (7.1, 8.0), (0.0009, 0.001)],
)
def test_round_up_takes_the_next_round_value(value: float, expected: float) -> None:
    assert round_up(value) == pytest.approx(expected) and round_up(value) >= value


def test_examples_text_keeps_two_significant_digits() -> None:
    assert [examples_text(n) for n in (1752, 2048, 96, 12345)] == ["1,800", "2,000", "96", "12,000"]


def _res(n: int, width: float | None, one: float | None = None, how: str = "flip") -> Resolution:
    return Resolution(n, "accuracy", 1 / n if one is None else one, how, width, "the importance order's 9 steps")


def test_a_delta_below_the_width_or_one_example_is_not_resolved() -> None:
    assert not _res(128, 0.037).resolves(0.01) and _res(128, 0.037).resolves(0.04)
    assert not _res(50, 0.0).resolves(0.01)  # one example is 0.02: a single flip is already past δ
    assert _res(872, 0.008).resolves(0.01) and _res(872, 0.008).limit == pytest.approx(0.008)


def test_examples_that_would_resolve_scale_as_one_over_delta_squared() -> None:
    res = _res(128, 0.04)
    assert res.examples_for(0.01) == 2048  # 128 * (0.04 / 0.01) ** 2
    assert res.examples_for(0.005) == 4 * 2048
    assert _res(50, None).examples_for(0.01) == 100  # no width measured: one example must be at most δ


def test_one_example_words_say_how_it_was_measured() -> None:
    assert _res(128, 0.04).one_example_words() == "one example is 0.0078"
    assert "moves F1 by up to 0.012" in Resolution(128, "F1", 0.0123, "flip", 0.04, "").one_example_words()
    left = Resolution(300, "Pearson", 0.031, "left out", 0.05, "").one_example_words()
    assert left == "leaving one example out moves Pearson by up to 0.031"
    assert "not known" in Resolution(300, "loss", None, "", 0.05, "").one_example_words()


def _answers(resolution: Resolution, importance: dict, wider: dict | None = None) -> dict:
    answers = {"delta": 0.01, "confidence": 0.95, "importance": importance, "resolution": resolution.to_json()}
    if wider is not None:
        answers["at_resolution"] = wider
    return answers


def test_the_issues_case_says_what_128_examples_cannot_tell_and_what_they_can() -> None:
    nothing = {"fraction": 0.0, "pruned": 0, "step": -1}
    wider = {"delta": 0.04, "importance": {"fraction": 22 / 72, "pruned": 22, "step": 2, "censored": False}}
    answers = _answers(_res(128, 0.037), nothing, wider)
    assert headline(answers, 72, "accuracy") == (
        "128 examples cannot tell a change of 0.01 (one example is 0.0078; the 95% intervals are about ±0.037): "
        "at δ = 0.04, up to 31% of the heads (22 of 72) can go; about 1,800 examples would resolve 0.01"
    )
    assert short_answer(answers)[0] == 0.04 and short_answer(answers)[1].pruned == 22
    lines = answer_lines(answers, 72, "accuracy")
    assert lines[1] == "importance order: no pruning step keeps accuracy within 0.01 of the baseline (95% interval)"


def test_a_resolved_delta_gives_the_share_with_the_resolution() -> None:
    answers = _answers(_res(872, 0.0081), {"fraction": 0.4, "pruned": 29, "step": 3})
    text = headline(answers, 72, "accuracy")
    assert text == (
        "872 examples resolve a change of 0.01 (one example is 0.0011; the 95% intervals are about ±0.0081): "
        "up to 40% of the heads (29 of 72) can go"
    )
    assert short_answer(answers) == (0.01, short_answer(answers)[1]) and short_answer(answers)[1].pruned == 29


def test_a_file_without_a_resolution_keeps_the_old_answer() -> None:
    answers = {"delta": 0.01, "importance": {"fraction": 0.4, "pruned": 29, "step": 3}}
    assert headline(answers, 72, "accuracy").startswith("up to 40% of heads (29 of 72) removed with accuracy")


def test_json_round_trip() -> None:
    res = Resolution(128, "F1", 0.012, "flip", math.nan, "x", 0.9)
    back = Resolution.from_json(res.to_json())
    assert back.half_width is None and back.one_example == 0.012 and back.confidence == 0.9
