"""A broker's partition logs under one directory (Kafka's LogManager, one log dir).

At start every ``<topic>-<partition>`` folder is opened before the broker serves, on a
few threads (Kafka's log loading): whether it needs recovery comes from two files Kafka
keeps too, a clean-shutdown marker (written by ``close``, removed at start; it names the
broker epoch the broker stopped at, which the broker registers with as
``previous_broker_epoch``: KIP-966's proof that its logs hold what they held; without
it, the directory's id, ``directory_id``, tells a crash from a wiped directory) and
``recovery-point-offset-checkpoint``, and after a crash the scan of everything past the
recovery point can take seconds per gigabyte, which must not happen on the event loop
once the broker heartbeats. The high watermarks are
checkpointed here as well (``replication-offset-checkpoint``), since a restarted
replica must not serve or count what it cannot know was committed.

A removed partition's folder is renamed to ``<name>.<hex>-delete`` first (an atomic
step a crash cannot undo halfway, with the parent folder fsynced, so a topic re-created
under the same name never sees the old data; ``folder_names`` keeps the name within a
file name's length) and then deleted; leftovers are deleted at start. Nothing of a
removed log is flushed: it is deleted. Only folders whose names parse as a partition's
are opened as logs. One log that cannot be opened or deleted fails alone: the error goes
to the caller, who takes that partition offline, and the others serve.

With a ``BackgroundFlusher`` (the broker's case), rolled segments, ``flush.ms`` flushes,
the checkpoint files and the deletion of removed folders run on its thread; without one
(tools, tests), at once.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from raftka.broker.log import checkpoint, directory_id
from raftka.broker.log.cleaner.manager import Candidate
from raftka.broker.log.config import LogConfig
from raftka.broker.log.flusher import BackgroundFlusher
from raftka.broker.log.folder_names import (
    delete_folder,
    is_delete_folder,
    parse_partition_folder,
    partition_folder,
)
from raftka.broker.log.partition_log import METADATA_FILE, PartitionLog, stored_topic_id
from raftka.node.descriptors import DESCRIPTORS, TooFewDescriptors
from raftka.raft.storage.fsio import fsync_dir

log = structlog.get_logger("raftka.broker.log")
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
RECOVERY_POINTS_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARKS_FILE = "replication-offset-checkpoint"
LOGS_NAMED_MAX = 10  # partitions named in one log line; the rest are counted
RECOVERY_THREADS = 2  # Kafka's num.recovery.threads.per.data.dir; CRC-32C and reads leave the GIL


class LogManager:
    def __init__(self, directory: Path, flusher: BackgroundFlusher | None = None) -> None:
        self.directory = directory
        self._flusher = flusher
        self._logs: dict[str, PartitionLog] = {}
        self._clean_shutdown = False
        self.clean_shutdown_epoch: int | None = None  # the epoch the marker named, if any
        self.directory_id = b""  # KIP-858's directory.id, read (or first written) at start
        self.found_at_start: frozenset[str] = frozenset()  # partition folders there at start
        self._recovery_points: dict[str, int] = {}
        self._found_at_start: set[str] = set()
        self._claimed: set[str] = set()  # logs the metadata has given this broker since start
        self._failed: set[str] = set()  # logs forgotten after a failure: recovered when opened again
        self._left_closed: list[str] = []  # logs found at start not opened for want of descriptors

    def open_all(self) -> None:
        """Open (and after a crash recover) every log found, in parallel; the metadata
        later claims each (``get_or_create``) with its topic's configs, or the broker
        deletes it as a stray."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.iterdir():
            if is_delete_folder(leftover.name):
                shutil.rmtree(leftover, ignore_errors=True)
        self.directory_id = directory_id.load_or_create(self.directory)
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        self._clean_shutdown = marker.exists()
        self.clean_shutdown_epoch = _marked_epoch(marker) if self._clean_shutdown else None
        marker.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._recovery_points = dict(_read_offsets(self.directory / RECOVERY_POINTS_FILE))
        self._found_at_start = {
            p.parent.name
            for p in self.directory.glob(f"*/{METADATA_FILE}")
            if parse_partition_folder(p.parent.name) is not None
        }
        self.found_at_start = frozenset(self._found_at_start)
        names = sorted(self._found_at_start)
        with concurrent.futures.ThreadPoolExecutor(
            RECOVERY_THREADS, thread_name_prefix="log-recovery"
        ) as pool:
            for name, opened in zip(names, pool.map(self._open_found, names), strict=True):
                if opened is not None:
                    self._logs[name] = opened
        if self._left_closed:
            log.error(
                "partition logs found at start left closed: too few file descriptors free; "
                "each is offline here once the metadata gives it to this broker",
                count=len(self._left_closed),
                first=sorted(self._left_closed)[:LOGS_NAMED_MAX],
            )

    def _open_found(self, name: str) -> PartitionLog | None:
        """None if it has no topic id or cannot be opened: the metadata's claim tries again."""
        topic_id = stored_topic_id(self.directory / name)
        if topic_id is None:
            return None
        try:
            DESCRIPTORS.claim_for_replica(name, len(list((self.directory / name).glob("*.log"))))
        except TooFewDescriptors:
            self._left_closed.append(name)
            return None
        try:
            return self._open(name, topic_id, LogConfig())
        except Exception as e:  # one bad log must not keep the broker from serving the rest
            log.error("cannot open a partition log found at start", partition=name, error=repr(e))
            self._failed.add(name)
            return None

    def remove_strays(self, assigned: set[str]) -> list[str]:
        """Delete the folders found at start that the metadata no longer gives this broker
        (their topic was deleted, or the partition moved, while it was down: Kafka's stray
        logs). Call once the image holds this broker's own registration, so it reflects
        every change made before the broker came back."""
        strays = sorted(self._found_at_start - assigned - self._claimed)
        for name in strays:
            log.info("deleting a stray partition log", partition=name)
            try:
                self.remove(name)
            except OSError as e:  # left on disk: tried again at the next start
                log.error("cannot delete a stray partition log", partition=name, error=repr(e))
        self._found_at_start = set()
        return strays

    def names(self) -> list[str]:
        return sorted(self._logs)

    def get(self, name: str) -> PartitionLog | None:
        return self._logs.get(name)

    def get_or_create(self, topic: str, partition: int, topic_id: bytes, config: LogConfig) -> PartitionLog:
        name = partition_folder(topic, partition)
        self._claimed.add(name)
        existing = self._logs.get(name)
        if existing is not None and existing.topic_id == topic_id:
            existing.update_config(config)
            return existing
        stored = existing.topic_id if existing is not None else stored_topic_id(self.directory / name)
        if stored not in (None, topic_id):
            log.info("replacing the log of a deleted topic with the same name", partition=name)
            self.remove(name)
        DESCRIPTORS.claim_for_replica(name)  # its active segment's; raises near the limit
        opened = self._logs[name] = self._open(name, topic_id, config)
        return opened

    def _open(self, name: str, topic_id: bytes, config: LogConfig) -> PartitionLog:
        return PartitionLog.open(
            self.directory / name,
            topic_id,
            config,
            clean_shutdown=self._clean_shutdown and name not in self._failed,
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

    def forget(self, name: str) -> None:
        """Stop using a log that failed, leaving its folder as it is (its partition went
        offline); ``get_or_create`` opens it again."""
        partition_log = self._logs.pop(name, None)
        if partition_log is None:
            return
        self._failed.add(name)
        try:
            partition_log.close()
        except OSError as e:
            log.warning("closing a failed partition log failed too", partition=name, error=repr(e))
        self._recovery_points[name] = partition_log.recovery_point

    def _rename_and_delete(self, directory: Path) -> None:
        doomed = directory.with_name(delete_folder(directory.name))
        directory.rename(doomed)
        fsync_dir(self.directory)
        if self._flusher is None:
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            self._flusher.submit(lambda: shutil.rmtree(doomed), f"deleting {doomed.name}")

    # upkeep -----------------------------------------------------------------------------

    def apply_retention(self, now_ms: int, high_watermarks: Mapping[str, int]) -> None:
        """Retention on every log, each bounded by its partition's high watermark; a log
        with none (not yet claimed by the metadata) keeps everything."""
        for name, partition_log in self._logs.items():
            high_watermark = high_watermarks.get(name)
            if high_watermark is None:
                continue
            deleted = partition_log.delete_old_segments(now_ms, high_watermark)
            if deleted:
                log.info("retention deleted segments", partition=name, segments=deleted)

    def cleaner_candidates(
        self, high_watermarks: Callable[[], Mapping[str, int]]
    ) -> Callable[[], list[Candidate]]:
        """What the log cleaner may clean, asked afresh each time it chooses: every log whose
        config says compact, up to its last stable offset (at most its high watermark; a log
        with none, not yet claimed, is left alone)."""

        def candidates() -> list[Candidate]:
            marks = high_watermarks()
            found = []
            for name, partition_log in self._logs.items():
                config = partition_log.config
                high_watermark = marks.get(name)
                if config.compact and high_watermark is not None:
                    upper = partition_log.last_stable_offset(high_watermark)
                    found.append(Candidate(name, partition_log, config, upper))
            return found

        return candidates

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

    def close(self, broker_epoch: int = -1) -> None:
        """Flush every log, checkpoint, and mark the shutdown clean at ``broker_epoch``
        (-1: the broker never registered, so the marker vouches for the logs only)."""
        if self._flusher is not None:
            self._flusher.close()
            self._flusher = None
        for partition_log in self._logs.values():
            partition_log.close()
        self.checkpoint_recovery_points()
        marker = {"broker_epoch": broker_epoch} if broker_epoch >= 0 else {}
        with open(self.directory / CLEAN_SHUTDOWN_FILE, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.directory)
        self._logs.clear()


def _read_offsets(path: Path) -> list[tuple[str, int]]:
    try:
        return checkpoint.read(path)
    except checkpoint.CheckpointError as e:
        log.warning("ignoring an unreadable checkpoint; logs will be recovered", detail=str(e))
        return []


def _marked_epoch(marker: Path) -> int | None:
    """The broker epoch a clean-shutdown marker names; None for an empty marker (an older
    version's, or a broker that never registered) or an unreadable one."""
    try:
        epoch = json.loads(marker.read_text() or "{}").get("broker_epoch")
    except (OSError, ValueError, AttributeError):
        return None
    return epoch if isinstance(epoch, int) and epoch >= 0 else None
