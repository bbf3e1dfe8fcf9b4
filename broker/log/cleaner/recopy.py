"""One cleaning pass over a partition log (Kafka's ``Cleaner``): map the dirty part, then
recopy the log from its start into new segments keeping what the map says is latest.

A pass runs off the event loop on a ``CleanPlan`` taken on it: the inactive segments
from the log start up to the first uncleanable offset (each read through a descriptor of
its own, so a segment retention deletes meanwhile stays readable), the aborted
transactions among them and each producer's last batch. It writes ``.cleaned`` segments
and hands them back; the swap (``swap``) is the loop's.

- Key map (``OffsetMap``): from the first dirty offset, each record's key -> its offset,
  skipping control batches and aborted transactions' batches, batch by batch until the map
  is full (the rest stays dirty for the next pass, as Kafka's).
- Groups: consecutive segments below the map's end whose sizes add up to at most
  ``segment.bytes`` (and index entries, and a 2^31 offset range) become one segment.
- A record stays if no later offset of its key is mapped; a tombstone only until its
  batch's delete horizon (set, now + ``delete.retention.ms``, by the pass that first keeps
  it); a keyless record goes (Kafka's ``invalidMessage``). Aborted transactions' batches
  go; markers as ``CleanedTransactions`` says. A batch keeps all its fields but its record
  list (``retained_batch``); a batch left with no record stays empty when it is its
  producer's last (the producer's sequence and epoch survive, as Kafka's ``RETAIN_EMPTY``),
  and when it is its group's last: so a cleaned segment ends where its group ended and the
  log has no gap between segments, only within them (where Kafka's can have both; ours
  lets recovery tell which old segments a ``.swap`` replaces, and keeps the check that a
  segment cut short by crash recovery ends the log).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from raftka.broker.log.cleaner.offset_map import OffsetMap
from raftka.broker.log.cleaner.retained_batch import delete_horizon_ms, emptied, rebuilt
from raftka.broker.log.cleaner.transactions import CleanedTransactions
from raftka.broker.log.index import ENTRIES_MAX
from raftka.broker.log.segment import SCAN_CHUNK_BYTES, LogSegment
from raftka.broker.log.transaction_index import AbortedTxn
from raftka.records.batch import HEADER_SIZE, BatchFramingError, BatchHeader, crc_matches, read_header
from raftka.records.codec import Record, RecordError, iter_batch_records
from raftka.records.control import Marker, read_marker
from raftka.records.decompression import DecompressionError, plain_batch

CLEANED_SUFFIX = ".cleaned"
UNCOMPRESSED_BATCH_BYTES_MAX = 64 << 20
RELATIVE_OFFSET_MAX = 2**31 - 1


class CleanerError(Exception):
    """A log the cleaner cannot clean (a damaged batch): it is marked uncleanable."""


@dataclass(frozen=True, slots=True)
class LastRecord:
    """A producer's last batch (Kafka's ``LastRecord``): its last data offset, if it has
    one since its last epoch bump, and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(slots=True)
class SegmentSource:
    """An inactive segment as the pass reads it: a descriptor of its own (closed by the pass)."""

    segment: LogSegment
    fd: int
    size: int
    next_offset: int
    index_entries: int

    @classmethod
    def of(cls, segment: LogSegment) -> SegmentSource:
        return cls(
            segment,
            os.open(segment.path, os.O_RDONLY),
            segment.size,
            segment.next_offset,
            len(segment.offset_index),
        )


@dataclass(slots=True)
class CleanPlan:
    directory: Path
    sources: list[SegmentSource]  # from the log start; the last ends at or below the uncleanable offset
    first_dirty_offset: int
    aborted: list[AbortedTxn]
    producers: dict[int, LastRecord]
    segment_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int

    def close(self) -> None:
        for source in self.sources:
            os.close(source.fd)


@dataclass(slots=True)
class CleanedGroup:
    """One ``.cleaned`` segment, flushed and closed, replacing ``replaced``."""

    base_offset: int
    replaced: list[LogSegment]
    created_ms: int


@dataclass(slots=True)
class PassResult:
    groups: list[CleanedGroup]
    end_offset: int  # the map's end: the new cleaner checkpoint
    bytes_written: int = 0
    map_utilization: float = 0.0


Throttle = Callable[[int], None]  # called with bytes read, may sleep


def clean(
    plan: CleanPlan, offset_map: OffsetMap, now_ms: int, throttle: Throttle = lambda _: None
) -> PassResult:
    """Run one pass; ``CleanerError`` (nothing swapped, ``.cleaned`` files removed) for a
    damaged batch."""
    written: list[LogSegment] = []
    try:
        offset_map.clear()
        end = _build_map(plan, offset_map, throttle)
        result = PassResult([], end, map_utilization=offset_map.utilization)
        sources = [s for s in plan.sources if s.segment.base_offset < end]
        transactions = CleanedTransactions(plan.aborted)
        for group in _groups(sources, plan.segment_bytes):
            cleaned = _recopy(plan, group, offset_map, transactions, now_ms, throttle, result)
            written.append(cleaned)
            result.groups.append(
                CleanedGroup(cleaned.base_offset, [s.segment for s in group], group[0].segment.created_ms)
            )
        return result
    except (RecordError, BatchFramingError, DecompressionError) as e:
        for cleaned in written:
            cleaned.delete()
        raise CleanerError(str(e)) from None
    except BaseException:
        for cleaned in written:
            cleaned.delete()
        raise


def _build_map(plan: CleanPlan, offset_map: OffsetMap, throttle: Throttle) -> int:
    """Map keys from the first dirty offset; the offset the map is complete below."""
    transactions = CleanedTransactions(plan.aborted)
    end = plan.first_dirty_offset
    for source in plan.sources:
        if source.next_offset <= plan.first_dirty_offset:
            continue
        for header, batch in _batches(source, throttle):
            if header.next_offset <= plan.first_dirty_offset:
                continue
            if header.is_control:  # ends its transaction: the producer's next one is not aborted
                records = list(_records(header, batch))
                transactions.on_marker(header, _marker(batch, records), bool(records))
                end = header.next_offset
                continue
            if transactions.on_batch(header):
                end = header.next_offset
                continue
            if offset_map.size + header.record_count > offset_map.capacity:
                if end == plan.first_dirty_offset:
                    raise CleanerError(
                        f"a batch of {header.record_count} records at {header.base_offset} does not fit the "
                        f"key map ({offset_map.capacity} entries): raise log.cleaner.dedupe.buffer.size"
                    )
                return end
            for record in _records(header, batch):
                if record.key is not None and record.offset >= plan.first_dirty_offset:
                    offset_map.put(record.key, record.offset)
            end = header.next_offset
        end = max(end, source.next_offset)
    return end


def _groups(sources: list[SegmentSource], segment_bytes: int) -> Iterator[list[SegmentSource]]:
    """Consecutive segments that fit one segment (Kafka's ``groupSegmentsBySize``)."""
    group: list[SegmentSource] = []
    size = entries = 0
    for source in sources:
        fits = (
            group
            and size + source.size <= segment_bytes
            and entries + source.index_entries <= ENTRIES_MAX
            and source.next_offset - 1 - group[0].segment.base_offset <= RELATIVE_OFFSET_MAX
        )
        if group and not fits:
            yield group
            group, size, entries = [], 0, 0
        group.append(source)
        size += source.size
        entries += source.index_entries
    if group:
        yield group


def _recopy(
    plan: CleanPlan,
    group: list[SegmentSource],
    offset_map: OffsetMap,
    transactions: CleanedTransactions,
    now_ms: int,
    throttle: Throttle,
    result: PassResult,
) -> LogSegment:
    base = group[0].segment.base_offset
    cleaned = LogSegment(
        plan.directory, base, plan.index_interval_bytes, group[0].segment.created_ms, CLEANED_SUFFIX
    )
    try:
        cleaned.delete()  # a leftover of an abandoned pass
        cleaned = LogSegment(
            plan.directory, base, plan.index_interval_bytes, group[0].segment.created_ms, CLEANED_SUFFIX
        )
        last: BatchHeader | None = None
        for source in group:
            for header, batch in _batches(source, throttle):
                last = header
                kept, aborted = _filtered(header, batch, transactions, plan, offset_map, now_ms)
                if kept is not None:
                    cleaned.append(kept, [(0, read_header(kept))])
                    if aborted is not None:
                        cleaned.txn_index.append(aborted)
                    result.bytes_written += len(kept)
        if last is not None and cleaned.next_offset < last.next_offset:
            kept = emptied(last)
            cleaned.append(kept, [(0, read_header(kept))])
        cleaned.flush()
        cleaned.close()
    except BaseException:
        cleaned.delete()
        raise
    return cleaned


def _filtered(
    header: BatchHeader,
    batch: bytes,
    transactions: CleanedTransactions,
    plan: CleanPlan,
    offset_map: OffsetMap,
    now_ms: int,
) -> tuple[bytes | bytearray | None, AbortedTxn | None]:
    """The batch as it stays (itself, rewritten, or emptied), None if it goes (Kafka's
    ``checkBatchRetention`` and ``shouldRetainRecord``); with an ABORT marker kept, its
    transaction for the cleaned segment's index."""
    records = list(_records(header, batch))
    horizon = delete_horizon_ms(header)
    aborted = None
    if header.is_control:
        txn_done, aborted = transactions.on_marker(header, _marker(batch, records), bool(records))
        discard_records = txn_done and horizon is not None and horizon <= now_ms
        retained = [] if discard_records else records
        set_horizon = txn_done and horizon is None
    else:
        discard_records = transactions.on_batch(header)
        retained = [] if discard_records else [r for r in records if _keep(r, offset_map, horizon, now_ms)]
        set_horizon = horizon is None and any(r.value is None for r in retained)
    if retained:
        if len(retained) == len(records) and not set_horizon:
            return batch, aborted
        return rebuilt(
            header, retained, now_ms + plan.delete_retention_ms if set_horizon else horizon
        ), aborted
    if header.has_producer_id and _last_of_producer(header, plan.producers.get(header.producer_id)):
        return emptied(header), None
    return None, None


def _keep(record: Record, offset_map: OffsetMap, horizon: int | None, now_ms: int) -> bool:
    if record.key is None:
        return False
    if record.offset < offset_map.get(record.key):
        return False
    return record.value is not None or horizon is None or now_ms < horizon


def _last_of_producer(header: BatchHeader, last: LastRecord | None) -> bool:
    """The batch holding the producer's last sequence, or its last marker (its epoch)."""
    if last is None:
        return False
    if last.last_data_offset is not None:
        return header.last_offset == last.last_data_offset
    return header.is_control and header.producer_epoch == last.producer_epoch


def _marker(batch: bytes, records: list[Record]) -> Marker | None:
    if not records:
        return None
    try:
        return read_marker(batch)
    except RecordError:
        return None


def _records(header: BatchHeader, batch: bytes) -> Iterator[Record]:
    if header.record_count == 0:
        return iter(())
    plain = plain_batch(memoryview(batch), 0, header, UNCOMPRESSED_BATCH_BYTES_MAX)
    return iter_batch_records(bytes(plain))


def _batches(source: SegmentSource, throttle: Throttle) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of the segment, CRC checked: ``CleanerError`` names a damaged one."""
    position = 0
    while position < source.size:
        chunk = os.pread(source.fd, SCAN_CHUNK_BYTES, position)
        at = 0
        while len(chunk) - at >= HEADER_SIZE:
            header = read_header(chunk, at)
            if at + header.size > len(chunk):
                if at == 0:  # one batch larger than a chunk
                    chunk = os.pread(source.fd, header.size, position)
                    if len(chunk) < header.size:
                        raise CleanerError(
                            f"{source.segment.path.name}: a batch at {position} runs past the end"
                        )
                else:
                    break
            if not crc_matches(chunk, at, header):
                raise CleanerError(
                    f"{source.segment.path.name}: CRC mismatch in the batch at {position + at}"
                )
            yield header, chunk[at : at + header.size]
            at += header.size
        if at == 0:
            raise CleanerError(f"{source.segment.path.name}: no whole batch at {position}")
        throttle(at)
        position += at
