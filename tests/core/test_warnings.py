"""bertwatch's one warning category and its one message for examples cut to the length measured
(``core.warnings``)."""

from __future__ import annotations

import warnings

import pytest

from bertwatch.core.warnings import BertWatchWarning, cut_message

pytestmark = pytest.mark.fast


def test_the_category_is_a_user_warning_a_user_can_filter() -> None:
    assert issubclass(BertWatchWarning, UserWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=BertWatchWarning)
        warnings.warn("measured less", BertWatchWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]


def test_the_cut_message_says_how_many_to_what_length_where_it_is_recorded_and_what_to_do() -> None:
    text = cut_message(3, 40, "probe examples", 128, "probe_max_length", "the run records 128", "raise it to 256")
    assert text == (
        "bertwatch: 3 of 40 probe examples are longer than 128 tokens (probe_max_length) and are measured on their "
        "first 128 tokens only; the run records 128. To measure them whole, raise it to 256."
    )
