"""The event file a ``SummaryWriter`` writes: TFRecord-framed ``Event`` protos, each checked by a CRC-32C in C.

TensorBoard's own event writer frames each record with a CRC-32C computed in pure Python (about 8 MB/s), on a
thread that holds the GIL while it runs, and ``SummaryWriter`` waits for it at every flush: a probe step's kept
attention maps (half a megabyte for four short sentences, several for long texts) held the training loop that
long. :class:`EventFile` frames records exactly as TensorBoard reads them (the data's length as a little-endian
uint64, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data; the file's first event
names the format version) with ``google_crc32c``'s C implementation (gigabytes a second), on the calling thread,
which is all a writer that flushes every call needs. A remote run directory (``s3://``, ``gs://``, ...) or a
machine without the C CRC gets TensorBoard's writer (:func:`open_event_file`).
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import struct
import threading
import time
from typing import Protocol

from tensorboard.compat.proto import event_pb2

__all__ = ["EventFile", "EventSink", "masked_crc32c", "open_event_file"]

_FILE_VERSION = "brain.Event:2"
_MASK_DELTA = 0xA282EAD8
_UIDS = itertools.count()


class EventSink(Protocol):
    """What ``SummaryWriter`` writes events through: :class:`EventFile` or TensorBoard's ``EventFileWriter``."""

    def add_event(self, event: event_pb2.Event) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@functools.cache
def _crc32c():
    """``google_crc32c.value`` when its C implementation is there, else None."""
    try:
        import google_crc32c
    except ImportError:
        return None
    # older google-crc32c releases have no implementation attribute
    return google_crc32c.value if getattr(google_crc32c, "implementation", None) == "c" else None


def masked_crc32c(data: bytes) -> int:
    """The CRC-32C of ``data``, rotated right by 15 bits plus 0xa282ead8 mod 2^32, as TFRecord frames store it.

    Raises:
        RuntimeError: ``google_crc32c``'s C implementation is not installed.
    """
    crc = _crc32c()
    if crc is None:
        raise RuntimeError("masked_crc32c needs google-crc32c's C implementation (pip install google-crc32c)")
    x = crc(data)
    return (((x >> 15) | (x << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class EventFile:
    """One new event file ``events.out.tfevents.<time>.<host>.<pid>.<n><suffix>`` in ``logdir``, written in place.

    ``add_event`` frames and writes an event (buffered); ``flush`` hands the buffer to the OS; ``close`` flushes
    and closes. Thread-safe: a lock keeps each record whole.
    """

    def __init__(self, logdir: str, filename_suffix: str = "") -> None:
        os.makedirs(logdir, exist_ok=True)
        self._lock = threading.Lock()
        while True:
            name = (
                f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_UIDS)}"
                f"{filename_suffix}"
            )
            self.path = os.path.join(logdir, name)
            try:
                self._file = open(self.path, "xb")  # noqa: SIM115 (closed by close())
                break
            except FileExistsError:
                continue
        self.add_event(event_pb2.Event(wall_time=time.time(), file_version=_FILE_VERSION))
        self.flush()

    def add_event(self, event: event_pb2.Event) -> None:
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        record = b"".join(
            (header, struct.pack("<I", masked_crc32c(header)), data, struct.pack("<I", masked_crc32c(data)))
        )
        with self._lock:
            self._file.write(record)

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def open_event_file(logdir: str, filename_suffix: str = "", *, flush_secs: float = 120) -> EventSink:
    """A new event file in ``logdir``: an :class:`EventFile` for a local directory when the C CRC-32C is installed,
    else TensorBoard's ``EventFileWriter`` (``flush_secs``: how long it keeps events in memory)."""
    if "://" not in str(logdir) and _crc32c() is not None:
        return EventFile(str(logdir), filename_suffix)
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    return EventFileWriter(str(logdir), flush_secs=flush_secs, filename_suffix=filename_suffix)
