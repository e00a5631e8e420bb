"""``bertwatch.ship.delimiters``: each head's attention on [CLS], [SEP] and "."/"," by weight and by norm, equal to
a plain float64 loop over each example run alone (eager attention, the value vectors through the head's slice of
the output projection); the heads ranked as a brute force ranks them; the float side's outliers unchanged."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from bertwatch.heads.roles import token_roles
from bertwatch.ship.delimiters import DELIMITER_NAMES, delimiter_heads, float_side, top_heads
from bertwatch.ship.runtime import encode
from tests.support.ship_models import lively_classifier
from tests.support.tiny_trainer import toy_texts


def _plain(model, tokenizer, example) -> dict[str, np.ndarray]:
    """The six grids ``[layers, heads]`` of one example alone, in float64 loops."""
    feed = {k: torch.as_tensor(v) for k, v in encode(tokenizer, [example], 64).items()}
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**feed, output_attentions=True, output_hidden_states=True)
    ids = feed["input_ids"][0].tolist()
    n = len(ids)
    sets = {
        "cls": [j for j in range(n) if ids[j] == tokenizer.cls_token_id],
        "sep": [j for j in range(n) if ids[j] == tokenizer.sep_token_id],
        "punct": [j for j in range(n) if ids[j] in tokenizer.convert_tokens_to_ids([".", ","])],
    }
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    d = model.config.hidden_size // heads
    grids = {name: np.zeros((layers, heads)) for name in DELIMITER_NAMES}
    for layer in range(layers):
        block = model.bert.encoder.layer[layer].attention
        x = out.hidden_states[layer][0].double().detach()
        values = x @ block.self.value.weight.detach().double().T + block.self.value.bias.detach().double()
        w_out = block.output.dense.weight.detach().double()
        for head in range(heads):
            a = out.attentions[layer][0, head].double().numpy()
            f = (values[:, head * d : (head + 1) * d] @ w_out[:, head * d : (head + 1) * d].T).numpy()
            norms = [float(np.sqrt(sum(v * v for v in f[j]))) for j in range(n)]
            for part, keys in sets.items():
                weight = sum(sum(a[i, j] for j in keys) for i in range(n)) / n
                by_norm = (
                    sum(
                        sum(a[i, j] * norms[j] for j in keys) / sum(a[i, j] * norms[j] for j in range(n))
                        for i in range(n)
                    )
                    / n
                )
                grids[f"{part}_mass"][layer, head] = weight
                grids[f"{part}_mass_norm"][layer, head] = by_norm
    return grids


def test_the_head_grids_equal_a_plain_loop_on_each_example_alone() -> None:
    model, tokenizer = lively_classifier()
    singles, pairs = toy_texts(7, seed=2), toy_texts(3, seed=3, pairs=True)
    examples = singles + pairs
    batches = []
    for chunk in (singles[:4], singles[4:], pairs):  # padded batches of different lengths, two [SEP] in pairs
        inputs = {k: torch.as_tensor(v) for k, v in encode(tokenizer, chunk, 64).items()}
        batches.append((inputs, token_roles(inputs["input_ids"], inputs["attention_mask"], tokenizer)))
    got = delimiter_heads(model, batches)
    plains = [_plain(model, tokenizer, e) for e in examples]
    assert sorted(got) == sorted(DELIMITER_NAMES)
    for name in DELIMITER_NAMES:
        want = np.mean([p[name] for p in plains], axis=0)
        assert np.asarray(got[name]).shape == want.shape
        np.testing.assert_allclose(np.asarray(got[name]), want, atol=1e-5 * max(1.0, np.abs(want).max()))
    assert np.asarray(got["sep_mass"]).max() > 0.05 and np.asarray(got["punct_mass_norm"]).max() > 0.05


def test_top_heads_is_a_brute_force_ranking() -> None:
    rng = np.random.default_rng(0)
    grids = {name: rng.uniform(0, 0.3, size=(3, 5)).tolist() for name in DELIMITER_NAMES}
    got = top_heads(grids, [1, 2], count=4)
    cells = [(layer, head) for layer in (1, 2) for head in range(5)]
    weight = {c: sum(grids[n][c[0]][c[1]] for n in DELIMITER_NAMES[:3]) for c in cells}
    best = sorted(cells, key=lambda c: -weight[c])[:4]
    assert [(h["layer"], h["head"]) for h in got] == best
    for h in got:
        cell = (h["layer"], h["head"])
        assert h["by_weight"] == pytest.approx(weight[cell])
        assert h["by_norm"] == pytest.approx(sum(grids[n][cell[0]][cell[1]] for n in DELIMITER_NAMES[3:]))
    no_norms = {name: grids[name] for name in DELIMITER_NAMES[:3]}
    assert all(h["by_norm"] is None for h in top_heads(no_norms, [0]))


def test_the_float_side_holds_the_outliers_and_the_heads() -> None:
    model, tokenizer = lively_classifier()
    side = float_side(model, tokenizer, toy_texts(40, seed=4), 64)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert side["examples"] == 40 and len(side["ffn"]) == layers == len(side["residual"])
    assert all(np.asarray(grid).shape == (layers, heads) for grid in side["heads"].values())
