"""MetadataStateMachine: the metadata image kept by every node that follows the log.

Raft hands it every committed batch in order (``apply``) and snapshots to start from
(``restore``); it replays each DATA batch onto the current image through one
``MetadataDelta`` and publishes the new image to its listeners (the controller, the
broker). A batch is atomic: one controller request. If any record of it cannot be
decoded or replayed, the whole batch is skipped and logged; every replica runs the same
code on the same log, so every replica skips it alike, and none stops following the log.
Raft's control batches (LeaderChange, the idle leader's NoOps) change nothing but the
image's offset.

When its ``SnapshotPolicy`` says so (records, bytes or time since the last snapshot:
``raftka.raft.snapshot_schedule``) it snapshots the image at the batch boundary, control
batches included, and hands it to raft (``save_snapshot``). Encoding a large image
takes a while, so inside an event loop it runs on a worker thread (the image is
immutable) and the result is handed back on the loop; at most one snapshot is in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from raftka.metadata import records
from raftka.metadata.delta import MetadataDelta, ReplayError
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.metadata.records import RecordError
from raftka.metadata.snapshot import SnapshotError, encode_image, read_snapshot, rebuild_image
from raftka.raft.batch import Batch, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.snapshot_schedule import SnapshotPolicy, SnapshotSchedule

log = structlog.get_logger("raftka.metadata.state_machine")

Listener = Callable[[MetadataImage], None]


class MetadataStateMachine:
    def __init__(self, snapshot_policy: SnapshotPolicy, save_snapshot: Callable[[Snapshot], None]) -> None:
        self._schedule = SnapshotSchedule(snapshot_policy)
        self._save_snapshot = save_snapshot
        self._image = EMPTY
        self._listeners: list[Listener] = []
        self._snapshot_in_flight = False
        self._generation = 0  # bumped by restore: a snapshot encoded before it is stale
        self.loaded_snapshot = False
        self.skipped_batches = 0

    @property
    def image(self) -> MetadataImage:
        return self._image

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # raftka.raft.driver.StateMachine -------------------------------------------------------------

    def apply(self, batch: Batch) -> None:
        image = self._skip(batch) if batch.is_control else self._replay(batch)
        self._publish(image)
        if self._schedule.due(batch) and not self._snapshot_in_flight:
            self._schedule.restart(batch.timestamp_ms)
            self._snapshot(image, SnapshotId(batch.next_offset, batch.epoch), batch.timestamp_ms)

    def restore(self, snapshot: Snapshot) -> None:
        """Raises SnapshotError for data that is no image: the node cannot go on from it."""
        contents = read_snapshot(snapshot.data)
        image = rebuild_image(contents)
        if image.offset != snapshot.id.offset:
            raise SnapshotError(f"snapshot {snapshot.id} holds an image at offset {image.offset}")
        self._generation += 1
        self._snapshot_in_flight = False
        self._schedule.restart(contents.timestamp_ms if contents.timestamp_ms >= 0 else None)
        self.loaded_snapshot = True
        log.info("metadata image loaded from snapshot", offset=image.offset, bytes=len(snapshot.data))
        self._publish(image)

    # internals ------------------------------------------------------------------------------

    def _replay(self, batch: Batch) -> MetadataImage:
        delta = MetadataDelta(self._image)
        try:
            for raw in batch.records:
                delta.replay(records.decode(raw))
        except (RecordError, ReplayError) as exc:
            self.skipped_batches += 1
            log.error(
                "metadata batch skipped: it does not apply to the image",
                base_offset=batch.base_offset,
                epoch=batch.epoch,
                error=str(exc),
            )
            return self._skip(batch)
        return delta.apply(batch.next_offset)

    def _skip(self, batch: Batch) -> MetadataImage:
        """The same image, moved past ``batch``."""
        return MetadataDelta(self._image).apply(batch.next_offset)

    def _publish(self, image: MetadataImage) -> None:
        self._image = image
        for listener in self._listeners:
            listener(image)

    def _snapshot(self, image: MetadataImage, snapshot_id: SnapshotId, timestamp_ms: int) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tests, tools): encode right here
            self._save_snapshot(Snapshot(snapshot_id, encode_image(image, timestamp_ms=timestamp_ms)))
            return
        self._snapshot_in_flight = True
        generation = self._generation
        job = loop.run_in_executor(None, lambda: encode_image(image, timestamp_ms=timestamp_ms))
        job.add_done_callback(lambda done: self._encoded(done, snapshot_id, generation))

    def _encoded(self, done: asyncio.Future[bytes], snapshot_id: SnapshotId, generation: int) -> None:
        if generation != self._generation:
            return  # a restore replaced the image meanwhile; this snapshot is stale
        self._snapshot_in_flight = False
        if done.cancelled() or done.exception() is not None:
            log.error(
                "metadata snapshot encoding failed", offset=snapshot_id.offset, error=str(done.exception())
            )
            return
        self._save_snapshot(Snapshot(snapshot_id, done.result()))
