"""What the GPU benchmarks share: BERT-shaped random encoders, a synthetic tokenizer and fixed-length data.

Random weights are fine for timing. ``tiny`` is the CPU fallback, so that the scripts can be smoke-tested
without a GPU (its figures say nothing about a GPU).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","]


@dataclass(frozen=True)
class Shape:
    layers: int
    heads: int
    hidden: int
    intermediate: int
    vocab: int = 30522


SHAPES = {
    "bert-base": Shape(12, 12, 768, 3072),
    "bert-large": Shape(24, 16, 1024, 4096),
    "tiny": Shape(2, 4, 64, 128, vocab=512),
}


def device_and_dtype(requested: str | None) -> tuple[torch.device, torch.dtype]:
    """CUDA with bfloat16 when there is a GPU (or ``requested="cuda"``); else the CPU in float32."""
    use_cuda = torch.cuda.is_available() if requested is None else requested == "cuda"
    return (torch.device("cuda"), torch.bfloat16) if use_cuda else (torch.device("cpu"), torch.float32)


def tokenizer_for(shape: Shape):
    """A BERT tokenizer over ``[specials] + w7 ... w{vocab-1}`` (ids are positions, so random ids are words)."""
    import transformers as T

    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), shape.vocab)})
    return T.BertTokenizer(vocab=vocab)


def random_classifier(shape: Shape, max_length: int, attn: str = "sdpa", seed: int = 0):
    """A randomly initialised BertForSequenceClassification of ``shape`` (two labels), dropout as in BERT."""
    import transformers as T

    torch.manual_seed(seed)
    config = T.BertConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=max(512, max_length),
        num_labels=2,
        pad_token_id=0,
        attn_implementation=attn,
    )
    return T.BertForSequenceClassification(config)


def random_rows(shape: Shape, count: int, length: int, seed: int = 0) -> list[dict]:
    """``count`` examples of exactly ``length`` tokens: [CLS] random words [SEP], a random label each."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(SPECIAL), shape.vocab, (count, length - 2), generator=g)
    labels = torch.randint(0, 2, (count,), generator=g)
    return [
        {"input_ids": [2] + row.tolist() + [3], "attention_mask": [1] * length, "label": int(label)}
        for row, label in zip(ids, labels)
    ]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device):
    """``(value, seconds)`` of ``fn()``, with the device's queued work finished on both sides."""
    synchronize(device)
    start = time.perf_counter()
    value = fn()
    synchronize(device)
    return value, time.perf_counter() - start


def run_grid(opts, bench_one) -> int:
    """Run ``bench_one(shape, length, opts, device, dtype)`` over every shape and length, print each line of figures
    as JSON, and write them all to ``opts.json`` when given."""
    if opts.threads:
        torch.set_num_threads(opts.threads)
    device, dtype = device_and_dtype(opts.device)
    results = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype).replace("torch.", ""),
        "torch": torch.__version__,
        "runs": [],
    }
    for name in opts.shapes:
        for length in opts.seqs:
            figures = bench_one(name, length, opts, device, dtype)
            results["runs"].append(figures)
            print(json.dumps(figures), flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0
