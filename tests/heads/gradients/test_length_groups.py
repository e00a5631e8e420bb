"""The gradient pass in length groups: the same statistics and states as the whole batch, rows in their order, and
each example's head importance the gradient of its own loss alone (a hand-gated float64 forward, no bertwatch code);
the grouping rule against every partition; batches that cannot be cropped exactly run whole."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import transformers as T

from bertwatch.core.stat_names import MIXING_NAMES, NORM_NAMES, STAT_NAMES
from bertwatch.heads.gradients import length_groups
from bertwatch.heads.gradients.importance import check_gradients, gradient_stats
from bertwatch.heads.maps.stats import compute_stats
from bertwatch.heads.mixing.mixing_model import block_weights, mixing_stats
from bertwatch.heads.norms.norm_based import head_grams, norm_stats
from bertwatch.heads.roles import TokenRoles
from bertwatch.heads.task_heads import LossSetupError, fixed_mask, head_kind
from tests.support.models import tiny_config, tiny_model
from tests.support.tolerance import assert_float32_close

LENGTHS = (12, 4, 9, 5, 11, 3, 9)  # not sorted: rows come back in this order
WHOLE = 10**9  # a forward cost no split beats: one group
CPU = torch.device("cpu")


def _batch(lengths=LENGTHS, width: int = 12, seed: int = 0) -> tuple[dict[str, torch.Tensor], TokenRoles]:
    """Right-padded random ids (real tokens first) and their roles: [CLS] first, [SEP] last, "," at 2."""
    g = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    ids = torch.randint(5, 120, (rows, width), generator=g)
    real = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    ids = ids.masked_fill(~real, 0)
    cls, sep, punct = torch.zeros_like(real), torch.zeros_like(real), torch.zeros_like(real)
    cls[:, 0] = True
    sep[torch.arange(rows), torch.tensor(lengths) - 1] = True
    punct[:, 2] = real[:, 2] & ~sep[:, 2]
    batch = {"input_ids": ids, "attention_mask": real.long()}
    return batch, TokenRoles(real, cls, sep, punct)


def _labels(model, batch: dict[str, torch.Tensor], seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    kind = head_kind(model)
    mask = batch["attention_mask"]
    if kind == "masked-lm":
        masked, labels = fixed_mask(batch["input_ids"], mask, 4, special_ids=(0,), seed=seed)
        return {**batch, "input_ids": masked, "labels": labels}
    if kind == "token-classification":
        labels = torch.randint(0, 2, mask.shape, generator=g).masked_fill(mask == 0, -100)
        return {**batch, "labels": labels}
    return {**batch, "labels": torch.randint(0, 2, (mask.shape[0],), generator=g)}


def _model(kind: str, model_type: str = "bert", dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    auto = {"token": T.AutoModelForTokenClassification, "mlm": T.AutoModelForMaskedLM}
    if kind == "sequence":
        model = tiny_model(model_type)
    else:
        model = auto[kind].from_config(tiny_config(model_type)).eval()
    return model.to(dtype)


def _run(monkeypatch, cost: float, *args, **kwargs):
    monkeypatch.setattr(length_groups, "FORWARD_COST", cost)
    return gradient_stats(*args, **kwargs)


def _split(batch, roles, model) -> int:
    groups = length_groups.groups_for(batch, roles.real, head_kind(model), CPU)
    return 0 if groups is None else len(groups)


def _assert_close(got: torch.Tensor, want: torch.Tensor, msg: str = "") -> None:
    """Float32 rounding of the quantity's own size; NaN where the whole pass gives NaN."""
    finite = want[torch.isfinite(want)]
    scale = float(finite.abs().max()) if finite.numel() else 1.0
    assert_float32_close(got, want, scale=scale, msg=msg)


@pytest.mark.parametrize(
    ("kind", "model_type"),
    [("sequence", "bert"), ("sequence", "roberta"), ("sequence", "distilbert"), ("token", "bert"), ("mlm", "bert")],
)
def test_groups_give_the_statistics_of_the_whole_batch(monkeypatch, kind, model_type) -> None:
    model = _model(kind, model_type)
    batch, roles = _batch()
    labelled = _labels(model, batch)
    whole = _run(monkeypatch, WHOLE, model, labelled, roles)
    monkeypatch.setattr(length_groups, "FORWARD_COST", 0)
    assert _split(labelled, roles, model) == len(set(LENGTHS))  # every length its own group
    for cost in (0, 6):
        monkeypatch.setattr(length_groups, "FORWARD_COST", cost)
        split = gradient_stats(model, labelled, roles)
        assert set(split) == set(whole)
        for name in whole:
            _assert_close(split[name], whole[name], msg=f"{name} at cost {cost}")


def test_a_loss_fn_is_taken_per_group(monkeypatch) -> None:
    model = _model("sequence")
    batch, roles = _batch()
    labelled = _labels(model, batch)

    def loss_fn(outputs, batch):
        return 3 * torch.nn.functional.cross_entropy(outputs.logits, batch["labels"], reduction="none")

    whole = _run(monkeypatch, WHOLE, model, labelled, roles, loss_fn=loss_fn)
    split = _run(monkeypatch, 0, model, labelled, roles, loss_fn=loss_fn)
    for name in whole:
        _assert_close(split[name], whole[name], msg=name)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_merged_states_give_the_statistics_of_the_whole_batch(monkeypatch, model_type) -> None:
    """Maps, value states, contexts, logit summary and attention blocks merged from the groups: every statistic
    the probe pass takes from them (maps, norms, mixing, logits) is the whole batch's."""
    model = _model("sequence", model_type)
    batch, roles = _batch()
    labelled = _labels(model, batch)
    kwargs = {"return_states": True, "record_blocks": True}
    whole = _run(monkeypatch, WHOLE, model, labelled, roles, **kwargs)
    split = _run(monkeypatch, 0, model, labelled, roles, **kwargs)
    _, maps, values, contexts, logits, blocks = split
    _, maps_w, values_w, contexts_w, logits_w, blocks_w = whole
    rows, length = roles.real.shape
    assert maps.shape == maps_w.shape and values.shape == values_w.shape and contexts.shape == contexts_w.shape
    assert blocks.complete and blocks.residuals.shape == blocks_w.residuals.shape == blocks.mixed.shape
    assert not any(t.requires_grad for t in (maps, values, contexts, blocks.residuals, blocks.mixed))
    both = roles.real[:, None, None, :, None] & roles.real[:, None, None, None, :]
    _assert_close(maps[both.expand_as(maps)], maps_w[both.expand_as(maps_w)], "maps")
    assert bool((maps[~both.expand_as(maps)].abs() <= 1).all())
    keys = roles.real[:, None, None, :, None].expand_as(values)
    _assert_close(values[keys], values_w[keys], "values")
    _assert_close(contexts[keys], contexts_w[keys], "contexts")
    tokens = roles.real[:, None, :, None].expand_as(blocks.residuals)
    _assert_close(blocks.residuals[tokens], blocks_w.residuals[tokens], "residuals")
    _assert_close(blocks.mixed[tokens], blocks_w.mixed[tokens], "mixed")
    assert set(logits) == set(logits_w) == {"max_logit", "logit_std"}
    for name in logits:
        _assert_close(logits[name], logits_w[name], name)
    derived = {
        "maps": (compute_stats(maps, roles, STAT_NAMES), compute_stats(maps_w, roles, STAT_NAMES)),
        "norms": tuple(
            norm_stats(m, v, head_grams(model), roles, NORM_NAMES, c)
            for m, v, c in ((maps, values, contexts), (maps_w, values_w, contexts_w))
        ),  # fmt: skip
        "mixing": tuple(
            mixing_stats(m, v, b.residuals, block_weights(model), roles, MIXING_NAMES, b.mixed)
            for m, v, b in ((maps, values, blocks), (maps_w, values_w, blocks_w))
        ),  # fmt: skip
    }
    for family, (got, want) in derived.items():
        for name in want:
            _assert_close(got[name], want[name], f"{family}: {name}")


def _hand_gated_importance(model, example: dict[str, torch.Tensor]) -> np.ndarray:
    """abs(d loss / d gate) of one example alone, float64: a forward hook scales each head's context by its gate on
    the self-attention module's output (no bertwatch code); the loss is the model's own."""
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    gate = torch.ones(layers, heads, dtype=torch.float64, requires_grad=True)

    def hook(layer):
        def scale(module, args, output):
            context = output[0]
            gated = context.reshape(*context.shape[:-1], heads, -1) * gate[layer][:, None]
            return (gated.reshape(context.shape), *output[1:])

        return scale

    attention = [layer.attention.self for layer in model.base_model.encoder.layer]
    handles = [module.register_forward_hook(hook(l)) for l, module in enumerate(attention)]
    try:
        (grad,) = torch.autograd.grad(model(**example).loss, gate)
    finally:
        for handle in handles:
            handle.remove()
    return grad.abs().numpy()


@pytest.mark.parametrize("kind", ["sequence", "token", "mlm"])
def test_each_examples_importance_is_its_own_loss_gradient_alone(monkeypatch, kind) -> None:
    model = _model(kind, dtype=torch.float64)
    batch, roles = _batch()
    labelled = _labels(model, batch)
    got = _run(monkeypatch, 0, model, labelled, roles)["head_importance"]
    for b, n in enumerate(LENGTHS):
        labels = labelled["labels"][b : b + 1, :n] if kind != "sequence" else labelled["labels"][b : b + 1]
        example = {"input_ids": labelled["input_ids"][b : b + 1, :n], "labels": labels}
        want = _hand_gated_importance(model, example)
        if not np.isfinite(got[b].numpy()).all():  # no labelled token: the example has no loss
            assert kind != "sequence" and bool((labels == -100).all())
            continue
        assert_float32_close(got[b], want, scale=float(np.abs(want).max()), msg=f"example {b}")


def test_the_example_loss_path_runs_each_example_cropped() -> None:
    model = _model("sequence", dtype=torch.float64)
    batch, roles = _batch()
    labelled = _labels(model, batch)
    seen = []

    def example_loss(inputs):
        seen.append(tuple(inputs["input_ids"].shape))
        return model(**inputs).loss

    stats, maps = gradient_stats(model, labelled, roles, example_loss=example_loss, return_attentions=True)
    assert seen == [(1, n) for n in LENGTHS]
    assert maps.shape[-1] == maps.shape[-2] == roles.real.shape[1]
    for b, n in enumerate(LENGTHS):
        example = {"input_ids": labelled["input_ids"][b : b + 1, :n], "labels": labelled["labels"][b : b + 1]}
        want = _hand_gated_importance(model, example)
        assert_float32_close(stats["head_importance"][b], want, scale=float(np.abs(want).max()), msg=f"example {b}")
        assert bool((maps[b, ..., n:, :] == 0).all()) and bool((maps[b, ..., :, n:] == 0).all())
        assert_float32_close(maps[b, ..., :n, :].sum(-1), torch.ones(maps.shape[1:4][:2] + (n,)))


@pytest.mark.parametrize("loss", ["model", "loss_fn", "example_loss"])
def test_the_setup_check_runs_each_batch_as_the_gradient_pass_runs_it(monkeypatch, loss) -> None:
    """check_gradients checks the batches the pass will run (its length groups, or each example cropped alone),
    each once: the model sees the same shapes in the check as in the pass (and, for a loss_fn, the whole batch,
    which its losses in the groups are compared with)."""
    monkeypatch.setattr(length_groups, "FORWARD_COST", 1.0)
    model = _model("sequence")
    batch, roles = _batch()
    labelled = _labels(model, batch)
    seen: list[tuple[int, ...]] = []
    handle = model.register_forward_pre_hook(
        lambda _, args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    extra = {
        "model": {},
        "loss_fn": {
            "loss_fn": lambda out, b: torch.nn.functional.cross_entropy(out.logits, b["labels"], reduction="none")
        },
        "example_loss": {"example_loss": lambda inputs: model(**inputs).loss},
    }[loss]
    check_gradients(model, [labelled], **extra)
    checked, seen[:] = list(seen), []
    gradient_stats(model, labelled, roles, **extra)
    handle.remove()
    whole = [tuple(labelled["input_ids"].shape)] if loss == "loss_fn" else []  # a loss_fn is also run on the whole
    assert checked == seen + whole and len(seen) >= 2
    assert sorted(width for _, width in seen) != [max(LENGTHS)] * len(seen)  # cropped, not whole


def test_a_loss_fn_that_reads_padding_is_refused_at_setup(monkeypatch) -> None:
    """A loss_fn whose value for an example moves with its batch's padding (here a token loss averaged over every
    position, pad positions included) would make the grouped pass measure another loss than the whole batch: the
    setup check refuses it, and accepts the same loss averaged over the labelled tokens."""
    monkeypatch.setattr(length_groups, "FORWARD_COST", 1.0)
    model = _model("token")
    batch, roles = _batch()
    labelled = _labels(model, batch)
    assert _split(labelled, roles, model) >= 2

    def token_losses(outputs, b):
        return torch.nn.functional.cross_entropy(outputs.logits.transpose(1, 2), b["labels"], reduction="none")

    def over_labelled(outputs, b):
        return token_losses(outputs, b).sum(-1) / (b["labels"] != -100).sum(-1)

    check_gradients(model, [labelled], loss_fn=over_labelled)
    with pytest.raises(LossSetupError, match="padding"):
        check_gradients(model, [labelled], loss_fn=lambda o, b: token_losses(o, b).mean(-1))


def test_a_loss_fn_that_reads_other_examples_is_refused_where_the_pass_runs_whole(monkeypatch) -> None:
    """Where the batch runs whole (one group here; a GPU), the check compares the whole batch with its halves: a loss
    scaled by the batch's mean (an example's loss depends on the others) is refused, the plain per-example loss
    passes, and the model sees the whole batch, then its halves."""
    monkeypatch.setattr(length_groups, "FORWARD_COST", WHOLE)
    model = _model("sequence")
    batch, roles = _batch()
    labelled = _labels(model, batch)
    assert _split(labelled, roles, model) == 0

    def per_example(outputs, b):
        return torch.nn.functional.cross_entropy(outputs.logits, b["labels"], reduction="none")

    seen: list[int] = []
    handle = model.register_forward_pre_hook(
        lambda _, args, kwargs: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    check_gradients(model, [labelled], loss_fn=per_example)
    handle.remove()
    rows = len(LENGTHS)
    assert seen == [rows, rows // 2, rows - rows // 2]
    with pytest.raises(LossSetupError, match="other examples"):
        check_gradients(model, [labelled], loss_fn=lambda o, b: per_example(o, b) / per_example(o, b).mean())


def test_a_batch_that_cannot_be_cropped_runs_whole(monkeypatch) -> None:
    """Left padding (real tokens last) is not cropped: each example's importance is still the gradient of its own
    loss on its row as given (mask and all), alone."""
    model = _model("sequence", dtype=torch.float64)
    batch, roles = _batch()
    labelled = _labels(model, batch)
    monkeypatch.setattr(length_groups, "FORWARD_COST", 0)
    left = {k: torch.flip(v, [1]) if v.dim() == 2 else v for k, v in labelled.items()}
    left_roles = TokenRoles(*(torch.flip(r, [1]) for r in (roles.real, roles.cls, roles.sep, roles.punct)))
    assert _split(left, left_roles, model) == 0
    got = gradient_stats(model, left, left_roles)["head_importance"]
    for b in range(len(LENGTHS)):
        want = _hand_gated_importance(model, {k: v[b : b + 1] for k, v in left.items()})
        assert_float32_close(got[b], want, scale=float(np.abs(want).max()), msg=f"example {b}")
    kind = "token-classification"
    tokens = {**batch, "labels": torch.zeros_like(batch["input_ids"])}  # a label on a pad position: not ignored
    assert length_groups.widths(tokens, roles.real, kind) is None
    ignored = {**batch, "labels": torch.zeros_like(batch["input_ids"]).masked_fill(~roles.real, -100)}
    assert length_groups.widths(ignored, roles.real, kind) == list(LENGTHS)
    assert length_groups.widths(batch, roles.real, "question-answering") is None  # its loss sees every position
    assert length_groups.widths(batch, roles.real, "multiple-choice") is None
    choices = {k: v[None].repeat(2, 1, 1) for k, v in batch.items()}
    assert length_groups.widths(choices, roles.real, "sequence-classification") is None
    empty = roles.real.clone()
    empty[1] = False
    assert length_groups.widths({**batch, "attention_mask": empty.long()}, empty, "sequence-classification") is None
    other = TokenRoles(roles.real.clone(), roles.cls, roles.sep, roles.punct)
    other.real[0, -1] = False  # the mask says otherwise
    assert length_groups.widths(batch, other.real, "sequence-classification") is None


def test_groups_need_a_labelled_example_each(monkeypatch) -> None:
    model = _model("sequence")
    batch, roles = _batch()
    labels = torch.tensor([1, -100, 0, -100, 1, -100, 0])  # rows of length 3, 4, 5 unlabelled
    monkeypatch.setattr(length_groups, "FORWARD_COST", 0)
    assert length_groups.groups_for({**batch, "labels": labels}, roles.real, head_kind(model), CPU) is None
    got = gradient_stats(model, {**batch, "labels": labels}, roles)
    assert bool(torch.isnan(got["head_importance"][labels == -100]).all())
    assert bool(torch.isfinite(got["head_importance"][labels != -100]).all())
    assert length_groups.groups_for(batch, roles.real, head_kind(model), torch.device("meta")) is None


def _brute_force(lengths: list[int], cost: float) -> float:
    """The least Σ (longest × rows) + cost over every partition of the rows (not only contiguous ones)."""
    best = float("inf")
    rows = list(range(len(lengths)))

    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for smaller in partitions(rest):
            for k in range(len(smaller)):
                yield smaller[:k] + [[first, *smaller[k]]] + smaller[k + 1 :]
            yield [[first], *smaller]

    for partition in partitions(rows):
        best = min(best, sum(max(lengths[r] for r in g) * len(g) + cost for g in partition))
    return best


@pytest.mark.parametrize("cost", [0, 3, 20, 50, 1000])
def test_the_grouping_is_the_cheapest_partition(cost) -> None:
    g = torch.Generator().manual_seed(cost)
    for size in (1, 2, 5, 7):
        lengths = torch.randint(3, 45, (size,), generator=g).tolist()
        groups = length_groups.plan_groups(lengths, cost)
        assert sorted(itertools.chain(*groups)) == list(range(size))
        spent = sum(max(lengths[r] for r in group) * len(group) + cost for group in groups)
        assert spent == _brute_force(lengths, cost)
    assert length_groups.plan_groups([12, 28, 26, 40], 10**9) == [[0, 2, 1, 3]]
    assert length_groups.plan_groups([5, 3, 5, 3], 0) == [[1, 3], [0, 2]]
