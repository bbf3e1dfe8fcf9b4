"""What of a partition log may be cleaned now (Kafka's ``LogCleanerManager.cleanableOffsets``
and ``LogToClean``), and the plan of a pass over it, taken on the event loop.

The clean part runs from the log start to the first dirty offset (the cleaner
checkpoint, reset to the log start when it lies outside the log); the dirty part from
there to the first uncleanable offset: the smallest of the caller's upper bound (the
last stable offset, never above the high watermark), the active segment's base, and the
base of the first segment holding a record younger than ``min.compaction.lag.ms``. Only
whole segments below it are cleaned. The dirty ratio is the dirty bytes over the bytes of
both parts; a log is due when it reaches ``min.cleanable.dirty.ratio``, or when its first
dirty batch is older than ``max.compaction.lag.ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftka.broker.log.cleaner.recopy import CleanPlan, LastRecord, SegmentSource
from raftka.broker.log.config import LogConfig

if TYPE_CHECKING:
    from raftka.broker.log.partition_log import PartitionLog


@dataclass(frozen=True, slots=True)
class Cleanable:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    overdue: bool  # a dirty record older than max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    def due(self, config: LogConfig) -> bool:
        return self.dirty_bytes > 0 and (self.overdue or self.dirty_ratio >= config.min_cleanable_dirty_ratio)


def cleanable(
    partition_log: PartitionLog,
    checkpoint: int | None,
    upper_bound: int,
    now_ms: int,
    config: LogConfig,
) -> Cleanable:
    segments = partition_log.segments
    start, end = partition_log.log_start_offset, partition_log.log_end_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    uncleanable = min(upper_bound, partition_log.active.base_offset)
    for segment in segments[:-1]:
        if now_ms - segment.max_timestamp < config.min_compaction_lag_ms:
            uncleanable = min(uncleanable, segment.base_offset)
            break
    first_dirty = min(first_dirty, uncleanable)
    clean = dirty = 0
    overdue = False
    for segment, after in zip(segments, segments[1:], strict=False):
        if after.base_offset > uncleanable:
            break
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            if not dirty:  # the first dirty segment's first batch (Kafka's ``getFirstBatchTimestamp``)
                first = segment.find(max(first_dirty, segment.base_offset))
                first_ms = -1 if first is None else first.header.max_timestamp
                overdue = 0 <= first_ms < now_ms - config.max_compaction_lag_ms
            dirty += segment.size
    return Cleanable(first_dirty, uncleanable, clean, dirty, overdue)


def plan(partition_log: PartitionLog, found: Cleanable, config: LogConfig) -> CleanPlan:
    """The segments from the log start wholly below the first uncleanable offset, and
    what the pass needs of the log's state."""
    segments = partition_log.segments
    chosen = [
        s
        for s, after in zip(segments, segments[1:], strict=False)
        if after.base_offset <= found.first_uncleanable_offset
    ]
    producers = {
        producer_id: LastRecord(entry.last.last_offset if entry.batches else None, entry.epoch)
        for producer_id, entry in partition_log.producers.producers.items()
    }
    return CleanPlan(
        directory=partition_log.directory,
        sources=[SegmentSource.of(s) for s in chosen],
        first_dirty_offset=found.first_dirty_offset,
        aborted=partition_log.aborted_transactions(
            partition_log.log_start_offset, found.first_uncleanable_offset
        ),
        producers=producers,
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
        delete_retention_ms=config.delete_retention_ms,
    )
