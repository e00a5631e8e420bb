"""Every GPU figure of docs/performance.md in one run, printed as one table (``benchmarks/gpu_check.sh``).

    bash benchmarks/gpu_check.sh                  # on a GPU: bert-base shapes, about 5 minutes on one H100
    bash benchmarks/gpu_check.sh --smoke          # tiny shapes on any device (the CPU too): the code paths only

Random BERT-shaped encoders (``_shapes.py``: no pretrained weights, no network, no ``datasets``), fine-tuned by the
``Trainer`` in bf16 on random examples of exactly their length, with and without ``BertWatchCallback`` (its probe
set: 32 examples of the eval set, as long as the training examples). Sections, in this order, each guarded (a
failure prints its row and the others still run), each row printed as it finishes:

1. ``memory``, ``pass``, ``syncs``: at 512 tokens (batch 8) and 128 (batch 32): the peak memory with / without
   bertwatch (``torch.cuda.max_memory_allocated``; targets 1.10 and 1.05), a pinned pass (``every_n_steps``, its
   statistics and writing, the median of the run's pinned passes) over the median training step (target 10), and
   the host-device synchronisations of one pass (``torch.cuda.set_sync_debug_mode("warn")``, by origin: bertwatch's
   own should be its one copy of the results; the model's forward reads its attention mask back once per call).
2. ``sweep``: the ablation sweep's configurations per second against the naive loop, stacked and not, and the
   pruning curve against the naive loop (``bench_gpu_sweep.py``; targets: batched ≥ 5 ×, pruning ≤ 0.6).
3. ``overhead``: the wall time of ``trainer.train()`` at bertwatch's defaults over the run without, a short run and
   a long one at 128 tokens (targets 1.02 for a long run) and one at 512 (1.03); the long runs' steps are scaled to
   the time left within ``--budget-s`` (the row says how many ran).

On the CPU (``--smoke``, or ``BERTWATCH_GPU_CHECK_SMOKE=1``) the same code runs on tiny shapes: the peak is the
process's resident memory (not a ratio to read) and the synchronisations are counted as bertwatch's host reads
(``.cpu()``, ``.item()``, ``float(t)``, ...) with the CPU taken for a device (``heads.host``). The table also goes to
``$OUT/gpu_check.txt`` when ``$OUT`` is set (``--out`` to choose), a row at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _shapes import SHAPES, device_and_dtype, random_classifier, random_rows, synchronize, tokenizer_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Sizes:
    """What one mode runs: the shape, (length, batch) of the memory runs, steps, the sweep's size, the budget."""

    shape: str
    memory: tuple[tuple[int, int], ...]
    memory_steps: int
    short_steps: int
    long_steps: tuple[tuple[int, int, int], ...]  # (length, batch, steps wanted)
    sweep: tuple[int, int, int]  # (length, examples, naive configurations)
    budget_s: float


FULL = Sizes("bert-base", ((512, 8), (128, 32)), 40, 100, ((128, 32, 2000), (512, 8, 600)), (128, 128, 24), 300.0)
SMOKE = Sizes("tiny", ((32, 4),), 4, 4, ((32, 4, 6),), (16, 8, 2), 240.0)


@dataclass
class Table:
    """The check's one table, printed and written (``path``) a row at a time."""

    path: Path | None
    rows: list[tuple[str, ...]] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    HEADER = ("section", "what", "figure", "target", "s")

    def start(self, device: str) -> None:
        line = f"bertwatch gpu_check on {device}, torch {torch.__version__}"
        self._emit(line + "\n" + self._line(self.HEADER) + "\n" + self._line(("---",) * len(self.HEADER)))

    def add(self, section: str, what: str, figure: str, target: str, seconds: float) -> None:
        row = (section, what, figure, target, f"{seconds:.0f}")
        self.rows.append(row)
        self._emit(self._line(row))

    @staticmethod
    def _line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(cells) + " |"

    def _emit(self, text: str) -> None:
        print(text, flush=True)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(text + "\n")

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# ------------------------------------------------------------------------------------------------ measuring


def peak_memory_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mib(device: torch.device) -> float:
    """The peak the caching allocator held since the last reset (CUDA); on the CPU the process's peak resident
    memory, which never resets (the smoke mode's stand-in: not a figure)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def count_syncs(device: torch.device, fn: Callable[[], object]) -> Counter:
    """Host-device synchronisations while ``fn`` runs, by origin ("bertwatch", "transformers", "torch", "other"):
    on CUDA each warning of ``torch.cuda.set_sync_debug_mode("warn")`` at the Python line that caused it; on the
    CPU bertwatch's host reads by kind (``bertwatch cpu``, ``bertwatch numpy``, ...: after its one copy, the
    grids' conversions read host tensors) with the CPU taken for a device whose reads stall it
    (``heads.host.HOST_DEVICES`` emptied): the path a GPU takes."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                fn()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        found = [w.filename for w in caught if "synchroniz" in str(w.message).lower()]
        return Counter(_origin(f) for f in found)
    return _host_reads(fn)


def _origin(filename: str) -> str:
    for name in ("bertwatch", "transformers", "torch"):
        if f"{os.sep}{name}{os.sep}" in filename:
            return name
    return "other"


def _host_reads(fn: Callable[[], object]) -> Counter:
    """:func:`count_syncs` on the CPU: calls of bertwatch's own code that read a tensor back to the host."""
    import bertwatch.heads.host as host

    bertwatch_root, torch_root = str(Path(host.__file__).resolve().parents[1]), str(Path(torch.__file__).parent)
    found: Counter = Counter()
    originals = {n: getattr(torch.Tensor, n) for n in ("item", "cpu", "tolist", "numpy", "__float__", "__int__",
                                                       "__bool__", "nonzero")}  # fmt: skip

    def counting(name: str, original):
        def counted(tensor, *args, **kwargs):
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(torch_root):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(bertwatch_root):
                found[f"bertwatch {name.strip('_')}"] += 1
            return original(tensor, *args, **kwargs)

        return counted

    saved = host.HOST_DEVICES
    try:
        host.HOST_DEVICES = ()
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(name, original))
        fn()
    finally:
        host.HOST_DEVICES = saved
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return found


class StepClock:
    """Each optimiser step's seconds (``on_step_begin`` to ``on_step_end``, the device's work finished)."""

    def __init__(self, device: torch.device) -> None:
        from transformers import TrainerCallback

        clock = self
        self.device, self.steps, self.start = device, [], 0.0

        class _Clock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                synchronize(clock.device)
                clock.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                synchronize(clock.device)
                clock.steps.append(time.perf_counter() - clock.start)

        self.callback = _Clock()


class TimedEvents:
    """Forwards every Trainer event to a callback and keeps each call's seconds by (event, step)."""

    def __init__(self, callback, device: torch.device) -> None:
        self.callback, self.device, self.seconds = callback, device, {}

    def __getattr__(self, name):
        method = getattr(self.callback, name)
        if not name.startswith("on_"):
            return method

        def timed(args, state, control, **kwargs):
            synchronize(self.device)
            start = time.perf_counter()
            try:
                return method(args, state, control, **kwargs)
            finally:
                synchronize(self.device)
                key = (name, int(state.global_step))
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

        return timed


class SyncProbe:
    """At step ``at``'s end, one more pinned pass of the callback's statistics, its synchronisations counted."""

    def __init__(self, watcher, device: torch.device, at: int) -> None:
        from transformers import TrainerCallback

        probe = self
        self.watcher, self.device, self.at, self.syncs = watcher, device, at, None

        class _Probe(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if int(state.global_step) == probe.at and probe.watcher.watched is not None:
                    probe.syncs = count_syncs(probe.device, probe.one_pass)

        self.callback = _Probe()

    def one_pass(self) -> None:
        from bertwatch.probe.probe_pass import execute, plan_pass

        context = self.watcher.watched.context
        names = self.watcher.stat_names
        execute(plan_pass("step", self.at, names, names, reference_ready=context.reference.ready), context)


def train(shape_name: str, length: int, batch: int, steps: int, watch: str | None, device, dtype, extra=()) -> dict:
    """One fine-tuning run: ``watch`` None (no bertwatch), "budget" (its defaults) or N (every_n_steps=N, with a
    sync count at the last pinned step). Its wall time, peak memory, step times and bertwatch's event seconds."""
    import transformers as T

    shape = SHAPES[shape_name]
    tokenizer = tokenizer_for(shape)
    model = random_classifier(shape, length)
    train_rows = random_rows(shape, steps * batch, length, seed=1)
    dev = random_rows(shape, 64, length, seed=2)
    clock = StepClock(device)
    callbacks: list = [clock.callback]
    watcher = timed = probe = None
    if watch is not None:
        from bertwatch.callbacks import BertWatchCallback

        every = None if watch == "budget" else int(watch)
        watcher = BertWatchCallback(every_n_steps=every, quiet=True)
        timed = TimedEvents(watcher, device)
        callbacks.append(timed)
        if every:
            probe = SyncProbe(watcher, device, at=steps - 1)
            callbacks.append(probe.callback)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=steps, learning_rate=2e-5, logging_steps=10**6,
            save_strategy="no", report_to="none", seed=0, bf16=dtype == torch.bfloat16, use_cpu=device.type == "cpu",
            disable_tqdm=True, dataloader_num_workers=0,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train_rows, eval_dataset=dev, processing_class=tokenizer,
            data_collator=T.DataCollatorWithPadding(tokenizer), callbacks=callbacks,
        )  # fmt: skip
        if watcher is not None:
            watcher.set_trainer(trainer)
        peak_memory_reset(device)
        synchronize(device)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
        synchronize(device)
        wall = time.perf_counter() - start
    passes = []
    if watcher is not None:
        pinned = {r.step for r in watcher.pacing.log if r.reason == "every_n_steps"}
        passes = [s for (event, step), s in timed.seconds.items() if event == "on_step_end" and step in pinned]
    return {
        "wall": wall,
        "peak": peak_memory_mib(device),
        "step": statistics.median(clock.steps[1:] or clock.steps),
        "passes": passes,
        "syncs": probe.syncs if probe is not None else None,
        "measured": [r.step for r in watcher.pacing.log] if watcher is not None else [],
    }


# ------------------------------------------------------------------------------------------------ sections


#: A training step's seconds without bertwatch by (length, batch), as the memory runs measured it: the long runs of
#: the overhead section are sized from it.
STEP_SECONDS: dict[tuple[int, int], float] = {}


def memory_and_pass(table: Table, sizes: Sizes, device, dtype) -> None:
    """Section 1: peak memory ratio, pinned pass over a training step, syncs of a pass, at each memory shape."""
    targets = {0: ("1.10", "10"), 1: ("1.05", "10")}
    for k, (length, batch) in enumerate(sizes.memory):
        start = time.perf_counter()
        every = max(2, sizes.memory_steps // 4)
        without = train(sizes.shape, length, batch, sizes.memory_steps, None, device, dtype)
        STEP_SECONDS[(length, batch)] = without["step"]
        with_ = train(sizes.shape, length, batch, sizes.memory_steps, str(every), device, dtype)
        where = f"{sizes.shape} {length} tokens x {batch}"
        seconds = time.perf_counter() - start
        memory_target, pass_target = targets.get(k, ("-", "10"))
        ratio = with_["peak"] / without["peak"]
        note = "" if device.type == "cuda" else " (CPU: process peak RSS, not a figure)"
        table.add("memory", f"peak with / without, {where}", f"{ratio:.3f} ({with_['peak']:.0f} / "
                  f"{without['peak']:.0f} MiB){note}", f"<= {memory_target}", seconds)  # fmt: skip
        if with_["passes"]:
            pass_s = statistics.median(with_["passes"])
            table.add("pass", f"pinned pass / training step, {where}", f"{pass_s / without['step']:.1f} "
                      f"({pass_s:.3f} s / {without['step']:.3f} s; {len(with_['passes'])} passes)", f"<= {pass_target}",
                      0)  # fmt: skip
        else:
            table.add("pass", f"pinned pass / training step, {where}", "no pinned pass ran", f"<= {pass_target}", 0)
        syncs = with_["syncs"] or Counter()
        kind = "syncs" if device.type == "cuda" else "host reads (CPU, device path)"
        detail = ", ".join(f"{origin} {n}" for origin, n in sorted(syncs.items())) or "none"
        table.add("syncs", f"{kind} in one pass, {where}", f"{sum(syncs.values())}: {detail}",
                  "bertwatch 1 (its one copy)", 0)  # fmt: skip


def sweep(table: Table, sizes: Sizes, device, dtype) -> None:
    """Section 2: the ablation sweep and the pruning curve against the naive loop (``bench_gpu_sweep.py``)."""
    import bench_gpu_sweep

    length, examples, naive = sizes.sweep
    opts = argparse.Namespace(examples=examples, batch_size=32, mode="zero", naive_configs=naive, configs_per_batch=0,
                              no_prune=False)  # fmt: skip
    start = time.perf_counter()
    figures = bench_gpu_sweep.bench_one(sizes.shape, length, opts, device, dtype)
    seconds = time.perf_counter() - start
    where = f"{sizes.shape} {length} tokens, {examples} examples"
    rate = figures["configs_per_second"]
    table.add("sweep", f"configurations per second, {where}", f"naive {rate['naive']}, SDPA hook "
              f"{rate.get('naive_sdpa_hook', '-')}, sweep {rate['sweep']}, stacked {rate['sweep_batched']} "
              f"({figures['configs_per_batch']} a forward)", "-", seconds)  # fmt: skip
    table.add("sweep", f"stacked sweep / naive loop; speed-up, {where}", f"{figures['sweep_batched_over_naive']}; "
              f"{figures['batched_speedup']} x (agreement {figures['argmax_agreement']['sweep_batched']})",
              "<= 0.4; >= 5 x", 0)  # fmt: skip
    table.add("sweep", f"pruning curve / naive loop, {where}", f"{figures['pruning_over_naive']} "
              f"({figures['pruning_steps']} steps)", "<= 0.6", 0)  # fmt: skip


def overhead(table: Table, sizes: Sizes, device, dtype, deadline: float) -> None:
    """Section 3: train() with bertwatch at its defaults over without, a short run and the long ones, the long runs'
    steps scaled to the time left (a run without bertwatch's steps first measure a step)."""
    length, batch, _ = sizes.long_steps[0]
    runs = [("short", length, batch, sizes.short_steps)] + [("long", n, b, s) for n, b, s in sizes.long_steps]
    targets = {("long", sizes.long_steps[0][0]): "1.02", ("long", sizes.long_steps[-1][0]): "1.03"}
    for k, (kind, length, batch, steps) in enumerate(runs):
        start = time.perf_counter()
        if kind == "long":
            left = deadline - time.perf_counter() - 5.0
            share = left / max(1, len(runs) - k)
            per_step = STEP_SECONDS.get((length, batch)) or _step_seconds(sizes.shape, length, batch, device, dtype)
            steps = max(sizes.short_steps, min(steps, int(share / (2.2 * per_step))))
        without = train(sizes.shape, length, batch, steps, None, device, dtype)
        with_ = train(sizes.shape, length, batch, steps, "budget", device, dtype)
        STEP_SECONDS[(length, batch)] = without["step"]
        ratio = with_["wall"] / without["wall"]
        table.add("overhead", f"{kind} run: train() with / without, {sizes.shape} {length} tokens x {batch}, {steps} "
                  f"steps, defaults", f"{ratio:.3f} ({with_['wall']:.1f} / {without['wall']:.1f} s; measured steps "
                  f"{' '.join(map(str, with_['measured']))})", targets.get((kind, length), "-"),
                  time.perf_counter() - start)  # fmt: skip


def _step_seconds(shape: str, length: int, batch: int, device, dtype) -> float:
    """A training step's seconds from a short run without bertwatch."""
    return train(shape, length, batch, 4, None, device, dtype)["step"]


SECTIONS: tuple[tuple[str, Callable], ...] = (("memory", memory_and_pass), ("sweep", sweep), ("overhead", overhead))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on any device (the code paths only)")
    parser.add_argument("--budget-s", type=float, default=0.0, help="the whole check's seconds (default: the mode's)")
    parser.add_argument("--out", default=None, help="also write the table here (default: $OUT/gpu_check.txt)")
    parser.add_argument("--only", default="", help="comma-separated sections to run (memory, sweep, overhead)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    opts = parser.parse_args(argv)
    smoke = opts.smoke or os.environ.get("BERTWATCH_GPU_CHECK_SMOKE") == "1"
    sizes = SMOKE if smoke else FULL
    budget = opts.budget_s or sizes.budget_s
    if opts.threads:
        torch.set_num_threads(opts.threads)
    device, dtype = device_and_dtype("cuda" if torch.cuda.is_available() else "cpu")
    out = opts.out or (str(Path(os.environ["OUT"]) / "gpu_check.txt") if os.environ.get("OUT") else None)
    table = Table(Path(out) if out else None)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    table.start(f"{name} ({'smoke: ' + sizes.shape if smoke else sizes.shape}, budget {budget:.0f} s)")
    deadline = time.perf_counter() + budget
    wanted = {s.strip() for s in opts.only.split(",") if s.strip()}
    failed = 0
    for section, run in SECTIONS:
        if wanted and section not in wanted:
            continue
        start = time.perf_counter()
        try:
            run(table, sizes, device, dtype, deadline) if section == "overhead" else run(table, sizes, device, dtype)
        except Exception as err:  # one section's failure must not lose the others' figures
            failed += 1
            traceback.print_exc(file=sys.stderr)
            table.add(section, "failed", f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}",
                      "-", time.perf_counter() - start)  # fmt: skip
        with contextlib.suppress(Exception):
            if device.type == "cuda":
                torch.cuda.empty_cache()
    table._emit(f"done in {table.elapsed:.0f} s; {failed} section(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
