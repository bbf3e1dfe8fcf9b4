"""One partition's log: segments, the leader-epoch cache, the log start offset and the
idempotent producers' state (Kafka's UnifiedLog, smaller).

Appends go to the active (last) segment, which rolls on ``segment.bytes``, on
``segment.ms`` and when its index is full. Retention (with ``cleanup.policy`` ``delete``)
deletes whole inactive segments below the high watermark and moves the log start offset,
never past the high watermark. Durability is Kafka's default: data reaches the page cache on append and
is fsynced on roll, on close, every ``flush.ms`` (through the manager) and, with
``flush.messages``, once that many records are unflushed (``flush.messages=1``: before
the append returns, so before it can count toward the high watermark).
``recovery_point`` is the offset below which everything is on disk; after a crash,
segments from there on are scanned and cut after their last good batch.

The fsync of a rolled segment (up to a gigabyte of page cache) would stall a broker's
event loop, so with ``background`` it runs elsewhere, as Kafka schedules it on another
thread: a ``FlushJob`` holds duplicates of the segment's file descriptors (a segment
deleted meanwhile is unharmed) and the recovery point moves when it is done, unless
the log was truncated below it in the meantime. The small checkpoint files (the
leader-epoch cache, the log start offset) are written there too, in order with those
syncs, through a descriptor of the log's folder: a leader change over hundreds of
partitions costs the loop no fsync. Whatever a lost checkpoint write would have said is
in the batches recovery scans (the epochs are rebuilt from them), and the syncs that
move the recovery point past those batches come after it in the queue.

The producers' state (``producer_state``) is a function of the log, kept so: every
append applies its batches (the leader checks a producer's batch first, and answers a
retried one with the offsets it was written at), a roll snapshots it at the new
segment's base (fsynced with the rolled segment), a clean close at the log end, and
opening, or truncating the tail, loads the newest snapshot at or below the end and
replays the batch headers after it (``producer_snapshots``). Retention keeps the state
(producers are forgotten by expiry, as in Kafka 3.x) and deletes the snapshots of the
segments it deletes.

Transactions: the producers' state knows each open transaction (its first offset), which
with the high watermark gives the last stable offset (``last_stable_offset``). A leader
writes a marker (``append_marker``) to end one; an ABORT marker's transaction goes into
the aborted-transaction index of the segment the marker is in (``transaction_index``),
which a read_committed fetch asks (``aborted_transactions``). Recovery after a crash
replays the scanned segments' batches from a snapshot at or below the first of them, so
their indexes are written again from the markers they hold.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import structlog

from raftka.broker.log import checkpoint, producer_snapshots
from raftka.broker.log.cleaner.swap import finish_interrupted_swaps
from raftka.broker.log.config import LogConfig
from raftka.broker.log.epoch_cache import FILE_NAME as EPOCHS_FILE
from raftka.broker.log.epoch_cache import LeaderEpochCache
from raftka.broker.log.index import RELATIVE_OFFSET_MAX
from raftka.broker.log.ongoing_transactions import CompletedTxn
from raftka.broker.log.producer_state import ProducerState
from raftka.broker.log.segment import LogSegment
from raftka.broker.log.transaction_index import SUFFIX as TXN_INDEX_SUFFIX
from raftka.broker.log.transaction_index import AbortedTxn
from raftka.raft.storage.fsio import fsync_dir
from raftka.records.batch import (
    BatchFramingError,
    BatchHeader,
    assign,
    crc_matches,
    iter_batches,
    parse_header,
    read_header,
)
from raftka.records.codec import RecordError, read_records
from raftka.records.control import Marker, marker_batch, read_marker

log = structlog.get_logger("raftka.broker.log")
LOG_START_FILE = "log-start-offset"
METADATA_FILE = "partition.metadata"


class LogAppendError(ValueError):
    """Batches a follower cannot append (bad frame, CRC, or not continuing the log)."""


class OffsetOutOfRange(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    duplicate: bool = False  # a producer's retry of a batch already written at these offsets


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes


@dataclass(slots=True)
class FlushJob:
    """fsyncs that bring a log's recovery point to ``upto``; safe to run on any thread."""

    fds: list[int]  # duplicates, closed by run
    directory: Path
    directory_fd: int  # that folder, even if renamed since (its log being deleted); closed by run
    upto: int
    generation: int  # the log's truncation count when the job was made

    def run(self) -> None:
        try:
            for fd in self.fds:
                os.fsync(fd)
            os.fsync(self.directory_fd)
        finally:
            for fd in [*self.fds, self.directory_fd]:
                os.close(fd)


class Background(Protocol):
    """Where a log's syncs run off the event loop, one at a time and in order
    (``BackgroundFlusher``)."""

    def flush(self, partition_log: PartitionLog, job: FlushJob) -> None:
        """Run ``job``, then tell ``partition_log`` (``flushed``) on the loop."""

    def submit(self, work: Callable[[], None], what: str) -> None:
        """Run ``work``; a failure is logged, naming ``what``."""


def _wall_ms() -> int:
    return int(time.time() * 1000)


class PartitionLog:
    def __init__(
        self, directory: Path, topic_id: bytes, config: LogConfig, background: Background | None = None
    ) -> None:
        self.directory = directory
        self.topic_id = topic_id
        self.config = config
        self._background = background  # None: rolled segments are fsynced before roll returns
        self._generation = 0
        self._directory_synced = True  # False from a segment's creation until its folder is fsynced
        self.segments: list[LogSegment] = []
        self.epochs = LeaderEpochCache(
            directory, lambda entries: self._write_checkpoint(EPOCHS_FILE, entries)
        )
        self.log_start_offset = 0
        self.recovery_point = 0
        self._unflushed_records = 0
        self.first_unflushed_ms: int | None = None  # monotonic: when unflushed data first appeared
        self.producers = ProducerState()

    @classmethod
    def open(
        cls,
        directory: Path,
        topic_id: bytes,
        config: LogConfig,
        *,
        clean_shutdown: bool,
        recovery_point: int,
        background: Background | None = None,
    ) -> PartitionLog:
        directory.mkdir(parents=True, exist_ok=True)
        _write_metadata(directory, topic_id)
        partition_log = cls(directory, topic_id, config, background)
        partition_log._load(clean_shutdown, recovery_point)
        return partition_log

    def _load(self, clean_shutdown: bool, recovery_point: int) -> None:
        finish_interrupted_swaps(self.directory, self.config.index_interval_bytes, _wall_ms())
        for stray in self.directory.iterdir():
            if stray.name.endswith((".tmp", ".deleted")):
                stray.unlink()
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log"))
        scanned_from: int | None = None  # the first segment recovery scanned
        for i, base in enumerate(bases):
            segment = LogSegment(self.directory, base, self.config.index_interval_bytes, _wall_ms())
            wholly_flushed = i + 1 < len(bases) and bases[i + 1] <= recovery_point
            if segment.load(trust_indexes=clean_shutdown or wholly_flushed) and scanned_from is None:
                scanned_from = base
            self.segments.append(segment)
        indexed = {
            int(p.stem) for suffix in (".index", TXN_INDEX_SUFFIX) for p in self.directory.glob(f"*{suffix}")
        }
        for base in indexed - set(bases):
            for suffix in (".index", ".timeindex", TXN_INDEX_SUFFIX):
                (self.directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
        self._drop_segments_after_a_cut()
        if not self.segments:
            self.segments.append(LogSegment(self.directory, 0, self.config.index_interval_bytes, _wall_ms()))
        stored_start = checkpoint.read(self.directory / LOG_START_FILE)
        self.log_start_offset = max(self.segments[0].base_offset, stored_start[0][1] if stored_start else 0)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        if scanned_from is not None:
            scanned = [s for s in self.segments if s.base_offset >= scanned_from]
            self.epochs.rebuild_from(scanned_from, [start for s in scanned for start in s.epoch_starts])
        self.recovery_point = (
            self.log_end_offset if clean_shutdown else min(recovery_point, self.log_end_offset)
        )
        self._load_producers(rebuild_txn_indexes_from=scanned_from)

    def _drop_segments_after_a_cut(self) -> None:
        """A segment cut short by recovery ends the log: later segments cannot follow it
        (Kafka's ``LogLoader`` deletes them), nor can one that overlaps the segment before.
        A gap before a segment that holds batches is no cut (a follower starts a segment
        past a gap its indexes cannot span), but an empty segment past a gap is one: a roll
        whose batches a power cut took, so the log ends where the segment before it does."""
        for i in range(1, len(self.segments)):
            previous, segment = self.segments[i - 1], self.segments[i]
            lost_roll = segment.size == 0 and segment.base_offset > previous.next_offset
            if previous.cut_by_recovery or segment.base_offset < previous.next_offset or lost_roll:
                for later in self.segments[i:]:
                    log.warning("deleting a segment after a cut one", segment=str(later.path))
                    later.delete()
                del self.segments[i:]
                return

    # state ------------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    # appends ----------------------------------------------------------------------------

    def append_as_leader(
        self,
        payload: bytearray,
        batch_positions: Sequence[tuple[int, BatchHeader]],
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Assign offsets and the epoch in place, then write (the batches are validated, and
        one with a producer id comes alone). A producer's retry of a batch already written
        is answered with the original's offsets and writes nothing; a batch out of its
        producer's order raises ``ProducerStateError``."""
        for _, header in batch_positions:
            if header.has_producer_id and (duplicate := self.producers.check(header)) is not None:
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp,
                    header.record_count,
                    duplicate=True,
                )
        first = self.log_end_offset
        offset = first
        headers = []
        for position, header in batch_positions:
            assign(payload, position, offset, leader_epoch)
            headers.append((position, _rebased(header, offset, leader_epoch)))
            offset += header.last_offset_delta + 1
        self.epochs.assign(leader_epoch, first)
        return self._append(payload, headers, now_ms)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int,
    ) -> AppendInfo:
        """Write a transaction marker for the producer as leader (``ProducerStateError`` if
        it may not be written: an older producer or coordinator epoch)."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        payload = marker_batch(producer_id, producer_epoch, committed, coordinator_epoch, now_ms)
        header = parse_header(payload)
        offset = self.log_end_offset
        assign(payload, 0, offset, leader_epoch)
        self.epochs.assign(leader_epoch, offset)
        return self._append(payload, [(0, _rebased(header, offset, leader_epoch))], now_ms)

    def append_as_follower(self, payload: bytes) -> AppendInfo | None:
        """Batches as the leader wrote them; nothing is written unless all are whole,
        pass their CRC and continue this log: each starts at or after the end of the one
        before, the first at or after the log end (Kafka's follower append, which keeps the
        leader's offsets: a compacted leader's log skips offsets the cleaner removed)."""
        if not payload:
            return None
        expected = self.log_end_offset
        headers = []
        try:
            for position, header in iter_batches(payload):
                if not crc_matches(payload, position, header):
                    raise LogAppendError(f"batch at {header.base_offset}: CRC mismatch")
                if header.base_offset < expected:
                    raise LogAppendError(
                        f"batch at {header.base_offset} does not continue the log at {expected}"
                    )
                headers.append((position, header))
                expected = header.next_offset
        except BatchFramingError as e:
            raise LogAppendError(str(e)) from None
        for _, header in headers:
            self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        return self._append(payload, headers, _wall_ms())

    def _append(
        self, payload: bytes | bytearray, headers: list[tuple[int, BatchHeader]], now_ms: int
    ) -> AppendInfo:
        self._maybe_roll(len(payload), now_ms, headers[0][1].base_offset, headers[-1][1].last_offset)
        self.active.append(payload, headers)
        for position, header in headers:
            marker = _marker(payload[position : position + header.size]) if header.is_control else None
            self._ended(self.producers.apply(header, marker))
        records = sum(h.record_count for _, h in headers)
        self._unflushed_records += records
        if self.first_unflushed_ms is None:
            self.first_unflushed_ms = int(time.monotonic() * 1000)
        if self._unflushed_records >= self.config.flush_messages:
            self.flush()
        last = headers[-1][1]
        return AppendInfo(
            first_offset=headers[0][1].base_offset,
            last_offset=last.last_offset,
            max_timestamp=max(h.max_timestamp for _, h in headers),
            record_count=records,
        )

    def _maybe_roll(self, incoming_bytes: int, now_ms: int, first_offset: int, last_offset: int) -> None:
        active = self.active
        if last_offset - active.base_offset > RELATIVE_OFFSET_MAX:  # past a gap the indexes cannot span
            self.roll(now_ms, base_offset=first_offset)
            return
        if active.size == 0:
            active.created_ms = now_ms
            return
        if (
            active.size + incoming_bytes > self.config.segment_bytes
            or now_ms - active.created_ms >= self.config.segment_ms
            or active.offset_index.full
            or active.time_index.full
        ):
            self.roll(now_ms)

    def roll(self, now_ms: int | None = None, base_offset: int | None = None) -> None:
        """Start a new active segment at the log end, or at ``base_offset`` past it (a
        follower's next batch after a gap wider than a segment's indexes can span, as
        Kafka rolls), snapshot the producers' state there; the old segment and the
        snapshot are fsynced (in the background, when the log has one). An empty active
        segment is not rolled, only moved to ``base_offset``."""
        base = self.log_end_offset if base_offset is None else base_offset
        created_ms = now_ms or _wall_ms()
        if self.active.size == 0:
            if base != self.active.base_offset:
                self.segments.pop().delete()
                self.segments.append(
                    LogSegment(self.directory, base, self.config.index_interval_bytes, created_ms)
                )
                self._directory_synced = False
            return
        job = self._flush_job(self.segments) or FlushJob(
            [], self.directory, _open_directory(self.directory), self.recovery_point, self._generation
        )
        self.segments.append(LogSegment(self.directory, base, self.config.index_interval_bytes, created_ms))
        snapshot = producer_snapshots.write(self.directory, base, self.producers)
        job.fds.append(os.open(snapshot, os.O_RDONLY))
        self._directory_synced = False
        if self._background is None:
            job.run()
            self.flushed(job)
        else:
            self._background.flush(self, job)

    # reads ------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> ReadResult:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        for segment in self._segments_from(offset):
            found = segment.find(offset)
            if found is not None:
                return ReadResult(segment.read(found, max_bytes, max_offset, min_one_batch))
        return ReadResult(b"")

    def last_stable_offset(self, high_watermark: int) -> int:
        """Below it no transaction is open, and nothing above ``high_watermark``; never below
        the log start (retention may delete an open transaction's first records, as Kafka's
        ``updateFirstUnstableOffset`` clamps it)."""
        first = self.producers.transactions.first_unstable_offset(high_watermark)
        if first is None:
            return high_watermark
        return min(max(first, self.log_start_offset), high_watermark)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper), from the indexes of the
        segments from ``start`` on (Kafka's ``collectAbortedTxns``): a transaction ending at
        or after ``start`` has its marker there."""
        found: list[AbortedTxn] = []
        if upper <= start:
            return found
        for segment in self._segments_from(start):
            entries, complete = segment.txn_index.collect(start, upper)
            found += entries
            if complete:
                break
        return found

    def _ended(self, completed: CompletedTxn | None) -> None:
        """A marker ended a transaction: an aborted one goes into the active segment's index."""
        if completed is not None and completed.aborted:
            self.active.txn_index.append(_aborted(completed))

    def _segments_from(self, offset: int) -> list[LogSegment]:
        for i in range(len(self.segments) - 1, -1, -1):
            if self.segments[i].base_offset <= offset:
                return self.segments[i:]
        return self.segments

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp_ms``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            for found in segment.batches_reaching(timestamp_ms):
                for record in read_records(segment.read_batch(found)):
                    if record.timestamp >= timestamp_ms and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the log's largest timestamp
        (Kafka's MAX_TIMESTAMP lookup, KIP-734), None for a log with no timestamps."""
        newest = max(self.segments, key=lambda s: s.max_timestamp, default=None)
        if newest is None or newest.max_timestamp < 0:
            return None
        return self.offset_for_timestamp(newest.max_timestamp)

    # truncation and retention -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every record at ``offset`` and after."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(self.log_start_offset)
            return
        self._generation += 1
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self.segments.pop().delete()
        self.active.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._load_producers()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._generation += 1
        for segment in self.segments:
            segment.delete()
        self.segments = [LogSegment(self.directory, offset, self.config.index_interval_bytes, _wall_ms())]
        self._directory_synced = False
        self.epochs.clear()
        self._set_log_start(offset)
        self.recovery_point = offset
        for snapshot in producer_snapshots.offsets(self.directory):
            producer_snapshots.delete(self.directory, snapshot)
        self.producers = ProducerState()

    def delete_old_segments(self, now_ms: int, high_watermark: int) -> int:
        """Retention on whole inactive segments; the number deleted. Only segments wholly
        below ``high_watermark`` go (Kafka's deletableSegments), so the log start never
        passes it: a record no follower has fetched yet is never deleted, and an acks=all
        producer waiting for it is never answered for a record no replica holds. A log whose
        ``cleanup.policy`` lacks ``delete`` (``compact`` alone) keeps every segment: the
        cleaner, not retention, bounds it (Kafka's ``deleteOldSegments``)."""
        deleted = 0
        while (
            self.config.delete
            and len(self.segments) > 1
            and self.segments[1].base_offset <= high_watermark
            and self._expired(self.segments[0], now_ms)
        ):
            gone = self.segments.pop(0)
            gone.delete()
            producer_snapshots.delete(self.directory, gone.base_offset)
            deleted += 1
        if deleted:
            self._set_log_start(max(self.log_start_offset, self.segments[0].base_offset))
            self.epochs.truncate_from_start(self.log_start_offset)
        return deleted

    def _expired(self, segment: LogSegment, now_ms: int) -> bool:
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        if retention_ms >= 0 and segment.max_timestamp >= 0 and now_ms - segment.max_timestamp > retention_ms:
            return True
        return retention_bytes >= 0 and self.size_in_bytes - segment.size >= retention_bytes

    def _set_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self._write_checkpoint(LOG_START_FILE, [("log-start-offset", offset)])

    # durability -------------------------------------------------------------------------

    def _write_checkpoint(self, name: str, entries: list[tuple[str | int, int]]) -> None:
        """Write checkpoint ``name`` into this log's folder: queued behind the log's syncs
        when it has ``background``, at once otherwise."""
        if self._background is None:
            checkpoint.write(self.directory / name, entries)
            return
        directory_fd = _open_directory(self.directory)

        def write() -> None:
            try:
                checkpoint.write_in(directory_fd, name, entries)
            finally:
                os.close(directory_fd)

        self._background.submit(write, f"{self.directory.name}/{name}")

    def flush(self) -> None:
        """fsync everything up to the log end, and the folder if a segment was created
        since it was last synced (a new segment's name is on disk only then)."""
        for segment in self.segments:
            if segment.next_offset > self.recovery_point:
                segment.flush()
        if not self._directory_synced:
            fsync_dir(self.directory)
            self._directory_synced = True
        self.recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self.first_unflushed_ms = None

    def flush_job(self) -> FlushJob | None:
        """A flush up to the log end to run off the loop (``flush.ms``); None if all is on disk."""
        self._unflushed_records = 0
        self.first_unflushed_ms = None
        return self._flush_job(self.segments)

    def _flush_job(self, segments: list[LogSegment]) -> FlushJob | None:
        unflushed = [s for s in segments if s.next_offset > self.recovery_point]
        if not unflushed:
            return None
        fds = [fd for segment in unflushed for fd in segment.duplicate_fds()]
        return FlushJob(
            fds,
            self.directory,
            _open_directory(self.directory),
            unflushed[-1].next_offset,
            self._generation,
        )

    def flushed(self, job: FlushJob) -> None:
        """``job`` has run: what it covered is on disk, unless the log was cut below it since."""
        if job.generation == self._generation:
            self.recovery_point = max(self.recovery_point, job.upto)

    def close(self) -> None:
        """Flush, and snapshot the producers' state at the log end, so the next start
        replays nothing."""
        self.flush()
        snapshot = producer_snapshots.write(self.directory, self.log_end_offset, self.producers)
        fd = os.open(snapshot, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)
        for segment in self.segments:
            segment.close()

    def close_unflushed(self) -> None:
        """Close without syncing anything: the log is about to be deleted."""
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
        self.segments = []

    # producers --------------------------------------------------------------------------

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.producers.expire(now_ms, expiration_ms)

    def _load_producers(self, rebuild_txn_indexes_from: int | None = None) -> None:
        """The producers' state at the log end: the newest readable snapshot within the
        segments (none: empty, from the first segment), then the batches after it. Only
        the snapshots at segment bases, and the newest, are kept (Kafka's stray
        snapshots are removed the same way). With ``rebuild_txn_indexes_from`` (a segment
        base: recovery scanned the segments from there), the snapshot is one at or below
        it, and those segments' aborted-transaction indexes are written again from the
        markers replayed."""
        first, end = self.segments[0].base_offset, self.log_end_offset
        bases = {segment.base_offset for segment in self.segments}
        found = producer_snapshots.offsets(self.directory)
        newest = max((o for o in found if first <= o <= end), default=None)
        kept = [o for o in found if first <= o <= end and (o in bases or o == newest)]
        for offset in set(found) - set(kept):
            producer_snapshots.delete(self.directory, offset)
        self.producers, start = ProducerState(), first
        bound = end if rebuild_txn_indexes_from is None else rebuild_txn_indexes_from
        for offset in reversed(kept):
            if offset > bound:
                continue
            try:
                self.producers, start = producer_snapshots.read(self.directory, offset), offset
                break
            except producer_snapshots.SnapshotError as e:
                log.warning(
                    "deleting an unreadable producer snapshot",
                    log_dir=str(self.directory),
                    offset=offset,
                    reason=str(e),
                )
                producer_snapshots.delete(self.directory, offset)
        rebuilt = rebuild_txn_indexes_from if rebuild_txn_indexes_from is not None else end + 1
        for segment in self.segments:
            if segment.base_offset >= rebuilt:
                segment.txn_index.reset()
        for segment in self._segments_from(start):
            for header in segment.headers_from(max(start, segment.base_offset)):
                marker = None
                if header.is_control:
                    at = segment.find(header.base_offset)
                    marker = None if at is None else _marker(segment.read_batch(at))
                completed = self.producers.apply(header, marker)
                if segment.base_offset >= rebuilt and completed is not None and completed.aborted:
                    segment.txn_index.append(_aborted(completed))


def _aborted(completed: CompletedTxn) -> AbortedTxn:
    return AbortedTxn(
        completed.producer_id, completed.first_offset, completed.last_offset, completed.last_stable_offset
    )


def _marker(batch: bytes | bytearray) -> Marker | None:
    """The marker a control batch holds; None for another control record, or one that does
    not decode (a follower keeps what its leader wrote; the state then ends no transaction),
    or one the log cleaner emptied (its producer's last, kept for its epoch)."""
    if read_header(batch).record_count == 0:
        return None
    try:
        return read_marker(bytes(batch))
    except RecordError as e:
        log.warning("a control batch that does not decode", reason=str(e))
        return None


def _open_directory(directory: Path) -> int:
    """A descriptor of ``directory`` for work queued on another thread."""
    return os.open(directory, os.O_RDONLY)


def _rebased(header: BatchHeader, base_offset: int, epoch: int) -> BatchHeader:
    return replace(header, base_offset=base_offset, partition_leader_epoch=epoch)


def _write_metadata(directory: Path, topic_id: bytes) -> None:
    if stored_topic_id(directory) == topic_id:
        return
    path = directory / METADATA_FILE
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(f"version: 0\ntopic_id: {topic_id.hex()}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_dir(directory)


def stored_topic_id(directory: Path) -> bytes | None:
    try:
        for line in (directory / METADATA_FILE).read_text(encoding="utf-8").splitlines():
            if line.startswith("topic_id: "):
                return bytes.fromhex(line.removeprefix("topic_id: "))
    except (OSError, ValueError):
        return None
    return None
