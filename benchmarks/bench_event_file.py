"""Time to write a probe step's kept attention maps: bertwatch's event file (``bertwatch.tb.writer.event_file``, CRC-32C
in C, on the calling thread) against TensorBoard's writer (pure-Python CRC-32C on its writer thread, which
``SummaryWriter`` waits for at each flush), each adding and flushing the event ``SummaryWriter.add_attention_maps``
writes (built beforehand), in one process.

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
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from bertwatch.tb.writer.event_file import EventFile, masked_crc32c
from bertwatch.tb.writer.summary import attention_summary

CASES = {"SST-2 probe examples (12, 28, 26, 40 tokens)": [12, 28, 26, 40], "four 128-token texts": [128] * 4}


def _event(lengths: list[int], step: int) -> event_pb2.Event:
    """The event ``SummaryWriter.add_attention_maps`` writes for four examples of these lengths (random maps)."""
    rng = np.random.default_rng(0)
    merged = summary_pb2.Summary()
    for i, n in enumerate(lengths):
        tokens = [f"t{j}" for j in range(n)]
        merged.value.extend(attention_summary(i, tokens, rng.random((6, 12, n, n)).astype(np.float32)).value)
    return event_pb2.Event(step=step, wall_time=time.time(), summary=merged)


def _time_writes(lengths: list[int], repeats: int, open_file) -> float:
    """Median seconds to add one maps event and flush, as ``SummaryWriter`` does at each call."""
    events = [_event(lengths, step) for step in range(repeats)]
    with tempfile.TemporaryDirectory() as run:
        sink = open_file(run)
        times = []
        for event in events:
            start = time.perf_counter()
            sink.add_event(event)
            sink.flush()
            times.append(time.perf_counter() - start)
        sink.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    try:
        masked_crc32c(b"")
    except RuntimeError as err:
        raise SystemExit(f"nothing to compare: {err}") from err
    for name, lengths in CASES.items():
        slow = _time_writes(lengths, args.repeats, lambda run: EventFileWriter(run, filename_suffix=".bertwatch"))
        fast = _time_writes(lengths, args.repeats, lambda run: EventFile(run, ".bertwatch"))
        print(
            f"{name}: TensorBoard's writer {slow * 1000:.1f} ms, bertwatch's event file {fast * 1000:.1f} ms, "
            f"ratio {slow / fast:.1f}"
        )


if __name__ == "__main__":
    main()
