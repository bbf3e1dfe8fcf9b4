"""Kafka's RecordBatch v2 (magic 2) frame: the 61-byte header, read and patched in place.

A batch on the wire and on disk is::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordsCount int32 | records...

``batchLength`` counts the bytes after itself; the CRC-32C covers everything from
``attributes`` to the end. ``baseOffset`` and ``partitionLeaderEpoch`` lie outside the
CRC, so a leader assigns them by writing 12 bytes, and the producer's CRC stays valid.
This module knows the frame only; records inside a batch are ``raftka.records.codec``'s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import IntEnum

import crc32c

MAGIC = 2
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
HEADER_SIZE = 61
CRC_START = 21  # attributes: where the CRC-covered part begins
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULUS = 1 << 31  # a producer's sequence wraps to 0 after 2^31 - 1 (Kafka's incrementSequence)
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime, clear: CreateTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
_CRC_AT = 17
_MAX_TIMESTAMP_AT = 35
_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_PRODUCER_AT = 43
_BATCH_LENGTH_AT = 8
_RECORD_COUNT_AT = 57
_BATCH_LENGTH_MIN = HEADER_SIZE - LOG_OVERHEAD


class Compression(IntEnum):
    """Kafka's codec ids (the batch attributes' low 3 bits: ``COMPRESSION_MASK``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            choices = ", ".join(c.name.lower() for c in cls)
            raise ValueError(f"compression: {name!r} is not one of {choices}") from None


class BatchFramingError(ValueError):
    """Bytes that are not a whole RecordBatch v2 frame (short, bad length or magic)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """The whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def has_producer_id(self) -> bool:
        """Written by an idempotent producer: the batch carries its id, epoch and sequence."""
        return self.producer_id != NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        return next_sequence(self.base_sequence, self.last_offset_delta)


def next_sequence(sequence: int, records: int) -> int:
    """The sequence ``records`` after ``sequence``, wrapping as Kafka's producers do."""
    return (sequence + records) % SEQUENCE_MODULUS


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header at ``pos``, checked as a header only (its batch may lie beyond ``buf``)."""
    if len(buf) - pos < HEADER_SIZE:
        raise BatchFramingError(f"{len(buf) - pos} bytes at {pos}: shorter than a batch header")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.batch_length < _BATCH_LENGTH_MIN:
        raise BatchFramingError(f"batch at {pos}: batchLength {header.batch_length} is below the header's")
    return header


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``; BatchFramingError unless the whole batch,
    as its length says, lies within ``buf`` and its magic is 2."""
    header = read_header(buf, pos)
    if pos + header.size > len(buf):
        raise BatchFramingError(
            f"batch at {pos}: batchLength {header.batch_length} runs past the end ({len(buf) - pos} bytes)"
        )
    if header.magic != MAGIC:
        raise BatchFramingError(f"batch at {pos}: magic {header.magic}, only {MAGIC} is supported")
    return header


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in ``buf``; BatchFramingError at the first bad frame
    (a trailing partial batch included)."""
    pos = 0
    while pos < len(buf):
        header = parse_header(buf, pos)
        yield pos, header
        pos += header.size


def count_records(buf: bytes | bytearray | memoryview) -> int:
    """Records in ``buf``: whole batches as a log holds them (already validated, so not
    checked again), two fields read per batch; for counting what a fetch sends."""
    count = pos = 0
    while len(buf) - pos >= HEADER_SIZE:
        count += _EPOCH.unpack_from(buf, pos + _RECORD_COUNT_AT)[0]
        pos += LOG_OVERHEAD + max(_BATCH_LENGTH_MIN, _EPOCH.unpack_from(buf, pos + _BATCH_LENGTH_AT)[0])
    return count


def transactional_header(records: bytes | bytearray | memoryview) -> BatchHeader | None:
    """The first batch's header if it is a producer's transactional batch (not validated:
    what Kafka's ``hasTransactionalRecords`` looks at), else None."""
    if len(records) < HEADER_SIZE:
        return None
    try:
        header = read_header(records)
    except BatchFramingError:
        return None
    return header if header.is_transactional and header.has_producer_id and not header.is_control else None


def uncompressed(buf: bytes | bytearray | memoryview, pos: int, records: bytes | bytearray) -> bytearray:
    """The batch at ``pos`` as if it had been sent uncompressed: its header, its codec bits
    cleared and its length fitted, before ``records`` (decompressed elsewhere). For decoding
    records only: the CRC is left as it was."""
    out = bytearray(buf[pos : pos + HEADER_SIZE])
    _EPOCH.pack_into(out, _BATCH_LENGTH_AT, _BATCH_LENGTH_MIN + len(records))
    _ATTRIBUTES.pack_into(out, CRC_START, _ATTRIBUTES.unpack_from(out, CRC_START)[0] & ~COMPRESSION_MASK)
    out += records
    return out


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """Whether the CRC-32C stored in the header matches the batch's bytes."""
    covered = memoryview(buf)[pos + CRC_START : pos + header.size]
    return crc32c.crc32c(covered) == header.crc


def assign(buf: bytearray, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Write the leader's base offset and partition leader epoch into the batch at ``pos``
    (both outside the CRC)."""
    _OFFSET_AND_EPOCH.pack_into(buf, pos, base_offset)
    _EPOCH.pack_into(buf, pos + 12, partition_leader_epoch)


def set_producer_state(
    buf: bytearray, pos: int, producer_id: int, producer_epoch: int, base_sequence: int
) -> None:
    """Give the batch at ``pos`` another producer id, epoch and base sequence (a producer
    whose epoch was bumped sends its unacknowledged batches again numbered anew); all three
    are CRC-covered, so the CRC is written again."""
    _PRODUCER.pack_into(buf, pos + _PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    header = read_header(buf, pos)
    _CRC.pack_into(buf, pos + _CRC_AT, crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + header.size]))


def set_log_append_time(buf: bytearray, pos: int, header: BatchHeader, now_ms: int) -> BatchHeader:
    """Stamp the batch at ``pos`` with LogAppendTime ``now_ms``: the timestamp-type bit and
    the max timestamp change, both CRC-covered, so the CRC is written again."""
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _ATTRIBUTES.pack_into(buf, pos + CRC_START, attributes)
    _TIMESTAMP.pack_into(buf, pos + _MAX_TIMESTAMP_AT, now_ms)
    crc = crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + header.size])
    _CRC.pack_into(buf, pos + _CRC_AT, crc)
    return replace(header, attributes=attributes, max_timestamp=now_ms, crc=crc)


def set_attributes(buf: bytearray, pos: int, attributes: int) -> None:
    """Give the batch at ``pos`` other attributes (CRC-covered, so the CRC is written again)."""
    _ATTRIBUTES.pack_into(buf, pos + CRC_START, attributes)
    header = read_header(buf, pos)
    _CRC.pack_into(buf, pos + _CRC_AT, crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + header.size]))
