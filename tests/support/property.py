"""Strategies every batch-invariance property draws from (budgets and health checks: the profiles in conftest.py)."""

from __future__ import annotations

from hypothesis import strategies as st

#: The tokenizer's padding side: bertwatch's layout must make both give each example's own statistics.
PADDING_SIDES = st.sampled_from(["left", "right"])
#: A shuffle of the examples (seeded by hypothesis, so a failure replays).
ORDERS = st.randoms(use_true_random=False)
