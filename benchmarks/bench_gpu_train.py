"""Training-time overhead of BertWatchCallback at its defaults on BERT-shaped random encoders, bf16, on a GPU.

    python benchmarks/bench_gpu_train.py                         # bert-base and bert-large, seq 128 and 512
    python benchmarks/bench_gpu_train.py --shapes tiny --seqs 32 --steps 20 --repeats 1   # CPU smoke test

For each shape and sequence length a randomly initialised BertForSequenceClassification (SDPA attention, the
Trainer's ``bf16=True``) is fine-tuned for ``--steps`` steps on random examples of exactly that length, with and
without ``BertWatchCallback()`` at its defaults (32 probe examples from the eval set, statistics at step 0, the end
and between them as ``overhead_budget=0.02`` allows, gradient statistics included) and with a pinned
``every_n_steps=50``, alternating the order over ``--repeats`` after one warm-up run. Printed (JSON): the median
wall time of ``trainer.train()`` each way, ``overhead`` = with at the defaults / without (target <= 1.02 on a
GPU), ``overhead_every_50`` the same with every_n_steps=50, the seconds spent inside the callback's events, the
steps the budget measured and the peak GPU memory ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shapes import SHAPES, random_classifier, random_rows, run_grid, synchronize, tokenizer_for  # noqa: E402


class TimedCallback:
    """Forwards every Trainer event to a callback and adds up the wall time spent inside it."""

    def __init__(self, callback, device: torch.device):
        self.callback, self.device, self.seconds = callback, device, 0.0

    def __getattr__(self, name):
        method = getattr(self.callback, name)
        if not name.startswith("on_"):
            return method

        def timed(*args, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                synchronize(self.device)
                self.seconds += time.perf_counter() - start

        return timed


def train_once(name: str, length: int, steps: int, batch_size: int, watch: str | None, device, dtype) -> dict:
    """One run: ``watch`` None (no bertwatch), "budget" (the defaults) or "50" (every_n_steps=50)."""
    import transformers as T

    shape = SHAPES[name]
    tokenizer = tokenizer_for(shape)
    model = random_classifier(shape, length)
    train = random_rows(shape, steps * batch_size, length, seed=1)  # plain lists: no datasets needed
    dev = random_rows(shape, 64, length, seed=2)
    callbacks = []
    timer = None
    if watch:
        from bertwatch.callbacks import BertWatchCallback

        every = None if watch == "budget" else int(watch)
        timer = TimedCallback(BertWatchCallback(every_n_steps=every), device)
        callbacks.append(timer)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=batch_size,
            max_steps=steps,
            learning_rate=2e-5,
            logging_steps=50,
            save_strategy="no",
            report_to="none",
            seed=0,
            bf16=dtype == torch.bfloat16,
            use_cpu=device.type == "cpu",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = T.Trainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=dev,
            processing_class=tokenizer,
            data_collator=T.DataCollatorWithPadding(tokenizer),
            callbacks=callbacks,
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        synchronize(device)
        start = time.perf_counter()
        trainer.train()
        synchronize(device)
        wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan")
    measured = [f"{r.step}:{r.reason}" for r in timer.callback.pacing.log] if timer else []
    return {"wall_s": wall, "in_callback_s": timer.seconds if timer else 0.0, "peak_mib": peak, "measured": measured}


def bench_one(name: str, length: int, opts, device, dtype) -> dict:
    batch_size = opts.batch_size or (32 if length <= 128 else 8)
    train_once(name, length, min(10, opts.steps), batch_size, "budget", device, dtype)  # warm-up: kernels, caches
    kinds: list[str | None] = [None, "budget", "50"]
    runs: dict[str | None, list[dict]] = {kind: [] for kind in kinds}
    for r in range(opts.repeats):
        for watch in kinds if r % 2 == 0 else kinds[::-1]:
            runs[watch].append(train_once(name, length, opts.steps, batch_size, watch, device, dtype))

    def median(watch: str | None, key: str) -> float:
        return statistics.median(run[key] for run in runs[watch])

    return {
        "shape": name,
        "seq": length,
        "steps": opts.steps,
        "batch_size": batch_size,
        "repeats": opts.repeats,
        "train_s": {
            "without": round(median(None, "wall_s"), 3),
            "with": round(median("budget", "wall_s"), 3),
            "with_every_50": round(median("50", "wall_s"), 3),
        },
        "in_callback_s": round(median("budget", "in_callback_s"), 3),
        "overhead": round(median("budget", "wall_s") / median(None, "wall_s"), 4),
        "overhead_every_50": round(median("50", "wall_s") / median(None, "wall_s"), 4),
        "measured": runs["budget"][-1]["measured"],
        "peak_memory_ratio": round(median("budget", "peak_mib") / median(None, "peak_mib"), 3)
        if device.type == "cuda"
        else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["bert-base", "bert-large"], choices=sorted(SHAPES))
    parser.add_argument("--seqs", nargs="+", type=int, default=[128, 512])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=0, help="0: 32 at seq <= 128, else 8")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    opts = parser.parse_args(argv)
    return run_grid(opts, bench_one)


if __name__ == "__main__":
    sys.exit(main())
