"""A batch rewritten with only the records the cleaner keeps (Kafka's
``MemoryRecords.buildRetainedRecordsInto``), and the empty batch kept in place of one
whose records all went (``DefaultRecordBatch.writeEmptyHeader``).

A rewritten batch keeps its base offset, its last offset delta (so its producer's last
sequence stays, and a producer's retry is still known), base sequence, producer id and
epoch, partition leader epoch, timestamp type, transactional and control bits and
codec; each record keeps its offset and timestamp. With ``delete_horizon_ms`` the batch
carries KIP-534's delete horizon: attribute bit 6 set and the base timestamp holding the
horizon (records' timestamp deltas are taken from it), so a later pass knows when its
tombstones and markers may go. The CRC is computed anew.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
from aiokafka.codec import gzip_encode, lz4_encode, snappy_encode, zstd_encode

from raftka.records.batch import (
    COMPRESSION_MASK,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Compression,
)
from raftka.records.codec import Record

DELETE_HORIZON_MASK = 0x40
_HEADER = struct.Struct(">qiibIhiqqqhii")
_ENCODERS = {
    Compression.GZIP: gzip_encode,
    Compression.SNAPPY: snappy_encode,
    Compression.LZ4: lz4_encode,
    Compression.ZSTD: zstd_encode,
}


def delete_horizon_ms(header: BatchHeader) -> int | None:
    return header.base_timestamp if header.attributes & DELETE_HORIZON_MASK else None


def rebuilt(header: BatchHeader, records: Sequence[Record], delete_horizon: int | None) -> bytearray:
    """``header``'s batch holding only ``records`` (some of its own, in order)."""
    attributes = header.attributes
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    base_timestamp = delete_horizon if delete_horizon is not None else records[0].timestamp
    body = bytearray()
    for record in records:
        _record(body, record, record.offset - header.base_offset, record.timestamp - base_timestamp)
    codec = Compression(header.compression)
    payload = bytes(body) if codec is Compression.NONE else _ENCODERS[codec](bytes(body))
    max_timestamp = header.max_timestamp if header.log_append_time else max(r.timestamp for r in records)
    return _framed(header, attributes, base_timestamp, max_timestamp, len(records), payload)


def emptied(header: BatchHeader) -> bytearray:
    """A batch with no records in the place of ``header``'s: its offsets, producer, epoch and
    sequences stay (the producer's state replays from it), timestamps both its max."""
    attributes = header.attributes & ~COMPRESSION_MASK & ~DELETE_HORIZON_MASK
    return _framed(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _framed(
    header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int, payload: bytes
) -> bytearray:
    out = bytearray(HEADER_SIZE)
    out += payload
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - LOG_OVERHEAD,
        header.partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return out


def _record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray(b"\x00")  # record attributes: none defined
    _varint(body, timestamp_delta)
    _varint(body, offset_delta)
    _bytes(body, record.key)
    _bytes(body, record.value)
    _varint(body, len(record.headers))
    for name, value in record.headers:
        _bytes(body, name.encode())
        _bytes(body, value)
    _varint(out, len(body))
    out += body


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _varint(out, -1)
        return
    _varint(out, len(data))
    out += data


def _varint(out: bytearray, value: int) -> None:
    """Zigzag, then 7 bits a byte (Kafka's varint and varlong)."""
    value = (value << 1) ^ (value >> 63)
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
