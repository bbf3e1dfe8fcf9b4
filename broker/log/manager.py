"""A broker's partition logs under one directory (Kafka's LogManager, one log dir).

At start every ``<topic>-<partition>`` folder is opened before the broker serves, on a
few threads (Kafka's log loading): whether it needs recovery comes from two files Kafka
keeps too, a clean-shutdown marker (written by ``close``, removed at start) and
``recovery-point-offset-checkpoint``, and after a crash the scan of everything past the
recovery point can take seconds per gigabyte, which must not happen on the event loop
once the broker heartbeats. The high watermarks are
checkpointed here as well (``replication-offset-checkpoint``), since a restarted
replica must not serve or count what it cannot know was committed.

A removed partition's folder is renamed to ``<name>.<hex>-delete`` first (an atomic
step a crash cannot undo halfway, with the parent folder fsynced, so a topic re-created
under the same name never sees the old data) and then deleted; leftovers are deleted at
start. Nothing of a removed log is flushed: it is deleted.

With a ``BackgroundFlusher`` (the broker's case), rolled segments, ``flush.ms`` flushes,
the checkpoint files and the deletion of removed folders run on its thread; without one
(tools, tests), at once.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from raftka.broker.log import checkpoint
from raftka.broker.log.config import LogConfig
from raftka.broker.log.flusher import BackgroundFlusher
from raftka.broker.log.partition_log import METADATA_FILE, PartitionLog, stored_topic_id
from raftka.raft.storage.fsio import fsync_dir

log = structlog.get_logger("raftka.broker.log")
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
RECOVERY_POINTS_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS_FILE = "replication-offset-checkpoint"
DELETE_SUFFIX = "-delete"
RECOVERY_THREADS = 2  # Kafka's num.recovery.threads.per.data.dir; CRC-32C and reads leave the GIL


def _partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    def __init__(self, directory: Path, flusher: BackgroundFlusher | None = None) -> None:
        self.directory = directory
        self._flusher = flusher
        self._logs: dict[str, PartitionLog] = {}
        self._clean_shutdown = False
        self._recovery_points: dict[str, int] = {}
        self._found_at_start: set[str] = set()
        self._claimed: set[str] = set()  # logs the metadata has given this broker since start

    def open_all(self) -> None:
        """Open (and after a crash recover) every log found, in parallel; the metadata
        later claims each (``get_or_create``) with its topic's configs, or the broker
        deletes it as a stray."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(f"*{DELETE_SUFFIX}"):
            shutil.rmtree(leftover, ignore_errors=True)
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        self._clean_shutdown = marker.exists()
        marker.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._recovery_points = dict(_read_offsets(self.directory / RECOVERY_POINTS_FILE))
        self._found_at_start = {p.parent.name for p in self.directory.glob(f"*/{METADATA_FILE}")}
        names = sorted(self._found_at_start)
        with concurrent.futures.ThreadPoolExecutor(
            RECOVERY_THREADS, thread_name_prefix="log-recovery"
        ) as pool:
            for name, opened in zip(names, pool.map(self._open_found, names), strict=True):
                if opened is not None:
                    self._logs[name] = opened

    def _open_found(self, name: str) -> PartitionLog | None:
        topic_id = stored_topic_id(self.directory / name)
        if topic_id is None:
            return None
        return self._open(name, topic_id, LogConfig())

    def remove_strays(self, assigned: set[str]) -> list[str]:
        """Delete the folders found at start that the metadata no longer gives this broker
        (their topic was deleted, or the partition moved, while it was down: Kafka's stray
        logs). Call once the image holds this broker's own registration, so it reflects
        every change made before the broker came back."""
        strays = sorted(self._found_at_start - assigned - self._claimed)
        for name in strays:
            log.info("deleting a stray partition log", partition=name)
            self.remove(name)
        self._found_at_start = set()
        return strays

    def names(self) -> list[str]:
        return sorted(self._logs)

    def get(self, name: str) -> PartitionLog | None:
        return self._logs.get(name)

    def get_or_create(self, topic: str, partition: int, topic_id: bytes, config: LogConfig) -> PartitionLog:
        name = _partition_name(topic, partition)
        self._claimed.add(name)
        existing = self._logs.get(name)
        if existing is not None and existing.topic_id == topic_id:
            existing.update_config(config)
            return existing
        if existing is not None:
            log.info("replacing the log of a deleted topic with the same name", partition=name)
            self.remove(name)
        opened = self._logs[name] = self._open(name, topic_id, config)
        return opened

    def _open(self, name: str, topic_id: bytes, config: LogConfig) -> PartitionLog:
        return PartitionLog.open(
            self.directory / name,
            topic_id,
            config,
            clean_shutdown=self._clean_shutdown,
            recovery_point=self._recovery_points.get(name, 0),
            background=self._flusher,
        )

    def remove(self, name: str) -> None:
        self._claimed.discard(name)
        partition_log = self._logs.pop(name, None)
        if partition_log is not None:
            partition_log.close_unflushed()
        directory = self.directory / name
        if directory.exists():
            self._rename_and_delete(directory)

    def _rename_and_delete(self, directory: Path) -> None:
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        directory.rename(doomed)
        fsync_dir(self.directory)
        if self._flusher is None:
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            self._flusher.submit(lambda: shutil.rmtree(doomed), f"deleting {doomed.name}")

    # upkeep -----------------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> None:
        for name, partition_log in self._logs.items():
            deleted = partition_log.delete_old_segments(now_ms)
            if deleted:
                log.info("retention deleted segments", partition=name, segments=deleted)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> None:
        """Forget idempotent producers whose last batch is ``expiration_ms`` old (Kafka's
        ``producer.id.expiration.ms``)."""
        for name, partition_log in self._logs.items():
            expired = partition_log.expire_producers(now_ms, expiration_ms)
            if expired:
                log.debug("producers expired", partition=name, producers=expired)

    def flush_due(self) -> None:
        """fsync the logs whose oldest unflushed write is older than their ``flush.ms``."""
        monotonic_ms = int(time.monotonic() * 1000)
        for partition_log in self._logs.values():
            since = partition_log.first_unflushed_ms
            if since is not None and monotonic_ms - since >= partition_log.config.flush_ms:
                if self._flusher is None:
                    partition_log.flush()
                elif (job := partition_log.flush_job()) is not None:
                    self._flusher.flush(partition_log, job)

    def checkpoint_recovery_points(self, then: Callable[[], None] | None = None) -> None:
        """Write the logs' recovery points; ``then``, on the loop, once that is done."""
        points = {**self._recovery_points, **{n: pl.recovery_point for n, pl in self._logs.items()}}
        self._write_checkpoint(RECOVERY_POINTS_FILE, sorted(points.items()), then)

    def write_high_watermarks(self, high_watermarks: Mapping[str, int]) -> None:
        self._write_checkpoint(HIGH_WATERMARKS_FILE, sorted(high_watermarks.items()))

    def _write_checkpoint(
        self, name: str, entries: list[tuple[str | int, int]], then: Callable[[], None] | None = None
    ) -> None:
        path = self.directory / name
        if self._flusher is None:
            checkpoint.write(path, entries)
            if then is not None:
                then()
        else:
            self._flusher.submit(lambda: checkpoint.write(path, entries), name, then)

    def read_high_watermarks(self) -> dict[str, int]:
        return dict(_read_offsets(self.directory / HIGH_WATERMARKS_FILE))

    def close(self) -> None:
        """Flush every log, checkpoint, and mark the shutdown clean."""
        if self._flusher is not None:
            self._flusher.close()
            self._flusher = None
        for partition_log in self._logs.values():
            partition_log.close()
        self.checkpoint_recovery_points()
        (self.directory / CLEAN_SHUTDOWN_FILE).touch()
        fsync_dir(self.directory)
        self._logs.clear()


def _read_offsets(path: Path) -> list[tuple[str, int]]:
    try:
        return checkpoint.read(path)
    except checkpoint.CheckpointError as e:
        log.warning("ignoring an unreadable checkpoint; logs will be recovered", detail=str(e))
        return []
