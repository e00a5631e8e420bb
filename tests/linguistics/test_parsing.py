"""Clark's probes: features, scores and UAS against plain loops; training learns a planted head."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertwatch.linguistics.parsing import (
    AttentionProbe,
    AttentionWordProbe,
    ProbeExample,
    make_example,
    pair_features,
    probe_uas,
    right_branching_uas,
    train_probe,
)

K = 6


def _random_example(n: int, rng: np.random.Generator, dim: int = 5, punct_every: int = 4) -> ProbeExample:
    w = n + 2
    maps = rng.dirichlet(np.ones(w), size=(2, K // 2, w)).astype(np.float32)
    heads = rng.integers(0, n + 1, size=n)
    for d in range(n):
        while heads[d] == d + 1:
            heads[d] = rng.integers(0, n + 1)
    punct = [(d % punct_every) == punct_every - 1 for d in range(n)]
    vectors = torch.from_numpy(rng.normal(size=(n, dim)).astype(np.float32))
    return make_example(torch.from_numpy(maps), heads.tolist(), punct, vectors)


def test_make_example_and_pair_features_by_loops() -> None:
    rng = np.random.default_rng(0)
    ex = _random_example(5, rng)
    assert ex.maps.shape == (K, 7, 7) and ex.maps.dtype == torch.float16
    assert ex.scored.tolist() == [True, True, True, False, True]
    pair, root = pair_features(ex.maps)
    a = ex.maps.float().numpy()
    for d in range(5):
        for c in range(5):
            for k in range(K):
                assert pair[d, c, k] == a[k, d + 1, c + 1]
                assert pair[d, c, K + k] == a[k, c + 1, d + 1]
        for k in range(K):
            assert root[d, k] == a[k, d + 1, 0]
            assert root[d, K + k] == a[k, d + 1, 6]
    with pytest.raises(ValueError, match="does not fit"):
        make_example(torch.zeros(1, K, 7, 7), [0, 1], [False, False])


def test_attention_probe_scores_match_loops() -> None:
    rng = np.random.default_rng(1)
    ex = _random_example(6, rng)
    probe = AttentionProbe(K)
    with torch.no_grad():
        probe.pair.copy_(torch.randn(2 * K))
        probe.root.copy_(torch.randn(2 * K))
        probe.bias_root.fill_(0.3)
    scores = probe(ex).detach().numpy()
    a = ex.maps.float().numpy()
    w, u = probe.pair[:K].detach().numpy(), probe.pair[K:].detach().numpy()
    s, e = probe.root[:K].detach().numpy(), probe.root[K:].detach().numpy()
    n = 6
    for d in range(n):
        root = sum(s[k] * a[k, d + 1, 0] + e[k] * a[k, d + 1, n + 1] for k in range(K)) + 0.3
        assert scores[d, 0] == pytest.approx(root, abs=1e-5)
        for c in range(n):
            expected = (
                -math.inf if c == d else sum(w[k] * a[k, d + 1, c + 1] + u[k] * a[k, c + 1, d + 1] for k in range(K))
            )
            assert scores[d, c + 1] == pytest.approx(expected, abs=1e-5)


def test_attention_word_probe_scores_match_loops() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    ex = _random_example(5, rng, dim=4)
    probe = AttentionWordProbe(K, 4)
    with torch.no_grad():
        probe.root_vector.copy_(torch.randn(4))
        probe.root.copy_(torch.randn(2 * K))
    scores = probe(ex).detach().numpy()
    a = ex.maps.float().numpy()
    v = ex.vectors.numpy()
    W = torch.cat([probe.dependent.weight, probe.candidate.weight], 1).detach().numpy()
    b = probe.dependent.bias.detach().numpy()
    v_root = probe.root_vector.detach().numpy()
    r = probe.root.detach().numpy()
    n = 5
    for d in range(n):
        weights = W @ np.concatenate([v[d], v_root]) + b + r
        root = sum(weights[k] * a[k, d + 1, 0] + weights[K + k] * a[k, d + 1, n + 1] for k in range(K))
        assert scores[d, 0] == pytest.approx(root, abs=1e-4)
        for c in range(n):
            weights = W @ np.concatenate([v[d], v[c]]) + b
            expected = (
                -math.inf
                if c == d
                else sum(weights[k] * a[k, d + 1, c + 1] + weights[K + k] * a[k, c + 1, d + 1] for k in range(K))
            )
            assert scores[d, c + 1] == pytest.approx(expected, abs=1e-4)


def test_uas_and_right_branching_by_loops() -> None:
    rng = np.random.default_rng(3)
    examples = [_random_example(n, rng) for n in (4, 7, 5)]
    probe = AttentionProbe(K)
    with torch.no_grad():
        probe.pair.copy_(torch.randn(2 * K))
    correct = total = rb_correct = 0
    for ex in examples:
        scores = probe(ex).detach().numpy()
        n = len(ex)
        for d in range(n):
            if not ex.scored[d]:
                continue
            total += 1
            correct += int(np.argmax(scores[d]) == ex.heads[d])
            rb_correct += int((d + 2 if d < n - 1 else 0) == ex.heads[d])
    assert probe_uas(probe, examples) == pytest.approx(correct / total)
    assert right_branching_uas(examples) == pytest.approx(rb_correct / total)


@pytest.mark.parametrize("kind", ["attention", "words"])
def test_training_learns_a_planted_head(kind: str) -> None:
    rng = np.random.default_rng(4)

    def planted(n: int) -> ProbeExample:
        ex = _random_example(n, rng)
        maps = ex.maps.float()
        for d, head in enumerate(ex.heads.tolist()):
            maps[3, d + 1] = 0.0
            maps[3, d + 1, 0 if head == 0 else head] = 1.0
        return ProbeExample(maps.half(), ex.heads, ex.scored, ex.vectors)

    train = [planted(int(n)) for n in rng.integers(3, 9, size=60)]
    dev = [planted(int(n)) for n in rng.integers(3, 9, size=20)]
    torch.manual_seed(0)
    probe = AttentionProbe(K) if kind == "attention" else AttentionWordProbe(K, 5)
    before = probe_uas(probe, dev)
    losses = train_probe(probe, train, epochs=3, lr=0.05, progress=False)
    assert losses[-1] < losses[0]
    assert probe_uas(probe, dev) > 0.95 > before
    assert not probe.training
