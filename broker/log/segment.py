"""One segment of a partition log: ``<20-digit base offset>.log`` with its two indexes and
its aborted transactions (``transaction_index``).

Batches are stored exactly as they arrived (offsets already assigned), appended with one
write per append. Offsets only grow, but need not be contiguous: a compacted log (and a
follower's copy of it) has gaps where the cleaner removed records, inside a segment and
between segments. Reads never decode records: the sparse offset index gives a position
at or before the wanted batch, batch headers are walked from there, and the answer is
one ``pread`` of whole batches. Both indexes get an entry once ``index.interval.bytes``
have been written since the last (Kafka's rule: the time index records the largest
timestamp so far and the batch that reached it), and the batches written since the
last entry are also kept in memory (``tail``, at most an interval's worth), so the
reads followers and caught-up consumers make at the log end walk no headers on disk.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from raftka.broker.log.index import IndexError_, OffsetIndex, TimeIndex
from raftka.broker.log.transaction_index import SUFFIX as TXN_INDEX_SUFFIX
from raftka.broker.log.transaction_index import TransactionIndex
from raftka.records.batch import (
    HEADER_SIZE,
    MAGIC,
    BatchFramingError,
    BatchHeader,
    crc_matches,
    iter_batches,
    parse_header,
    read_header,
)

log = structlog.get_logger("raftka.broker.log")
SCAN_CHUNK_BYTES = 1 << 20
HEADER_ONLY_BATCH_BYTES = 8 << 10  # batches this large are skipped over, their header read alone


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(slots=True)
class Position:
    """Where a batch starts in a segment, and its header."""

    position: int
    header: BatchHeader


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, created_ms: int, suffix: str = ""
    ) -> None:
        """``suffix`` after each file's name: the cleaner writes ``.cleaned`` segments."""
        self.base_offset = base_offset
        self.path = directory / file_name(base_offset, ".log" + suffix)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(directory / file_name(base_offset, ".index" + suffix))
        self.time_index = TimeIndex(directory / file_name(base_offset, ".timeindex" + suffix))
        self.txn_index = TransactionIndex(directory / file_name(base_offset, TXN_INDEX_SUFFIX + suffix))
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset  # one past the last record
        self.max_timestamp = -1
        self._max_timestamp_offset = 0  # relative offset of the batch that reached max_timestamp
        self.created_ms = created_ms  # for segment.ms: the first batch's arrival
        self.cut_by_recovery = False  # load found a torn or corrupt tail and cut it
        self._bytes_since_index = 0
        self._tail: list[Position] = []  # the batches from the last offset index entry on
        self._tail_offsets: list[int] = []  # their base offsets, for bisect
        self.epoch_starts: list[
            tuple[int, int]
        ] = []  # by recover: (leader epoch, base offset) where one begins

    # loading ------------------------------------------------------------------------

    def load(self, trust_indexes: bool) -> bool:
        """Learn the segment's end from its indexes' last entry plus a short scan, or
        rebuild everything by a full scan (``recover``) when they cannot be trusted;
        True when it scanned every batch."""
        if trust_indexes:
            try:
                self.offset_index.load(self.size)
                if self.size and not len(self.offset_index):
                    raise IndexError_(f"{self.offset_index.path}: empty beside a non-empty log")
                self.time_index.load()
                self._resume_from_indexes()
                last_time = self.time_index.last
                if last_time is not None and last_time[1] >= self.next_offset - self.base_offset:
                    raise IndexError_(f"{self.time_index.path}: an entry points past the log")
                return False
            except (IndexError_, BatchFramingError) as e:
                log.warning("index does not fit its log; rebuilding", segment=str(self.path), reason=str(e))
        self.cut_by_recovery = self.recover() > 0
        return True

    def _resume_from_indexes(self) -> None:
        """The end, the largest timestamp and the tail, from the indexes' last entries and
        the batches after them."""
        self.next_offset = self.base_offset
        self.max_timestamp, self._max_timestamp_offset = self.time_index.last or (-1, 0)
        self._tail, self._tail_offsets = [], []
        last_offset = self.offset_index.last
        position = last_offset[1] if last_offset is not None else 0
        self._bytes_since_index = 0
        while position < self.size:
            header = self._header_at(position)
            self._remember(header, position)
            position += header.size

    def _header_at(self, position: int) -> BatchHeader:
        header = read_header(os.pread(self._fd, HEADER_SIZE, position))
        if header.magic != MAGIC or position + header.size > self.size:
            raise BatchFramingError(
                f"batch at {position} of {self.path.name}: magic {header.magic} or past the end"
            )
        return header

    def recover(self) -> int:
        """Scan every batch (framing and CRC), rebuild both indexes and ``epoch_starts``,
        and cut the file after the last good batch; the bytes cut."""
        self.epoch_starts = []
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp, self._max_timestamp_offset = -1, 0
        self._bytes_since_index = 0
        self._tail, self._tail_offsets = [], []
        position = 0
        problem = ""
        while position < self.size and not problem:
            chunk = os.pread(self._fd, max(SCAN_CHUNK_BYTES, HEADER_SIZE), position)
            consumed = 0
            try:
                for offset_in_chunk, header in iter_batches(chunk):
                    if not crc_matches(chunk, offset_in_chunk, header):
                        problem = f"CRC mismatch in the batch at {position + offset_in_chunk}"
                        break
                    self._recovered(header, position + offset_in_chunk)
                    consumed = offset_in_chunk + header.size
            except BatchFramingError as e:
                if consumed == 0:
                    big = self._big_batch(position)  # one batch larger than the chunk
                    if big is None:
                        problem = str(e)
                    else:
                        self._recovered(big, position)
                        consumed = big.size
            position += consumed
            if consumed == 0 and not problem:
                problem = "no whole batch"
        cut = self.size - position
        if cut:
            log.warning(
                "truncating a torn or corrupt segment tail",
                segment=str(self.path),
                position=position,
                bytes=cut,
                reason=problem,
            )
            os.ftruncate(self._fd, position)
            self.size = position
        return cut

    def _big_batch(self, position: int) -> BatchHeader | None:
        try:
            header = self._header_at(position)
            data = os.pread(self._fd, header.size, position)
            parse_header(data)
        except BatchFramingError:
            return None
        return header if crc_matches(data, 0, header) else None

    # writing ------------------------------------------------------------------------

    def append(self, payload: bytes | bytearray | memoryview, headers: list[tuple[int, BatchHeader]]) -> None:
        """Write batches whose headers (positions within ``payload``) are given."""
        start = self.size
        os.write(self._fd, payload)
        self.size += len(payload)
        for position, header in headers:
            self._index(header, start + position)

    def _recovered(self, header: BatchHeader, position: int) -> None:
        if not self.epoch_starts or header.partition_leader_epoch != self.epoch_starts[-1][0]:
            self.epoch_starts.append((header.partition_leader_epoch, header.base_offset))
        self._index(header, position)

    def _index(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index >= self.index_interval_bytes or len(self.offset_index) == 0:
            relative = header.base_offset - self.base_offset
            self.offset_index.append(relative, position)
            self._bytes_since_index = 0
            self._tail, self._tail_offsets = [], []
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self._max_timestamp_offset = header.max_timestamp, relative
            if self.max_timestamp >= 0 and (
                self.time_index.last is None or self.max_timestamp > self.time_index.last[0]
            ):
                self.time_index.append(self.max_timestamp, self._max_timestamp_offset)
        self._remember(header, position)

    def _remember(self, header: BatchHeader, position: int) -> None:
        """A batch after the last index entry: its place in the tail, the end, the max timestamp."""
        self._bytes_since_index += header.size
        self._tail.append(Position(position, header))
        self._tail_offsets.append(header.base_offset)
        self.next_offset = header.next_offset
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self._max_timestamp_offset = (
                header.max_timestamp,
                header.base_offset - self.base_offset,
            )

    # reading ------------------------------------------------------------------------

    def find(self, offset: int) -> Position | None:
        """The batch holding ``offset`` (or the first after it: a compacted log has gaps, and
        an offset the cleaner removed is read from the next batch), None past the end."""
        if offset >= self.next_offset:
            return None
        if self._tail_offsets and offset >= self._tail_offsets[0]:
            i = bisect.bisect_right(self._tail_offsets, offset) - 1
            if self._tail[i].header.last_offset < offset:  # compacted away: the batch after the gap
                i += 1
            return self._tail[i]
        floor = self.offset_index.floor(offset - self.base_offset)
        position = floor[1] if floor is not None else 0
        while position < self.size:
            header = self._header_at(position)
            if header.last_offset >= offset:
                return Position(position, header)
            position += header.size
        return None

    def read(self, start: Position, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> bytes:
        """Whole batches from ``start`` within ``max_bytes`` (the first whole regardless
        with ``min_one_batch``), none starting at or past ``max_offset``."""
        if max_offset is not None and start.header.base_offset >= max_offset:
            return b""
        length = min(max_bytes, self.size - start.position)
        if start.header.size > length:
            if not min_one_batch:
                return b""
            return os.pread(self._fd, start.header.size, start.position)
        data = os.pread(self._fd, length, start.position)
        end = 0
        for position, header in _whole_batches(data):
            if max_offset is not None and header.base_offset >= max_offset:
                break
            end = position + header.size
        return data[:end]

    def first_batch_reaching(self, timestamp: int) -> Position | None:
        """The first batch whose max timestamp is at least ``timestamp``: the time index
        names the batch where the segment's max timestamp first reached it, and the scan
        starts from the offset index entry at or before the one just before it."""
        if timestamp > self.max_timestamp:
            return None
        i = bisect.bisect_left(self.time_index.keys, timestamp)
        before = self.time_index.values[i - 1] if i > 0 else 0
        floor = self.offset_index.floor(before)
        position = floor[1] if floor is not None else 0
        while position < self.size:
            header = self._header_at(position)
            if header.max_timestamp >= timestamp:
                return Position(position, header)
            position += header.size
        return None

    def batches_reaching(self, timestamp: int) -> Iterator[Position]:
        """Every batch whose max timestamp is at least ``timestamp``, from the first on: a
        compacted batch may hold no record that late (the cleaner keeps a batch emptied of
        its records, with its max timestamp, for its producer's state), so a lookup by time
        reads on to the next (Kafka's ``LogSegment.findOffsetByTimestamp``)."""
        first = self.first_batch_reaching(timestamp)
        position = self.size if first is None else first.position
        while position < self.size:
            header = self._header_at(position)
            if header.max_timestamp >= timestamp:
                yield Position(position, header)
            position += header.size

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """The header of every batch from the one holding ``offset`` on (the producers'
        state is replayed from these; the segment is whole, recovered): small batches are
        read a chunk at a time, a large one's header alone."""
        start = self.find(offset)
        position = self.size if start is None else start.position
        want = SCAN_CHUNK_BYTES
        while position < self.size:
            chunk = os.pread(self._fd, want, position)
            at = 0
            while len(chunk) - at >= HEADER_SIZE:
                header = read_header(chunk, at)
                yield header
                at += header.size
            if at == 0:
                raise BatchFramingError(f"{self.path.name}: no whole batch header at {position}")
            position += at
            want = HEADER_SIZE if header.size >= HEADER_ONLY_BATCH_BYTES else SCAN_CHUNK_BYTES

    def read_batch(self, at: Position) -> bytes:
        return os.pread(self._fd, at.header.size, at.position)

    # upkeep -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding ``offset`` or later."""
        at = self.find(offset)
        if at is None:
            return
        os.ftruncate(self._fd, at.position)
        self.size = at.position
        self.offset_index.truncate_after(at.header.base_offset - self.base_offset)
        self.time_index.truncate_to_offset(at.header.base_offset - self.base_offset)
        self.txn_index.truncate_to(at.header.base_offset)
        self.recover_end()

    def recover_end(self) -> None:
        """Recompute the end and max timestamp from what the indexes and file still hold."""
        self._resume_from_indexes()

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def duplicate_fds(self) -> list[int]:
        """Descriptors of the log and its indexes that stay valid after ``close``."""
        return [
            os.dup(self._fd),
            self.offset_index.duplicate_fd(),
            self.time_index.duplicate_fd(),
            *self.txn_index.duplicate_fds(),
        ]

    def close(self) -> None:
        """Close its files, once: a segment a swap deleted stays in its log's list if the
        swap is cut short, and closing its descriptor again would close whatever file had
        taken the number since."""
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    @property
    def paths(self) -> list[Path]:
        """Its files, the log last."""
        return [self.offset_index.path, self.time_index.path, self.txn_index.path, self.path]

    def delete(self) -> None:
        self.close()
        for path in self.paths:
            path.unlink(missing_ok=True)


def _whole_batches(data: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of the whole batches at the start of ``data``."""
    position = 0
    while len(data) - position >= HEADER_SIZE:
        header = read_header(data, position)
        if position + header.size > len(data):
            return
        yield position, header
        position += header.size
