"""Property: the ablation's per-configuration metric (baseline, every single head, every layer; "zero" and
"uniform" modes) does not depend on ``batch_size`` or ``configs_per_batch`` and equals a plain evaluation, one
example at a time and unpadded, with the heads disabled by hooks written here (not bertwatch's capture).

Hypothesis generates the evaluation sets: 3 to 9 examples of 1 to 24 word pieces, single texts or pairs, random
labels. Accuracy (a count) is compared exactly, except for examples whose logit margin is within float32 rounding
of zero: those may go either way, so the sweep's accuracy must lie in the interval they leave open. Pearson (a
regression head, continuous) is compared within a bound derived from float32 rounding of the predictions.

Cases: a third of the active hypothesis profile's (tests/conftest.py: 10 per test in the derandomized default
that CI runs, more with ``--hypothesis-profile=thorough``); a failure prints the blob that replays it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertwatch.ablation import sweep as SW
from tests.support.models import lively, tiny_model

LAYERS, HEADS = 3, 4
EPS32 = float(np.finfo(np.float32).eps)
#: Rounding steps a 3-layer float32 forward may accumulate in one output (padding, batch shape and stacking
#: change the order of the sums): the tolerance is this many float32 epsilons of the quantity's scale.
ULPS = 256
#: Each case runs the sweep twice and the plain loop once: a third of the profile's cases.
PROPERTY = settings(
    max_examples=max(2, settings.default.max_examples // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
#: (batch_size, configs_per_batch) pairs: one example a batch and one configuration a forward, odd sizes that
#: leave a ragged last batch, everything in one forward.
LAYOUTS = st.tuples(st.sampled_from([1, 2, 3, 5, 64]), st.sampled_from([1, 2, 7, 64]))


@pytest.fixture(scope="module")
def classifier() -> torch.nn.Module:
    return lively(tiny_model("bert")).eval()


@pytest.fixture(scope="module")
def regressor() -> torch.nn.Module:
    model = tiny_model("bert")
    model.config.num_labels = model.num_labels = 1
    torch.manual_seed(1)
    model.classifier = torch.nn.Linear(model.config.hidden_size, 1)
    return lively(model).eval()


@st.composite
def eval_sets(draw, regression: bool) -> list[dict]:
    """Tokenized examples ([CLS]=2, [SEP]=3, ids 5..119), all single texts or all pairs, with labels."""
    count = draw(st.integers(3, 9))
    pairs = draw(st.booleans())
    pieces = st.lists(st.integers(5, 119), min_size=1, max_size=24)
    out = []
    for _ in range(count):
        first = draw(pieces)
        ids, types = [2, *first, 3], [0] * (len(first) + 2)
        if pairs:
            second = draw(pieces)
            ids, types = ids + [*second, 3], types + [1] * (len(second) + 1)
        label = draw(st.floats(-2, 2, allow_nan=False, width=32)) if regression else draw(st.integers(0, 1))
        out.append({"input_ids": ids, "token_type_ids": types, "label": label})
    return out


def _masks() -> dict[str, np.ndarray]:
    """The sweep's configurations: nothing disabled, each head alone, each whole layer."""
    out = {"baseline": np.zeros((LAYERS, HEADS), dtype=bool)}
    for layer in range(LAYERS):
        whole = np.zeros((LAYERS, HEADS), dtype=bool)
        whole[layer] = True
        out[f"layer {layer}"] = whole
        for head in range(HEADS):
            one = np.zeros((LAYERS, HEADS), dtype=bool)
            one[layer, head] = True
            out[f"head {layer},{head}"] = one
    return out


def _plain_outputs(model: torch.nn.Module, examples: list[dict], mask: np.ndarray, mode: str) -> np.ndarray:
    """``[n, labels]`` float64 outputs, one unpadded example per forward; a disabled head's slice of the context
    (the input of each layer's attention output projection) is zeroed ("zero", Michel et al.) or replaced by the
    mean of its value vectors over the example's tokens ("uniform": attention 1/n on every token, Kovaleva et al.)."""
    size = model.config.hidden_size // HEADS
    hooks, values = [], {}
    for layer, block in enumerate(model.bert.encoder.layer):

        def keep_values(module, args, output, layer=layer):
            values[layer] = output

        def disable(module, args, layer=layer):
            context = args[0].clone()
            for head in np.flatnonzero(mask[layer]):
                part = slice(head * size, (head + 1) * size)
                if mode == "zero":
                    context[..., part] = 0
                else:
                    context[..., part] = values[layer][..., part].mean(dim=1, keepdim=True)
            return (context,)

        hooks.append(block.attention.self.value.register_forward_hook(keep_values))
        hooks.append(block.attention.output.dense.register_forward_pre_hook(disable))
    try:
        rows = []
        with torch.inference_mode():
            for e in examples:
                inputs = {k: torch.tensor([e[k]]) for k in ("input_ids", "token_type_ids")}
                rows.append(model(**inputs).logits[0].double().numpy())
    finally:
        for hook in hooks:
            hook.remove()
    return np.stack(rows)


def _sweep(model: torch.nn.Module, examples: list[dict], mode: str, layout: tuple[int, int], task: str | None):
    batch_size, configs_per_batch = layout
    result = SW.ablate(
        model,
        examples,
        None,
        task=task,
        mode=mode,
        batch_size=batch_size,
        configs_per_batch=configs_per_batch,
        n_resamples=1,
        keep_only=False,
        prune=False,
        progress=False,
        resume=False,
    )
    return {"baseline": result.baseline} | {
        name: float(result.layers[int(name.split()[1]), 0])
        if name.startswith("layer")
        else float(result.heads[tuple(int(x) for x in name.split()[1].split(","))][0])
        for name in _masks()
        if name != "baseline"
    }


def _accuracy_bounds(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """The accuracy every float32 evaluation of these examples must give: examples whose margin exceeds the
    rounding bound count as the plain loop says; the others may go either way."""
    margin = logits[:, 1] - logits[:, 0]
    tie = np.abs(margin) <= ULPS * EPS32 * (1.0 + np.abs(logits).sum(axis=1))
    sure = np.sum(~tie & ((margin > 0).astype(int) == labels))
    return sure / len(labels), (sure + tie.sum()) / len(labels)


def _pearson_bound(predictions: np.ndarray) -> float:
    """|Δr| ≤ 2‖δ‖ / ‖p − p̄‖ for predictions moved by δ, each |δ_i| at most ULPS float32 epsilons of max |p|."""
    spread = np.linalg.norm(predictions - predictions.mean())
    return 2 * np.sqrt(len(predictions)) * ULPS * EPS32 * np.abs(predictions).max() / spread


@pytest.mark.fast
@PROPERTY
@given(examples=eval_sets(regression=False), mode=st.sampled_from(["zero", "uniform"]), a=LAYOUTS, b=LAYOUTS)
def test_accuracy_per_configuration_is_batch_invariant_and_plain(classifier, examples, mode, a, b) -> None:
    labels = np.array([e["label"] for e in examples])
    swept = [_sweep(classifier, examples, mode, layout, None) for layout in (a, b)]
    for name, mask in _masks().items():
        low, high = _accuracy_bounds(_plain_outputs(classifier, examples, mask, mode), labels)
        for layout, got in zip((a, b), swept):
            assert low - 1e-12 <= got[name] <= high + 1e-12, (name, mode, layout, got[name], (low, high))
        if low == high:
            assert swept[0][name] == swept[1][name], (name, mode, a, b)


@pytest.mark.fast
@PROPERTY
@given(examples=eval_sets(regression=True), mode=st.sampled_from(["zero", "uniform"]), a=LAYOUTS, b=LAYOUTS)
def test_pearson_per_configuration_is_batch_invariant_and_plain(regressor, examples, mode, a, b) -> None:
    from hypothesis import assume

    labels = np.array([e["label"] for e in examples], dtype=np.float64)
    assume(np.ptp(labels) > 1e-3)
    plain = {name: _plain_outputs(regressor, examples, mask, mode)[:, 0] for name, mask in _masks().items()}
    assume(all(np.ptp(p) > 1e-3 * (1 + np.abs(p).max()) for p in plain.values()))
    swept = [_sweep(regressor, examples, mode, layout, "stsb") for layout in (a, b)]
    for name, predictions in plain.items():
        expected = float(np.corrcoef(predictions, labels)[0, 1])
        bound = _pearson_bound(predictions)
        for layout, got in zip((a, b), swept):
            assert abs(got[name] - expected) <= bound, (name, mode, layout, got[name], expected, bound)
        assert abs(swept[0][name] - swept[1][name]) <= 2 * bound, (name, mode, a, b)
