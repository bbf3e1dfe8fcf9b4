"""The log cleaner (Kafka's ``LogCleaner`` and ``LogCleanerManager``): which compacted log
to clean next, its passes off the event loop, the cleaner checkpoints, the uncleanable
logs and the metrics.

It runs by the broker's ``[log.cleaner]`` (``CleanerConfig``: ``enable``, ``threads``,
``dedupe_buffer_size``, ``io_max_bytes_per_second``, ``backoff_ms``). The broker hands it
``candidates``: each compacted partition log with its ``LogConfig`` and
the upper bound of what may be cleaned (its last stable offset, never above its high
watermark). Each of ``threads`` workers takes the due log with the largest dirty ratio
(a log overdue by ``max.compaction.lag.ms`` first) not being cleaned by another, takes
its plan on the loop, runs the pass on a thread of its own (``asyncio.to_thread``,
throttled to ``io.max.bytes.per.second`` for all workers together), swaps the cleaned
segments in on the loop, and writes ``cleaner-offset-checkpoint`` (the map's end per
partition folder: the next pass's first dirty offset) in the log directory, as Kafka's.
With nothing due it waits ``backoff.ms``. A log whose pass fails (a damaged batch, a key
map too small for one batch) is uncleanable until the broker restarts, its cause logged
once; the others are cleaned on.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from raftka.broker.log import checkpoint
from raftka.broker.log.cleaner.cleanable import Cleanable, cleanable, plan
from raftka.broker.log.cleaner.offset_map import OffsetMap
from raftka.broker.log.cleaner.recopy import CleanerError, CleanPlan, PassResult, clean
from raftka.broker.log.cleaner.swap import Step, discard, swap
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.node.config import CleanerConfig

log = structlog.get_logger("raftka.broker.log.cleaner")
CHECKPOINT_FILE = "cleaner-offset-checkpoint"


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str  # the partition folder, ``<topic>-<partition>``
    log: PartitionLog
    config: LogConfig  # the log's config when it was listed
    upper_bound: int  # the last stable offset, at most the high watermark


@dataclass(slots=True)
class CleanerMetrics:
    """Kafka's LogCleaner and LogCleanerManager gauges, as plain values."""

    max_dirty_percent: float = 0.0
    cleaner_recopy_percent: float = 0.0
    max_clean_time_secs: float = 0.0
    max_buffer_utilization_percent: float = 0.0
    uncleanable_partitions_count: int = 0


class Throttler:
    """At most ``bytes_per_second`` over all callers (Kafka's ``Throttler``; 0: unbounded):
    a caller past the rate sleeps until it is back within it. Called from the pass threads."""

    def __init__(self, bytes_per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = bytes_per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._since = clock()
        self._bytes = 0

    def __call__(self, count: int) -> None:
        if not self._rate:
            return
        with self._lock:
            self._bytes += count
            elapsed = self._clock() - self._since
            wait = self._bytes / self._rate - elapsed
            if elapsed >= 1.0:
                self._since, self._bytes = self._clock(), 0
        if wait > 0:
            time.sleep(wait)


class LogCleaner:
    def __init__(
        self,
        directory: Path,
        config: CleanerConfig,
        candidates: Callable[[], Iterable[Candidate]],
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.directory = directory
        self.config = config
        self._candidates = candidates
        self._wall_ms = wall_ms
        self.checkpoints: dict[str, int] = dict(_read_checkpoint(directory / CHECKPOINT_FILE))
        self.uncleanable: dict[str, str] = {}  # partition folder -> why
        self.metrics = CleanerMetrics()
        self._in_progress: set[str] = set()
        self._throttle = Throttler(config.io_max_bytes_per_second)
        self._tasks: list[asyncio.Task[None]] = []
        self._checkpoint_lock = threading.Lock()
        self._stopping = False

    # choosing ----------------------------------------------------------------------------

    def choose(self, now_ms: int) -> tuple[Candidate, Cleanable] | None:
        """The due log with the largest dirty ratio, the overdue ones first."""
        best: tuple[Candidate, Cleanable] | None = None
        max_ratio = 0.0
        for candidate in self._candidates():
            if not candidate.config.compact or candidate.name in self.uncleanable:
                continue
            found = cleanable(
                candidate.log,
                self.checkpoints.get(candidate.name),
                candidate.upper_bound,
                now_ms,
                candidate.config,
            )
            max_ratio = max(max_ratio, found.dirty_ratio)
            if candidate.name in self._in_progress or not found.due(candidate.config):
                continue
            if best is None or (found.overdue, found.dirty_ratio) > (best[1].overdue, best[1].dirty_ratio):
                best = (candidate, found)
        self.metrics.max_dirty_percent = 100 * max_ratio
        return best

    # one pass ----------------------------------------------------------------------------

    def clean_now(self, offset_map: OffsetMap, step: Step | None = None) -> PassResult | None:
        """Choose and clean one log, all on the caller's thread (tests, tools)."""
        now_ms = self._wall_ms()
        chosen = self.choose(now_ms)
        if chosen is None:
            return None
        candidate, found = chosen
        the_plan = plan(candidate.log, found, candidate.config)
        started = time.monotonic()
        try:
            result = self._pass(the_plan, offset_map, now_ms)
        except CleanerError as e:
            self._mark_uncleanable(candidate.name, str(e))
            return None
        if self._finish(candidate, the_plan, result, time.monotonic() - started, step):
            self._write_checkpoint(sorted(self.checkpoints.items()))
        return result

    def _finish(
        self, candidate: Candidate, the_plan: CleanPlan, result: PassResult, seconds: float, step: Step | None
    ) -> bool:
        """On the loop: swap the cleaned groups in and move the log's checkpoint to the
        map's end; whether it moved (the file is the caller's to write)."""
        partition_log = candidate.log
        current = list(self._candidates())
        if not any(c.log is partition_log for c in current):  # removed meanwhile
            for group in result.groups:
                discard(partition_log.directory, group)
            return False
        swapped = all(
            [  # every group tried: one whose segments changed is dropped alone
                swap(
                    partition_log.directory,
                    partition_log.segments,
                    group,
                    candidate.config.index_interval_bytes,
                    step,
                )
                for group in result.groups
            ]
        )
        read = sum(s.size for s in the_plan.sources)
        self.metrics.cleaner_recopy_percent = 100 * result.bytes_written / read if read else 0.0
        self.metrics.max_clean_time_secs = seconds
        self.metrics.max_buffer_utilization_percent = 100 * result.map_utilization
        if not swapped:
            log.info("a cleaned log changed meanwhile; its pass is dropped", partition=candidate.name)
            return False
        self.checkpoints[candidate.name] = result.end_offset
        names = {c.name for c in current}  # a removed partition's entry goes with it
        self.checkpoints = {name: offset for name, offset in self.checkpoints.items() if name in names}
        log.info(
            "cleaned a log",
            partition=candidate.name,
            end_offset=result.end_offset,
            segments=len(result.groups),
            recopy_percent=round(self.metrics.cleaner_recopy_percent, 1),
        )
        return True

    def _write_checkpoint(self, entries: list[tuple[str | int, int]]) -> None:
        """``cleaner-offset-checkpoint`` (one writer at a time: the workers share the file)."""
        with self._checkpoint_lock:
            checkpoint.write(self.directory / CHECKPOINT_FILE, entries)

    def _mark_uncleanable(self, name: str, why: str) -> None:
        self.uncleanable[name] = why
        self.metrics.uncleanable_partitions_count = len(self.uncleanable)
        log.error("a partition log cannot be cleaned; it is left as it is", partition=name, reason=why)

    # workers -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start ``threads`` workers on the running loop (nothing with ``enable`` off). Each
        allocates its share of the dedupe buffer when it first has a log to clean, so a
        broker without compacted topics holds none."""
        if not self.config.enable:
            return
        share = self.config.dedupe_buffer_size // self.config.threads
        for i in range(self.config.threads):
            self._tasks.append(asyncio.create_task(self._work(share), name=f"log-cleaner-{i}"))

    async def stop(self) -> None:
        """Stop the workers; a pass under way finishes its thread first (it is bounded)."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _work(self, memory_bytes: int) -> None:
        maps: list[OffsetMap] = []  # the worker's one map, once made

        def offset_map() -> OffsetMap:
            if not maps:
                maps.append(OffsetMap(memory_bytes))
            return maps[0]

        while not self._stopping:
            try:
                cleaned = await self._clean_one(offset_map)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one log's trouble must not stop the cleaner
                log.error("log cleaner pass failed", error=repr(e))
                cleaned = False
            if not cleaned:
                await asyncio.sleep(self.config.backoff_ms / 1000)

    def _pass(self, the_plan: CleanPlan, offset_map: OffsetMap, now_ms: int) -> PassResult:
        """On a thread: the pass; it owns ``the_plan``'s descriptors (a cancelled await
        leaves it running until it sees the cleaner stopping)."""

        def throttle(count: int) -> None:
            if self._stopping:
                raise PassStopped
            self._throttle(count)

        try:
            return clean(the_plan, offset_map, now_ms, throttle)
        finally:
            the_plan.close()

    async def _clean_one(self, offset_map: Callable[[], OffsetMap]) -> bool:
        now_ms = self._wall_ms()
        chosen = self.choose(now_ms)
        if chosen is None:
            return False
        candidate, found = chosen
        self._in_progress.add(candidate.name)
        try:
            the_plan = plan(candidate.log, found, candidate.config)
            started = time.monotonic()
            try:
                result = await asyncio.to_thread(self._pass, the_plan, offset_map(), now_ms)
            except CleanerError as e:
                self._mark_uncleanable(candidate.name, str(e))
                return True
            if self._finish(candidate, the_plan, result, time.monotonic() - started, None):
                await asyncio.to_thread(self._write_checkpoint, sorted(self.checkpoints.items()))
            return True
        finally:
            self._in_progress.discard(candidate.name)


class PassStopped(Exception):
    """The cleaner is stopping: the pass in its thread gives up (its files are removed)."""


def _read_checkpoint(path: Path) -> list[tuple[str, int]]:
    try:
        return checkpoint.read(path)
    except checkpoint.CheckpointError as e:
        log.warning(
            "ignoring an unreadable cleaner checkpoint; logs are cleaned from their start", detail=str(e)
        )
        return []
