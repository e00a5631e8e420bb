"""logit_summary against a float64 loop over each example's allowed pairs alone: the square-block path (right, left
and no padding: each example reduced over its slice, unmasked) and the masked path (a local window, per-head masks,
an example with no real token) must give the same numbers, whatever else is in the batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertwatch.heads.stability.logits import allowed_pairs, logit_summary, pair_blocks
from tests.support.tolerance import EPS32, ROUNDINGS, assert_float32_close

T, HEADS = 7, 3


def key_mask(spans: list[tuple[int, int]]) -> torch.Tensor:
    """BERT's additive key mask ``[batch, 1, 1, T]``: example b's real tokens are spans[b] = [start, stop)."""
    real = torch.zeros(len(spans), T)
    for b, (start, stop) in enumerate(spans):
        real[b, start:stop] = 1.0
    return ((1.0 - real) * torch.finfo(torch.float32).min)[:, None, None, :]


def window_mask(spans: list[tuple[int, int]], width: int) -> torch.Tensor:
    """A ModernBERT-like boolean mask ``[batch, 1, T, T]``: real keys within ``width`` of the query."""
    position = torch.arange(T)
    near = (position[:, None] - position[None, :]).abs() <= width
    real = torch.zeros(len(spans), T, dtype=torch.bool)
    for b, (start, stop) in enumerate(spans):
        real[b, start:stop] = True
    return (near & real[:, None, :])[:, None]


def oracle(scores: torch.Tensor, pairs: torch.Tensor | None) -> tuple[np.ndarray, np.ndarray]:
    """(max, population std) in float64 over each example's and head's allowed pairs, one example at a time."""
    s = scores.double().numpy()
    allowed = np.ones(s.shape, bool) if pairs is None else np.broadcast_to(pairs.numpy(), s.shape)
    peak, spread = np.full(s.shape[:2], np.nan), np.full(s.shape[:2], np.nan)
    for b in range(s.shape[0]):
        for h in range(s.shape[1]):
            values = [s[b, h, i, j] for i in range(T) for j in range(T) if allowed[b, h, i, j]]
            if values:
                peak[b, h], spread[b, h] = max(values), float(np.std(np.array(values)))
    return peak, spread


def scores_of(batch: int, offset: float = 0.0, spread: float = 4.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return offset + spread * torch.randn(batch, HEADS, T, T, generator=g)


def check(scores: torch.Tensor, pairs: torch.Tensor | None) -> None:
    peak, spread = logit_summary(scores, pairs)
    want_peak, want_spread = oracle(scores, pairs)
    scale = float(scores.abs().max())
    assert_float32_close(peak, want_peak, scale=scale, msg="max_logit")
    assert_float32_close(spread, want_spread, scale=scale, msg="logit_std")
    for b in range(scores.shape[0]):  # each example alone, cropped to a batch of one
        alone = None if pairs is None else pairs[b : b + 1]
        one_peak, one_spread = logit_summary(scores[b : b + 1], alone)
        assert torch.equal(one_peak.isnan(), peak[b : b + 1].isnan())
        assert_float32_close(one_spread, spread[b : b + 1].numpy(), scale=scale, msg=f"example {b} alone")


SPANS = [(0, T), (0, 4), (0, 0), (0, 1), (2, T), (6, T)]  # full, right-padded, no real token, one token, left-padded


def test_square_blocks_are_found_for_right_left_and_no_padding():
    """The cut path is taken exactly where each example's pairs are one square block shared by every head."""
    pairs = allowed_pairs(key_mask(SPANS), T)
    assert pair_blocks(pairs, len(SPANS), T) == [(0, T), (0, 4), None, (0, 1), (2, T), (6, T)]
    assert pair_blocks(None, 2, T) == [(0, T), (0, T)]
    window = allowed_pairs(window_mask([(0, T), (0, 2)], width=2), T)
    assert pair_blocks(window, 2, T) == [None, (0, 2)]  # a 2-token example lies inside its window
    per_head = allowed_pairs(key_mask([(0, 4)]).expand(1, HEADS, 1, T), T)
    assert pair_blocks(per_head, 1, T) == [None]


@pytest.mark.parametrize(
    "what", ["right and left padding", "repeated blocks", "window", "per-head", "no mask", "full mask"]
)
def test_logit_summary_is_the_loop_over_each_examples_pairs(what):
    """Every mask form against the float64 loop: square blocks, masked examples and both mixed in one batch."""
    spans = SPANS
    if what == "right and left padding":
        pairs = allowed_pairs(key_mask(spans), T)
    elif what == "repeated blocks":  # examples sharing a block are reduced together, among others
        spans = [(0, 4), (0, T), (0, 4), (2, T), (0, 0), (2, T), (0, 4), (1, 5)]
        pairs = allowed_pairs(key_mask(spans), T)
    elif what == "window":
        pairs = allowed_pairs(window_mask(spans, width=2), T)
    elif what == "per-head":
        pairs = allowed_pairs(key_mask(spans).expand(-1, HEADS, -1, -1).clone(), T)
        pairs[:, 1, :, 0] = False  # head 1 may not attend to the first token
    elif what == "no mask":
        pairs = None
    else:
        spans = [(0, T)] * 4
        pairs = allowed_pairs(key_mask(spans), T)
    check(scores_of(len(spans)), pairs)


def test_the_std_is_about_the_mean_for_large_nearly_equal_scores():
    """Scores 1e4 ± 1: E[s²] − E[s]² would lose every digit in float32; the two-pass std keeps them. The mean is
    off by at most ROUNDINGS·EPS32·1e4 (δ), which moves the std by δ²/(2σ) at most beyond its own roundings."""
    scores = scores_of(4, offset=1e4, spread=1.0, seed=1)
    pairs = allowed_pairs(key_mask([(0, T), (0, 5), (1, T), (0, 3)]), T)
    for mask in (None, pairs, allowed_pairs(window_mask([(0, T)] * 4, width=1), T)):
        _, spread = logit_summary(scores, mask)
        _, want = oracle(scores, mask)
        delta = ROUNDINGS * EPS32 * 1e4
        assert np.all(np.abs(spread.double().numpy() - want) <= ROUNDINGS * EPS32 * want + delta**2 / (2 * want))
        assert np.all(want > 0.25)
    flat = scores.reshape(4, HEADS, -1)
    naive = ((flat**2).mean(-1) - flat.mean(-1) ** 2).clamp_min(0).sqrt()  # what the bound rules out
    _, want = oracle(scores, None)
    assert not np.all(np.abs(naive.double().numpy() - want) <= ROUNDINGS * EPS32 * want + delta**2 / (2 * want))


def test_one_capture_keeps_no_pairs_of_an_earlier_pass():
    """Passes of other shapes under one capture (with and without a mask) each get their own summary, equal to that
    of a fresh capture: the counted pairs found for one mask are never reused for scores of another shape."""
    from bertwatch.heads.capture import capture
    from tests.heads.test_capture_support import tiny_encoder

    model = tiny_encoder("bert")
    g = torch.Generator().manual_seed(0)
    inputs = [
        {"input_ids": torch.randint(5, 100, (2, 5), generator=g)},
        {"input_ids": torch.randint(5, 100, (3, 7), generator=g)},
        {"input_ids": torch.randint(5, 100, (3, 7), generator=g), "attention_mask": torch.ones(3, 7, dtype=torch.long)},
        {"input_ids": torch.randint(5, 100, (2, 6), generator=g)},
    ]
    with torch.no_grad():
        fresh = []
        for batch in inputs:
            with capture(model, record_logits=True) as cap:
                model(**batch)
            fresh.append(cap.logit_summary)
        with capture(model, record_logits=True) as cap:
            for batch, want in zip(inputs, fresh, strict=True):
                model(**batch)
                for name, value in cap.logit_summary.items():
                    assert torch.equal(value, want[name]), name


@pytest.mark.parametrize("span", [(0, T), (0, 4), (2, T)], ids=["full", "right-padded", "left-padded"])
@pytest.mark.parametrize("examples_per_chunk", [0, 1, 2, 5])
def test_a_batch_reduced_in_cpu_chunks_is_the_float64_reduction(monkeypatch, examples_per_chunk, span):
    """Examples sharing one block (full length, or the same padding: a strided slice copied out chunk by chunk)
    reduced a few at a time (chunks ending inside the batch; a chunk smaller than one example takes one) give
    numpy's float64 max and population std of each example's and head's scores over its block."""
    from bertwatch.heads.stability import logits

    batch, per_example = 5, HEADS * T * T
    monkeypatch.setattr(logits, "_CPU_CHUNK", examples_per_chunk * per_example + per_example // 2)
    scores = 2.0 + 3.0 * torch.randn(batch, HEADS, T, T, generator=torch.Generator().manual_seed(2))
    pairs = allowed_pairs(key_mask([span] * batch), T)
    assert pair_blocks(pairs, batch, T) == [span] * batch
    peak, spread = logit_summary(scores, pairs)
    start, stop = span
    flat = scores.double().numpy()[:, :, start:stop, start:stop].reshape(batch, HEADS, -1)
    scale = float(scores.abs().max())
    assert_float32_close(peak, flat.max(-1), scale=scale, msg="max_logit")
    assert_float32_close(spread, flat.std(-1), scale=scale, msg="logit_std")


def test_an_empty_batch_gives_empty_summaries():
    for pairs in (allowed_pairs(key_mask([]), T), None):  # a padding mask, or none at all
        peak, spread = logit_summary(torch.zeros(0, HEADS, T, T), pairs)
        assert peak.shape == spread.shape == (0, HEADS)
