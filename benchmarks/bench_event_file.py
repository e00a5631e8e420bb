"""Time to write a probe step's kept attention maps: bertwatch's event file (``bertwatch.tb.event_file``, CRC-32C in
C, on the calling thread) against TensorBoard's writer (pure-Python CRC-32C on its writer thread, which
``SummaryWriter`` waits for at each flush), the same ``SummaryWriter.add_attention_maps`` call in one process.

Two cases of four examples, 6 layers x 12 heads (MiniLM's shape): the lengths of the SST-2 probe set's first four
examples, and four 128-token texts. Prints the median milliseconds of each writer and their ratio.

    python benchmarks/bench_event_file.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

from bertwatch.tb import event_file
from bertwatch.tb.summary import SummaryWriter

CASES = {"SST-2 probe examples (12, 28, 26, 40 tokens)": [12, 28, 26, 40], "four 128-token texts": [128] * 4}


def _examples(lengths: list[int]) -> list[tuple]:
    rng = np.random.default_rng(0)
    return [([f"t{i}" for i in range(n)], rng.random((6, 12, n, n)).astype(np.float32), None) for n in lengths]


def _time_writes(examples: list[tuple], repeats: int, fast: bool) -> float:
    crc = event_file._crc32c
    if not fast:
        event_file._crc32c = lambda: None  # open_event_file falls back to TensorBoard's writer
    try:
        with tempfile.TemporaryDirectory() as run:
            writer = SummaryWriter(run)
            times = []
            for step in range(repeats):
                start = time.perf_counter()
                writer.add_attention_maps(examples, step)
                times.append(time.perf_counter() - start)
            writer.close()
    finally:
        event_file._crc32c = crc
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if event_file._crc32c() is None:
        raise SystemExit("google-crc32c's C implementation is not installed: nothing to compare")
    for name, lengths in CASES.items():
        examples = _examples(lengths)
        slow = _time_writes(examples, args.repeats, fast=False)
        fast = _time_writes(examples, args.repeats, fast=True)
        print(
            f"{name}: TensorBoard's writer {slow * 1000:.1f} ms, bertwatch's event file {fast * 1000:.1f} ms, "
            f"ratio {slow / fast:.1f}"
        )


if __name__ == "__main__":
    main()
