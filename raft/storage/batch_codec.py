"""The on-disk batch format of log segments.

Each batch is one frame, big-endian::

    length        u32   bytes after this field
    crc           u32   CRC-32C of every byte after this field
    base_offset   i64
    epoch         i32
    record_count  i32
    timestamp_ms  i64
    kind          u8    raftka.raft.batch.BatchKind
    records       record_count x (u32 length, bytes)

Nothing read from disk is trusted: the decoder bounds every length before it allocates,
checks the CRC before it reads a field, and reports where damage starts instead of raising,
so recovery can tell a torn tail from corruption in the middle of a log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from raftka.raft.batch import Batch, BatchKind

_HEADER = struct.Struct(">IIqiiqB")
_PREFIX = struct.Struct(">II")  # length, crc: filled in once the frame is encoded
_U32 = struct.Struct(">I")
_CRC_FROM = _PREFIX.size  # the CRC covers everything after the length and CRC fields
_KIND_AT = _HEADER.size - 1
_KINDS = frozenset(int(kind) for kind in BatchKind)

HEADER_BYTES = _HEADER.size
MIN_LENGTH = HEADER_BYTES  # after ``length``: the rest of the header (29) and one empty record (4)
MAX_BATCH_BYTES = 64 << 20  # bounds what a corrupt length field can make the reader allocate


class BatchHeader(NamedTuple):
    length: int
    crc: int
    base_offset: int
    epoch: int
    record_count: int
    timestamp_ms: int
    kind: int  # raw: a damaged frame may hold a value that is no BatchKind


@dataclass(frozen=True, slots=True)
class Frame:
    """What one position of a log file holds: a valid batch, or the damage found there."""

    position: int
    end: int | None  # where the next frame starts; None when the length field is unusable
    header: BatchHeader | None  # None when too few bytes remain for a header
    batch: Batch | None = None  # set exactly when ``error`` is None
    error: str | None = None
    crc_valid: bool = False


class _InvalidContent(Exception):
    """A frame whose CRC matches but whose fields are impossible (a writer bug, not a torn write)."""


def frame_bytes(batch: Batch) -> int:
    """The encoded size of ``batch``, known without encoding it."""
    return HEADER_BYTES + _U32.size * len(batch.records) + batch.size_bytes()


def encode_into(out: bytearray, batch: Batch) -> None:
    """Append the frame of ``batch`` to ``out``: the hot path, one buffer for many batches."""
    start = len(out)
    out += _HEADER.pack(
        0, 0, batch.base_offset, batch.epoch, len(batch.records), batch.timestamp_ms, batch.kind
    )
    for record in batch.records:
        out += _U32.pack(len(record))
        out += record
    length = len(out) - start - _U32.size
    if length > MAX_BATCH_BYTES:
        del out[start:]
        raise ValueError(f"batch at offset {batch.base_offset} is {length} bytes, over {MAX_BATCH_BYTES}")
    with memoryview(out) as view, view[start + _CRC_FROM :] as covered:
        crc = crc32c.crc32c(covered)
    _PREFIX.pack_into(out, start, length, crc)


def encode_batch(batch: Batch) -> bytes:
    out = bytearray()
    encode_into(out, batch)
    return bytes(out)


def encode_batches(batches: Iterable[Batch]) -> bytes:
    out = bytearray()
    for batch in batches:
        encode_into(out, batch)
    return bytes(out)


def decode_frame(buf: bytes, position: int) -> Frame:
    """Decode the frame at ``position``; never raises on bad data, reports it in ``error``."""
    available = len(buf) - position
    if available < HEADER_BYTES:
        return Frame(
            position, None, None, error=f"incomplete batch header: {available} of {HEADER_BYTES} bytes"
        )
    header = BatchHeader._make(_HEADER.unpack_from(buf, position))
    if not MIN_LENGTH <= header.length <= MAX_BATCH_BYTES:
        error = f"batch length {header.length} outside [{MIN_LENGTH}, {MAX_BATCH_BYTES}]"
        return Frame(position, None, header, error=error)
    end = position + _U32.size + header.length
    if end > len(buf):
        error = f"batch of {header.length} bytes runs {end - len(buf)} bytes past the end of the file"
        return Frame(position, None, header, error=error)
    with memoryview(buf) as view, view[position + _CRC_FROM : end] as covered:
        crc = crc32c.crc32c(covered)
    if crc != header.crc:
        error = f"CRC-32C mismatch: stored {header.crc:#010x}, computed {crc:#010x}"
        return Frame(position, end, header, error=error)
    try:
        batch = _decode_batch(buf, header, position + HEADER_BYTES, end)
    except _InvalidContent as exc:
        return Frame(position, end, header, error=str(exc), crc_valid=True)
    return Frame(position, end, header, batch, crc_valid=True)


def iter_frames(buf: bytes, position: int = 0) -> Iterator[Frame]:
    """Frames from ``position`` on; the last one yielded is the first damaged one, if any."""
    while position < len(buf):
        frame = decode_frame(buf, position)
        yield frame
        if frame.batch is None:
            return
        assert frame.end is not None
        position = frame.end


def scan_frames(buf: bytes) -> Iterator[tuple[Frame, int]]:
    """Every frame of a file for read-only tools, going on after damage: ``(frame, span_bytes)``.

    A damaged frame's span runs to the next valid batch (``find_valid_frame``) or to the end
    of ``buf``, so damage in the middle of a log hides nothing that is still readable.
    """
    position = 0
    while position < len(buf):
        frame = decode_frame(buf, position)
        if frame.batch is not None:
            assert frame.end is not None
            yield frame, frame.end - position
            position = frame.end
            continue
        resume = find_valid_frame(buf, position + 1)
        yield frame, (len(buf) if resume is None else resume) - position
        if resume is None:
            return
        position = resume


class FrameCrcs(NamedTuple):
    frames: int  # frames walked, good or bad
    bad_crcs: int  # of them, those whose CRC-32C does not match
    unwalked_bytes: int  # from a length no frame can have, or a partial header, to the end


def check_crcs(buf: bytes) -> FrameCrcs:
    """Walk the frames of ``buf`` checking only lengths and CRCs, decoding nothing: the least
    any reader of a log must do, the yardstick of the audit's speed (``raftka.audit.baseline``).

    A frame whose CRC fails is trusted for its length (a flipped byte is found and the walk
    goes on); a length no frame can have ends the walk, as finding the next frame would
    take ``find_valid_frame``'s byte-by-byte search.
    """
    frames = bad = position = 0
    size = len(buf)
    with memoryview(buf) as view:
        while size - position >= HEADER_BYTES:
            length, crc = _PREFIX.unpack_from(buf, position)
            end = position + _U32.size + length
            if not MIN_LENGTH <= length <= MAX_BATCH_BYTES or end > size:
                break
            frames += 1
            bad += crc32c.crc32c(view[position + _CRC_FROM : end]) != crc
            position = end
    return FrameCrcs(frames, bad, size - position)


def find_valid_frame(buf: bytes, start: int) -> int | None:
    """The first position at or after ``start`` where a valid batch begins, or None.

    Tries every byte, because the damaged frame's length field cannot be trusted to say
    where the next one begins. Only used after damage is found, to tell a torn tail (nothing
    valid follows) from corruption in the middle of a log. Costs up to ~0.2 s per MiB scanned.
    """
    for position in range(start, len(buf) - _U32.size - MIN_LENGTH + 1):
        if buf[position + _KIND_AT] not in _KINDS:  # the cheapest test first: rejects most garbage
            continue
        (length,) = _U32.unpack_from(buf, position)
        if not MIN_LENGTH <= length <= len(buf) - position - _U32.size:
            continue
        if decode_frame(buf, position).batch is not None:
            return position
    return None


def _decode_batch(buf: bytes, header: BatchHeader, start: int, end: int) -> Batch:
    if header.kind not in _KINDS:
        raise _InvalidContent(f"unknown batch kind {header.kind}")
    if header.base_offset < 0 or header.epoch < 0:
        raise _InvalidContent(f"negative base offset {header.base_offset} or epoch {header.epoch}")
    if not 1 <= header.record_count <= (end - start) // _U32.size:
        raise _InvalidContent(f"record count {header.record_count} impossible in {end - start} bytes")
    records = []
    position = start
    for index in range(header.record_count):
        if position + _U32.size > end:
            raise _InvalidContent(f"record {index} of {header.record_count} starts past the batch end")
        (size,) = _U32.unpack_from(buf, position)
        position += _U32.size
        if position + size > end:
            raise _InvalidContent(f"record {index} of {size} bytes runs past the batch end")
        records.append(buf[position : position + size])
        position += size
    if position != end:
        raise _InvalidContent(f"{end - position} bytes after the last of {header.record_count} records")
    return Batch(
        header.base_offset, header.epoch, header.timestamp_ms, BatchKind(header.kind), tuple(records)
    )
