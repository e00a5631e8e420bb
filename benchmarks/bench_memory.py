"""Peak memory of a long-text fine-tune with and without BertWatchCallback, and one probe pass against a step.

The packaged MiniLM (6 x 12 heads) fine-tuned at batch ``--batch-size`` on examples of exactly ``--length``
tokens, for ``--steps`` optimiser steps, with and without ``BertWatchCallback(probe_texts=...)`` at its defaults
but for ``probing=ProbeOptions(max_length=--length)``: 32 labelled probe texts, each cut to ``--length`` tokens (so
every probe example is as long as a training example). Each run is a fresh process, alternating over
``--repeats``; on a CPU the peak is the process's peak resident memory (``ru_maxrss``), on CUDA
``torch.cuda.max_memory_allocated``.

    python benchmarks/bench_memory.py --length 512 --batch-size 8 --steps 4 --repeats 1 --threads 2

Prints each run's peak, the peak-memory ratio (target <= 1.10 at 512 tokens), the median training step's seconds
without bertwatch, step 0's probe pass (the start probe, which also takes the drift reference) and the end's, and
the ratio pass / training step. ``--model`` takes another model's folder (``benchmarks/_shapes.py``'s random
shapes are in ``gpu_check.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import minilm_path, peak_mib  # noqa: E402

_STORY = "the film opens slowly , and the actors , all of them good , carry a thin plot to its end ."


def long_texts(count: int, words: int) -> list[dict]:
    """``count`` labelled texts of about ``words`` words each, alike but not equal."""
    base = _STORY.split()
    return [{"text": " ".join(base[(i + k) % len(base)] for k in range(words)), "label": i % 2} for i in range(count)]


class StepClock:
    """A Trainer callback that records each optimiser step's wall time (``on_step_begin`` to ``on_step_end``)."""

    def __init__(self):
        from transformers import TrainerCallback

        clock = self

        class _Clock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                clock.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                clock.steps.append(time.perf_counter() - clock.start)

        self.start, self.steps, self.callback = 0.0, [], _Clock()


def worker(opts: argparse.Namespace) -> dict:
    """One fine-tuning run; its peak memory, step times and (with the callback) its passes' seconds."""
    import torch
    import transformers as T
    from bench_overhead import _Timed

    if opts.threads:
        torch.set_num_threads(opts.threads)
    tokenizer = T.AutoTokenizer.from_pretrained(opts.model)
    model = T.AutoModelForSequenceClassification.from_pretrained(opts.model, num_labels=2)
    encoded = tokenizer([t["text"] for t in long_texts(opts.batch_size * opts.steps, 600)], truncation=True,
                        max_length=opts.length)  # fmt: skip
    train = [{"input_ids": ids, "label": i % 2} for i, ids in enumerate(encoded["input_ids"])]
    clock = StepClock()
    callbacks: list = [clock.callback]
    timer = None
    if opts.callback:
        from bertwatch.callbacks import BertWatchCallback
        from bertwatch.options.groups import ProbeOptions

        probe = BertWatchCallback(
            probe_texts=long_texts(32, 600), probing=ProbeOptions(max_length=opts.length), quiet=True
        )
        timer = _Timed(probe)
        callbacks.append(timer)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=opts.batch_size, max_steps=opts.steps, learning_rate=5e-5,
            save_strategy="no", report_to="none", seed=0, use_cpu=opts.device == "cpu", disable_tqdm=True,
            dataloader_num_workers=0, logging_steps=1000,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train, processing_class=tokenizer,
            data_collator=T.DataCollatorWithPadding(tokenizer), callbacks=callbacks,
        )  # fmt: skip
        if opts.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
    peak = peak_mib(opts.device)
    return {
        "callback": opts.callback,
        "wall_s": wall,
        "peak_mib": peak,
        "step_s": clock.steps,
        "parts_s": {k: round(v, 3) for k, v in timer.parts.items()} if timer is not None else {},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="a model's folder (default: the packaged MiniLM)")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callback", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    opts.model = opts.model or minilm_path()
    if opts.worker:
        print("RESULT " + json.dumps(worker(opts)), flush=True)
        return 0
    base = [sys.executable, os.path.abspath(__file__), "--worker", "--model", opts.model, "--length",
            str(opts.length), "--batch-size", str(opts.batch_size), "--steps", str(opts.steps), "--threads",
            str(opts.threads), "--device", opts.device]  # fmt: skip
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(opts.repeats):
        for on in (False, True) if r % 2 == 0 else (True, False):
            proc = subprocess.run(base + (["--callback"] if on else []), capture_output=True, text=True)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
                raise SystemExit(f"benchmark run failed (callback={on})")
            runs[on].append(json.loads(lines[-1][len("RESULT ") :]))
            print(f"{'with' if on else 'without'}: peak {runs[on][-1]['peak_mib']:.0f} MiB", flush=True)
    report(opts, runs)
    return 0


def report(opts: argparse.Namespace, runs: dict[bool, list[dict]]) -> None:
    """The ratios of the runs with the callback against those without."""

    def med(on: bool, key: str) -> float:
        return statistics.median(r[key] for r in runs[on])

    steps = [s for r in runs[False] for s in r["step_s"][1:]] or [s for r in runs[False] for s in r["step_s"]]
    step = statistics.median(steps)
    start = statistics.median(r["parts_s"]["step 0"] for r in runs[True])
    end = statistics.median(r["parts_s"]["end"] for r in runs[True])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n{Path(opts.model).name}, {opts.device}, batch {opts.batch_size} x {opts.length} tokens, {opts.steps} steps, "
        f"32 probe texts of {opts.length} tokens, {opts.repeats} repeats, load average {load}"
    )
    print(f"peak memory: without {med(False, 'peak_mib'):.0f} MiB, with {med(True, 'peak_mib'):.0f} MiB")
    print(f"peak-memory ratio: {med(True, 'peak_mib') / med(False, 'peak_mib'):.3f}  (target <= 1.10)")
    print(
        f"training step {step:.2f} s; step 0's pass {start:.2f} s ({start / step:.1f} steps), the end's {end:.2f} s "
        f"({end / step:.1f} steps)"
    )


if __name__ == "__main__":
    sys.exit(main())
