"""Helpers shared by the storage tests: batches to write and ways to damage files."""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import crc32c

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.effects import Write
from raftka.raft.storage.base import Storage
from raftka.raft.storage.layout import log_dir


def make_batches(start: int, count: int, *, epoch: int = 1, records: int = 2) -> list[Batch]:
    """``count`` contiguous batches from offset ``start``, each of ``records`` distinct records."""
    batches = []
    for i in range(count):
        base = start + i * records
        payload = tuple(f"record-{base + r}".encode() for r in range(records))
        batches.append(Batch(base, epoch, 1_700_000_000_000 + base, BatchKind.DATA, payload))
    return batches


def append(storage: Storage, batches: list[Batch], write_id: int = 1) -> None:
    storage.write(Write(write_id=write_id, append=tuple(batches)))


def segment_files(data_dir: Path) -> list[Path]:
    return sorted(log_dir(data_dir).glob("*.log"))


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def raw_frame(fields: tuple[int, int, int, int, int], body: bytes) -> bytes:
    """A frame with a valid CRC around any fields and body: what the encoder would never write.

    ``fields`` are (base_offset, epoch, record_count, timestamp_ms, kind).
    """
    covered = struct.pack(">qiiqB", *fields) + body
    return struct.pack(">II", len(covered) + 4, crc32c.crc32c(covered)) + covered


@contextmanager
def memory_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder in memory where there is one: the writer fsyncs every batch it
    appends, which costs nothing there. For hypothesis tests, which cannot take tmp_path."""
    shm = Path("/dev/shm")
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=shm if shm.is_dir() else None))
    try:
        yield path
    finally:
        shutil.rmtree(path)
