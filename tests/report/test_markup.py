"""The HTML pieces of the report (``report.markup``): every text escaped, numbers as a reader wants them, images
that carry their own data, tables aligned as asked."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest

from bertwatch.report.markup import b64, escape, head_name, image, number, table

pytestmark = pytest.mark.fast

HOSTILE = '<img src=x onerror="alert(1)">&\''


def test_escape_leaves_no_markup_and_no_quote() -> None:
    out = escape(HOSTILE)
    assert out == "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#x27;"
    assert escape(3.5) == "3.5"


def test_numbers_integers_as_they_are_floats_to_the_digits_missing_as_a_dash() -> None:
    assert number(7) == "7" and number(np.int64(-3)) == "-3"
    assert number(0.123456) == "0.1235" and number(np.float32(2.0), digits=2) == "2.00"
    assert number(None) == number(math.nan) == number(-math.inf) == "–"


def test_head_names_count_from_zero() -> None:
    assert head_name(0, 0) == "L0 H0" and head_name(np.int64(5), 11.0) == "L5 H11"


def test_an_image_embeds_its_png_and_escapes_its_alt_and_class() -> None:
    png = b"\x89PNG\r\n\x1a\nrest"
    text = b64(png)
    assert base64.b64decode(text) == png
    tag = image(text, 'a "figure"', css="x<y")
    assert tag == f'<img class="x&lt;y" alt="a &quot;figure&quot;" src="data:image/png;base64,{text}">'
    assert "class=" not in image(text, "plain")


def test_a_table_escapes_every_cell_and_aligns_the_first_columns_left() -> None:
    out = table(["head", "Δ <b>"], [["L0 H1", HOSTILE], [2, 0.5]], left=1)
    assert out.startswith('<table><thead><tr><th class="l">head</th><th class="">Δ &lt;b&gt;</th></tr></thead>')
    assert '<td class="l">L0 H1</td><td class="">&lt;img' in out and "<img" not in out
    assert out.count("<tr>") == 3 and '<td class="l">2</td><td class="">0.5</td>' in out
