"""The partition leader's check of a producer's batches (Kafka's LogValidator for magic 2).

Everything the leader will store is checked before anything is written: the frame and
CRC of every batch, its size against ``max.message.bytes``, its record count against the
bytes that many records need, compressed records decompressed within a bound
(``decompression``: ``max.message.bytes`` counts compressed bytes, so a small batch could
otherwise decompress to gigabytes), every record (decoded by the codec, so a malformed
varint or a count that lies is caught), offset deltas 0..n-1, and
CreateTime timestamps within the topic's bounds of the broker's clock, and an idempotent
producer's fields (id, epoch 0 or more, sequence 0 or more) whose batch comes alone, as
Kafka requires of a produce request since version 3, so a retried batch is one
duplicate or none. On a compacted topic (``cleanup.policy`` with ``compact``) every record
needs a key, as Kafka's ``validateKey``: the cleaner keeps the latest record per key, so a
record without one could never be kept or removed by it (an empty key is a key). A
transactional batch needs a producer id; control batches (markers)
are the leader's own, never a client's (Kafka's rule). One bad batch refuses the whole partition's payload. With ``LogAppendTime`` the batch is stamped here
(which changes CRC-covered bytes, so the CRC is recomputed, as Kafka does).
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.records.batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    MAGIC,
    NO_PRODUCER_ID,
    TRANSACTIONAL_MASK,
    BatchFramingError,
    BatchHeader,
    crc_matches,
    parse_header,
    set_log_append_time,
)
from raftka.records.codec import Compression, RecordError, iter_batch_records
from raftka.records.decompression import DecompressionError, plain_batch
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
_MAGIC_AT = 16
# The smallest record: length, attributes, timestamp delta, offset delta, key length, value
# length and header count, one byte each; a batch's count cannot exceed its bytes over this.
MIN_RECORD_BYTES = 7


class BatchValidationError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_message_bytes: int
    # what a compressed batch's records may decompress to (never below max_message_bytes)
    uncompressed_batch_bytes_max: int = 64 << 20
    timestamp_type: str = "CreateTime"
    timestamp_before_max_ms: int = 2**63 - 1
    timestamp_after_max_ms: int = 3_600_000
    compacted: bool = False  # cleanup.policy has compact: every record needs a key


@dataclass(frozen=True, slots=True)
class ValidatedBatches:
    payload: bytearray
    batches: list[tuple[int, BatchHeader]]
    record_count: int
    log_append_time_ms: int  # -1 unless the topic stamps LogAppendTime


def validate_batches(payload: bytes, limits: BatchLimits, now_ms: int) -> ValidatedBatches:
    if not payload:
        raise BatchValidationError(E.CORRUPT_MESSAGE, "records: empty; at least one batch is needed")
    buf = bytearray(payload)
    batches: list[tuple[int, BatchHeader]] = []
    position = 0
    records = 0
    while position < len(buf):
        index = len(batches)
        if len(buf) - position > _MAGIC_AT and buf[position + _MAGIC_AT] != MAGIC:
            raise BatchValidationError(
                E.INVALID_RECORD,
                f"batch {index} at byte {position}: magic {buf[position + _MAGIC_AT]}, only {MAGIC} is accepted",
            )
        try:
            header = parse_header(buf, position)
        except BatchFramingError as e:
            raise BatchValidationError(E.CORRUPT_MESSAGE, f"batch {index}: {e}") from None
        if header.size > limits.max_message_bytes:
            raise BatchValidationError(
                E.MESSAGE_TOO_LARGE,
                f"batch {index} is {header.size} bytes, over max.message.bytes {limits.max_message_bytes}",
            )
        if not crc_matches(buf, position, header):
            raise BatchValidationError(
                E.CORRUPT_MESSAGE, f"batch {index} at byte {position}: CRC-32C mismatch"
            )
        _check_records(buf, position, header, index, limits, now_ms)
        batches.append((position, header))
        records += header.record_count
        position += header.size
    if len(batches) > 1:
        for index, (_, header) in enumerate(batches):
            if header.has_producer_id:
                raise BatchValidationError(
                    E.INVALID_RECORD,
                    f"batch {index} carries producer id {header.producer_id}: a batch with a producer id "
                    f"must come alone in its partition's records, here are {len(batches)}",
                )
    append_time = -1
    if limits.timestamp_type == "LogAppendTime":
        append_time = now_ms
        batches = [(pos, set_log_append_time(buf, pos, header, now_ms)) for pos, header in batches]
    return ValidatedBatches(buf, batches, records, append_time)


def _check_records(
    buf: bytearray, position: int, header: BatchHeader, index: int, limits: BatchLimits, now_ms: int
) -> None:
    def invalid(why: str) -> BatchValidationError:
        return BatchValidationError(E.INVALID_RECORD, f"batch {index}: {why}")

    if header.attributes & CONTROL_MASK:
        raise invalid("control batches are the partition leader's to write, not a client's")
    if header.attributes & TRANSACTIONAL_MASK and not header.has_producer_id:
        raise invalid("a transactional batch needs its producer's id")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise invalid(f"{header.record_count} records with lastOffsetDelta {header.last_offset_delta}")
    if header.producer_id < NO_PRODUCER_ID:
        raise invalid(f"producerId {header.producer_id} is neither -1 (none) nor a producer id")
    if header.has_producer_id and (header.producer_epoch < 0 or header.base_sequence < 0):
        raise invalid(
            f"producer {header.producer_id} with epoch {header.producer_epoch} and baseSequence "
            f"{header.base_sequence}: both must be 0 or more"
        )
    check_time = limits.timestamp_type == "CreateTime"
    earliest = now_ms - min(limits.timestamp_before_max_ms, now_ms + 2**62)
    latest = now_ms + min(limits.timestamp_after_max_ms, 2**62)
    count = 0
    try:
        for expected, record in enumerate(iter_batch_records(_decodable(buf, position, header, limits))):
            if record.offset - header.base_offset != expected:
                raise invalid(f"record {expected} has offset delta {record.offset - header.base_offset}")
            if limits.compacted and record.key is None:
                raise invalid(
                    f"record {expected} has no key, and a compacted topic (cleanup.policy compact) "
                    "takes only records with a key"
                )
            if check_time and not earliest <= record.timestamp <= latest:
                raise BatchValidationError(
                    E.INVALID_TIMESTAMP,
                    f"batch {index}, record {expected}: timestamp {record.timestamp} is outside "
                    f"[{earliest}, {latest}] (message.timestamp.before/after.max.ms)",
                )
            count += 1
    except (RecordError, DecompressionError) as e:
        raise invalid(f"records do not decode: {e}") from None
    if count != header.record_count:
        raise invalid(f"header says {header.record_count} records, {count} decoded")


def _decodable(buf: bytearray, position: int, header: BatchHeader, limits: BatchLimits) -> bytes | bytearray:
    """The batch, its records decompressed within the bound; RecordError, before anything
    is decoded, for a record count its bytes cannot hold."""
    if header.compression == Compression.NONE:
        _check_count(header, header.size - HEADER_SIZE, "its")
        return bytes(buf[position : position + header.size])
    limit = max(limits.uncompressed_batch_bytes_max, limits.max_message_bytes)
    _check_count(header, limit, "the uncompressed bound's")
    try:
        plain = plain_batch(buf, position, header, limit)
    except DecompressionError as e:
        raise DecompressionError(f"{e} (the bound is broker.uncompressed_batch_bytes_max)") from None
    _check_count(header, len(plain) - HEADER_SIZE, "its uncompressed")
    return plain


def _check_count(header: BatchHeader, size: int, whose: str) -> None:
    if header.record_count > size // MIN_RECORD_BYTES:
        raise RecordError(
            f"{header.record_count} records need at least {MIN_RECORD_BYTES} bytes each, "
            f"more than {whose} {size} bytes"
        )
