"""Disk syncs off the event loop: a broker's fsyncs of rolled segments, ``flush.ms``
flushes, its checkpoint files (a log's leader-epoch cache and start offset included) and
the deletion of removed logs run here, one at a time and in order, on one worker thread,
so a gigabyte of page cache being written back never stalls produce and fetch (Kafka
schedules the same work on its scheduler thread).

A partition log is only ever touched on the event loop: a finished flush is handed back
there (``PartitionLog.flushed``). A sync that fails is logged and its recovery point
stays where it was, so after a crash that log is scanned from there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

import structlog

from raftka.broker.log.partition_log import FlushJob, PartitionLog

log = structlog.get_logger("raftka.broker.log")


class BackgroundFlusher:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="log-flush")

    def flush(self, partition_log: PartitionLog, job: FlushJob) -> None:
        """Run ``job``; then, on the loop, tell ``partition_log``."""
        future = self._executor.submit(job.run)
        future.add_done_callback(
            lambda f: self._loop.call_soon_threadsafe(self._finished, partition_log, job, f)
        )

    def submit(self, work: Callable[[], None], what: str, then: Callable[[], None] | None = None) -> None:
        """Run ``work``; then, on the loop, ``then`` (after a failure too: it is logged)."""
        future = self._executor.submit(work)
        future.add_done_callback(lambda f: self._log_failure(f, what))
        if then is not None:
            future.add_done_callback(lambda f: self._loop.call_soon_threadsafe(then))

    def close(self) -> None:
        """Wait for every queued sync (a clean shutdown is declared after them)."""
        self._executor.shutdown(wait=True)

    @staticmethod
    def _finished(
        partition_log: PartitionLog, job: FlushJob, future: concurrent.futures.Future[None]
    ) -> None:
        if future.exception() is None:
            partition_log.flushed(job)
        else:
            log.error(
                "fsync failed; the recovery point stays",
                log_dir=str(job.directory),
                error=str(future.exception()),
            )

    @staticmethod
    def _log_failure(future: concurrent.futures.Future[None], what: str) -> None:
        if future.exception() is not None:
            log.error("background disk work failed", work=what, error=str(future.exception()))
