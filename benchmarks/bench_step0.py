"""What step 0 costs: bertwatch's setup (``on_train_begin``) and the start pass (``on_step_begin`` at step 0: the
loss check, the gradient pass, every default statistic, the drift reference, the kept maps, writing) of a short
MiniLM run at the defaults (SST-2, batch 32, the probe set sampled from 256 dev sentences).

    python benchmarks/bench_step0.py --repeats 4 --threads 1 [--baseline-checkout ../main] [--profile 30]

Each run is a fresh process of one training step; with ``--baseline-checkout DIR`` runs importing bertwatch from
that checkout alternate with this one's. Prints each run's wall and CPU seconds, then per checkout the median and
range, and ``--profile N`` the N functions with the most CPU time inside step 0 (cProfile, one more run). On a
shared machine CPU seconds at one thread are the steady figure: at two threads a loaded machine counts the threads'
spinning as CPU time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import default_glue_dir, minilm_path, sst2_dataset  # noqa: E402


class _Step0:
    """Forwards every Trainer event to a callback, timing the setup and step 0 (and profiling step 0)."""

    def __init__(self, callback, profile: cProfile.Profile | None) -> None:
        self.callback, self.profile, self.spent = callback, profile, {}

    def __getattr__(self, name):
        method = getattr(self.callback, name)
        if not name.startswith("on_"):
            return method

        def timed(args, state, control, **kwargs):
            part = "setup" if name == "on_train_begin" else None
            if name == "on_step_begin" and int(state.global_step) == 0:
                part = "step 0"
            wall, cpu = time.perf_counter(), time.process_time()
            if part == "step 0" and self.profile is not None:
                self.profile.enable()
            try:
                return method(args, state, control, **kwargs)
            finally:
                if part == "step 0" and self.profile is not None:
                    self.profile.disable()
                if part:
                    self.spent[part] = (time.perf_counter() - wall, time.process_time() - cpu)

        return timed


def worker(opts: argparse.Namespace) -> dict:
    import torch
    import transformers as T

    from bertwatch.callbacks import BertWatchCallback

    torch.set_num_threads(opts.threads)
    tokenizer = T.AutoTokenizer.from_pretrained(minilm_path())
    model = T.AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=2)
    train = sst2_dataset(tokenizer, "train", opts.glue_dir, 32, 128)
    dev = sst2_dataset(tokenizer, "dev", opts.glue_dir, 256, 128)
    profile = cProfile.Profile(time.process_time) if opts.profile else None
    callback = _Step0(BertWatchCallback(quiet=True), profile)
    with tempfile.TemporaryDirectory() as out:
        args = T.TrainingArguments(
            output_dir=out, per_device_train_batch_size=32, max_steps=1, save_strategy="no", report_to="none",
            use_cpu=True, disable_tqdm=True, logging_steps=1000,
        )  # fmt: skip
        trainer = T.Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=dev, processing_class=tokenizer,
            data_collator=T.DataCollatorWithPadding(tokenizer), callbacks=[callback],
        )  # fmt: skip
        callback.callback.set_trainer(trainer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
    result = {part: [round(v, 3) for v in values] for part, values in callback.spent.items()}
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(opts.profile)
        result["profile"] = text.getvalue()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--glue-dir", default=None, help="local GLUE folder (default: $BERTWATCH_DATA/glue)")
    parser.add_argument("--baseline-checkout", default=None, help="also time the bertwatch of this checkout")
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with the most CPU time")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    opts.glue_dir = opts.glue_dir or default_glue_dir()
    if opts.worker:
        print("RESULT " + json.dumps(worker(opts)), flush=True)
        return 0
    checkouts = [None] + ([os.path.abspath(opts.baseline_checkout)] if opts.baseline_checkout else [])
    runs: dict[str | None, list[dict]] = {c: [] for c in checkouts}
    order = [c for r in range(opts.repeats) for c in (checkouts if r % 2 == 0 else checkouts[::-1])]
    for checkout in order + ([None] if opts.profile else []):
        profiled = opts.profile and len(runs[None]) == opts.repeats and checkout is None
        env = dict(os.environ)
        if checkout is not None:
            env["PYTHONPATH"] = os.pathsep.join([checkout, env.get("PYTHONPATH", "")])
        command = [sys.executable, os.path.abspath(__file__), "--worker", "--threads", str(opts.threads)]
        command += ["--glue-dir", opts.glue_dir] if opts.glue_dir else []
        command += ["--profile", str(opts.profile)] if profiled else []
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
            raise SystemExit(f"run failed ({checkout or 'this checkout'})")
        result = json.loads(lines[-1][len("RESULT ") :])
        if profiled:
            print(result["profile"])
            continue
        runs[checkout].append(result)
        load = os.getloadavg()[0]
        print(f"{checkout or 'this checkout'}: step 0 {result['step 0'][0]:.2f} s wall, {result['step 0'][1]:.2f} s "
              f"CPU; setup {result['setup'][0]:.2f} s (load average {load:.1f})", flush=True)  # fmt: skip
    for checkout, results in runs.items():
        for kind, k in (("wall", 0), ("CPU", 1)):
            values = sorted(r["step 0"][k] for r in results)
            print(f"{checkout or 'this checkout'}: step 0 {kind} median {statistics.median(values):.2f} s "
                  f"[{values[0]:.2f}-{values[-1]:.2f}] over {len(values)} runs, {opts.threads} thread(s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
