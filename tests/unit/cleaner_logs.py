"""Partition logs for the log cleaner's tests: appends, and what a consumer reading from
the beginning (read_committed) makes of a log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.records.batch import BatchHeader, Compression, iter_batches, parse_header
from raftka.records.codec import BatchBuilder, iter_batch_records
from raftka.records.decompression import plain_batch
from raftka.records.read_committed import AbortedBatches

TOPIC_ID = b"\x07" * 16


def open_log(directory: Path, segment_bytes: int, *, clean: bool = False) -> PartitionLog:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=128)
    return PartitionLog.open(directory, TOPIC_ID, config, clean_shutdown=clean, recovery_point=0)


def append(
    partition_log: PartitionLog,
    records: list[tuple[bytes, bytes | None]],
    now_ms: int,
    *,
    producer: tuple[int, int, int] = (-1, -1, -1),  # id, epoch, base sequence
    transactional: bool = False,
    compression: Compression = Compression.NONE,
) -> None:
    builder = BatchBuilder(
        compression,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        transactional=transactional,
    )
    for key, value in records:
        builder.append(now_ms, key, value, [("h", b"x")])
    payload = builder.build()
    partition_log.append_as_leader(payload, [(0, parse_header(payload))], 0, now_ms)


@dataclass
class Consumed:
    table: dict[bytes, tuple[int, bytes]]  # key -> (offset, value) of its latest live record
    offsets: list[int]  # of every record read, in order
    batches: list[tuple[BatchHeader, bytes]]


def consume(partition_log: PartitionLog, upper: int | None = None) -> Consumed:
    """Read from the log start to ``upper`` (the last stable offset) as a read_committed
    consumer: aborted transactions and control batches dropped, tombstones delete."""
    upper = partition_log.last_stable_offset(partition_log.log_end_offset) if upper is None else upper
    start = partition_log.log_start_offset
    aborted = AbortedBatches(
        (t.producer_id, t.first_offset) for t in partition_log.aborted_transactions(start, upper)
    )
    out = Consumed({}, [], [])
    offset = start
    while offset < upper:
        data = partition_log.read(offset, 1 << 30, max_offset=upper).records
        if not data:
            break
        for position, header in iter_batches(data):
            batch = bytes(data[position : position + header.size])
            out.batches.append((header, batch))
            offset = header.next_offset
            if aborted.drops(header, batch) or header.is_control or header.record_count == 0:
                continue
            plain = plain_batch(memoryview(batch), 0, header, 1 << 26)
            for record in iter_batch_records(bytes(plain)):
                out.offsets.append(record.offset)
                assert record.key is not None
                if record.value is None:
                    out.table.pop(record.key, None)
                else:
                    out.table[record.key] = (record.offset, record.value)
    return out
