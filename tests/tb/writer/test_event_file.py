"""bertwatch's event file: records framed as TensorBoard reads them (its own reader checks every CRC), the CRC
against TensorBoard's pure-Python one, unique names, and TensorBoard's writer where the fast path does not apply."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboard_crc
from tensorboard.summary.writer import event_file_writer
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from bertwatch.tb.writer import event_file
from bertwatch.tb.writer.event_file import EventFile, masked_crc32c, open_event_file
from bertwatch.tb.writer.summary import SummaryWriter


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 255, 4096, 100_003])
def test_the_masked_crc_is_tensorboards(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert masked_crc32c(data) == tensorboard_crc(data)


def _events(path: str) -> list[event_pb2.Event]:
    return list(event_file_loader.EventFileLoader(path).Load())


def test_tensorboards_reader_reads_every_event_back_in_order(tmp_path):
    sink = EventFile(str(tmp_path / "run"), ".bertwatch")
    payloads = [b"", b"x" * 3, bytes(range(256)) * 4000]  # one record of a megabyte
    for step, payload in enumerate(payloads):
        value = summary_pb2.Summary.Value(tag=f"t{step}", metadata=summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="x", content=payload)))  # fmt: skip
        sink.add_event(event_pb2.Event(step=step, wall_time=1.5, summary=summary_pb2.Summary(value=[value])))
    sink.close()
    sink.close()  # a second close does nothing
    first, *events = _events(sink.path)
    assert first.file_version == "brain.Event:2"
    assert [e.step for e in events] == [0, 1, 2]
    assert [e.summary.value[0].metadata.plugin_data.content for e in events] == payloads
    assert os.path.basename(sink.path).startswith("events.out.tfevents.") and sink.path.endswith(".bertwatch")


def test_a_record_with_a_wrong_crc_is_refused_by_tensorboards_reader(tmp_path):
    """The check above could pass vacuously if the reader ignored CRCs: it does not."""
    sink = EventFile(str(tmp_path), "")
    sink.add_event(event_pb2.Event(step=3, wall_time=2.0))
    sink.close()
    raw = bytearray(open(sink.path, "rb").read())
    length = struct.unpack("<Q", raw[:8])[0]
    raw[12 + length] ^= 0xFF  # the first record's data CRC
    with open(sink.path, "wb") as f:
        f.write(bytes(raw))
    assert len(_events(sink.path)) < 2


def test_two_files_opened_in_the_same_second_get_their_own_names(tmp_path):
    a, b = EventFile(str(tmp_path), ".bertwatch"), EventFile(str(tmp_path), ".bertwatch")
    a.close(), b.close()
    assert a.path != b.path and len(os.listdir(tmp_path)) == 2


def test_the_summary_writer_writes_through_the_fast_file_and_tensorboards_where_it_cannot(tmp_path, monkeypatch):
    writer = SummaryWriter(str(tmp_path / "fast"))
    writer.add_head_grids({"cls_mass": np.full((2, 3), 0.25)}, 5)
    writer.close()
    assert isinstance(writer._file_writer, EventFile)
    (path,) = (tmp_path / "fast").iterdir()
    assert [e.step for e in _events(str(path)) if e.HasField("summary")] == [5]

    opened = []
    monkeypatch.setattr(event_file_writer, "EventFileWriter", lambda *a, **k: opened.append((a, k)) or "tb")
    assert open_event_file("s3://bucket/run", ".bertwatch", flush_secs=7) == "tb"
    assert opened == [(("s3://bucket/run",), {"flush_secs": 7, "filename_suffix": ".bertwatch"})]
    monkeypatch.undo()
    monkeypatch.setattr(event_file, "_crc32c", lambda: None)
    fallback = open_event_file(str(tmp_path / "slow"), ".bertwatch")
    fallback.close()
    assert isinstance(fallback, EventFileWriter)
    with pytest.raises(RuntimeError, match="google-crc32c"):
        masked_crc32c(b"abc")
