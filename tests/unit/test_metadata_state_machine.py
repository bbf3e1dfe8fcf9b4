"""The state machine raft drives: one image per committed batch, snapshots at the interval."""

from __future__ import annotations

import asyncio

import pytest

from raftka.metadata import records
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.metadata.snapshot import SnapshotError, decode_image, encode_image, read_snapshot
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage.batch_codec import frame_bytes
from tests.unit import metadata_support as m
from tests.unit.metadata_support import Record

T1 = m.topic_id(1)


START_MS = 1_700_000_000_000
NOOP_BYTES = frame_bytes(Batch(0, 1, 0, BatchKind.NOOP, (control.NOOP_RECORD,)))


class Log:
    """Builds consecutive batches the way raft commits them."""

    def __init__(self, epoch: int = 1) -> None:
        self.next_offset = 0
        self.epoch = epoch

    def batch(self, *items: Record | bytes) -> Batch:
        raw = tuple(item if isinstance(item, bytes) else records.encode(item) for item in items)
        return self._next(BatchKind.DATA, raw, START_MS + self.next_offset)

    def noop(self, timestamp_ms: int | None = None) -> Batch:
        """Raft's own NoOp control batch, as an idle leader appends one."""
        at = START_MS + self.next_offset if timestamp_ms is None else timestamp_ms
        return self._next(BatchKind.NOOP, (control.NOOP_RECORD,), at)

    def _next(self, kind: BatchKind, raw: tuple[bytes, ...], timestamp_ms: int) -> Batch:
        batch = Batch(self.next_offset, self.epoch, timestamp_ms, kind, raw)
        self.next_offset = batch.next_offset
        return batch


def machine(interval: int = 1000, **policy: int) -> tuple[MetadataStateMachine, list[Snapshot]]:
    saved: list[Snapshot] = []
    return MetadataStateMachine(
        SnapshotPolicy(snapshot_interval_records=interval, **policy), saved.append
    ), saved


def test_each_batch_publishes_one_image_to_every_listener() -> None:
    sm, _ = machine()
    seen: list[MetadataImage] = []
    sm.add_listener(seen.append)
    log = Log()
    sm.apply(log.batch(m.register(1, 0), m.topic("a", T1), m.partition(T1, 0, [1])))
    sm.apply(log.batch(m.commit("g", T1, 0, 9)))
    assert [image.offset for image in seen] == [3, 4]
    assert sm.image is seen[-1]
    assert sm.image.offsets["g"][(T1, 0)].offset == 9 and sm.image.topic("a") is not None
    assert not sm.loaded_snapshot


def test_a_batch_that_does_not_apply_is_skipped_whole() -> None:
    sm, _ = machine()
    log = Log()
    sm.apply(log.batch(m.register(1, 0), m.topic("a", T1)))
    before = sm.image
    sm.apply(log.batch(m.partition(T1, 0, [1]), m.change(T1, 7, leader=1)))  # the second record fails
    sm.apply(log.batch(m.topic("b", m.topic_id(2)), b"\xff\xff"))  # the second record is not a record
    assert sm.skipped_batches == 2
    assert sm.image.offset == 6 and sm.image.topics_by_id == before.topics_by_id
    sm.apply(log.batch(m.partition(T1, 0, [1])))  # and the log goes on
    assert sm.image.topics_by_id[T1].partitions[0].leader == 1


def test_snapshots_every_interval_records_at_a_batch_boundary() -> None:
    sm, saved = machine(interval=5)
    log = Log(epoch=3)
    sm.apply(log.batch(m.register(1, 0), m.topic("a", T1)))
    sm.apply(log.batch(m.partition(T1, 0, [1]), m.partition(T1, 1, [1])))
    assert saved == []
    sm.apply(log.batch(m.commit("g", T1, 0, 1), m.commit("g", T1, 1, 1)))  # 6 records: over the interval
    assert [s.id for s in saved] == [SnapshotId(6, 3)]
    assert decode_image(saved[0].data) == sm.image
    assert read_snapshot(saved[0].data).timestamp_ms == 1_700_000_000_004  # the last batch's
    for _ in range(4):
        sm.apply(log.batch(m.no_op()))
    assert [s.id.offset for s in saved] == [6]
    sm.apply(log.batch(m.no_op()))
    assert [s.id.offset for s in saved] == [6, 11]


def test_control_batches_advance_the_image_and_change_nothing_else() -> None:
    sm, saved = machine(interval=1)
    seen: list[MetadataImage] = []
    sm.add_listener(seen.append)
    log = Log()
    sm.apply(log.batch(m.topic("a", T1)))
    before = sm.image
    sm.apply(log.noop())
    assert sm.image.offset == 2 and sm.image.topics_by_id is before.topics_by_id
    assert sm.skipped_batches == 0 and seen[-1] is sm.image
    assert [s.id.offset for s in saved] == [1]  # raft's records are not the layer above's


def test_an_idle_log_snapshots_once_its_encoded_bytes_pass_the_bound() -> None:
    sm, saved = machine(snapshot_interval_bytes=10 * NOOP_BYTES)
    log = Log(epoch=4)
    for _ in range(9):
        sm.apply(log.noop())
    assert saved == []
    sm.apply(log.noop())
    assert [s.id for s in saved] == [SnapshotId(10, 4)]  # the end of the tenth NoOp
    for _ in range(10):
        sm.apply(log.noop())
    assert [s.id.offset for s in saved] == [10, 20]


def test_an_idle_log_snapshots_once_its_batches_span_the_interval() -> None:
    sm, saved = machine(snapshot_interval_ms=1000)
    log = Log()
    for at in (0, 500, 999):
        sm.apply(log.noop(START_MS + at))
    assert saved == []
    sm.apply(log.noop(START_MS + 1000))
    assert [s.id for s in saved] == [SnapshotId(4, 1)]
    assert read_snapshot(saved[0].data).timestamp_ms == START_MS + 1000

    # A node restored from it counts from the snapshot's time, not from its own start.
    restarted, again = machine(snapshot_interval_ms=1000)
    restarted.restore(saved[0])
    restarted.apply(log.noop(START_MS + 1999))
    assert again == []
    restarted.apply(log.noop(START_MS + 2000))
    assert [s.id.offset for s in again] == [6]


def test_zero_interval_ms_never_snapshots_on_time() -> None:
    sm, saved = machine(snapshot_interval_ms=0)
    log = Log()
    sm.apply(log.noop(START_MS))
    sm.apply(log.noop(START_MS + 10**9))
    assert saved == []


def test_a_snapshot_taken_at_the_end_of_a_noop_restores_at_its_offset() -> None:
    sm, saved = machine(snapshot_interval_bytes=1)  # every batch
    log = Log(epoch=2)
    sm.apply(log.batch(m.register(1, 0), m.topic("a", T1)))
    sm.apply(log.noop())
    assert saved[-1].id == SnapshotId(3, 2)

    restarted, _ = machine()
    restarted.restore(saved[-1])  # refuses an image whose offset is not the snapshot's
    assert restarted.image == sm.image and restarted.image.offset == 3
    restarted.apply(log.batch(m.partition(T1, 0, [1])))
    assert restarted.image.topics_by_id[T1].partitions[0].leader == 1


def test_restore_gives_the_same_image_and_the_tail_follows() -> None:
    sm, saved = machine(interval=3)
    log = Log()
    sm.apply(log.batch(m.register(1, 0), m.topic("a", T1), m.partition(T1, 0, [1])))
    tail = log.batch(m.commit("g", T1, 0, 5))
    sm.apply(tail)

    restarted, _ = machine(interval=3)
    seen: list[MetadataImage] = []
    restarted.add_listener(seen.append)
    restarted.restore(saved[0])
    assert restarted.loaded_snapshot and seen == [restarted.image]
    restarted.apply(tail)
    assert restarted.image == sm.image


def test_restore_refuses_data_that_is_no_image_at_that_offset() -> None:
    sm, _ = machine()
    with pytest.raises(SnapshotError, match="holds an image at offset 0"):
        sm.restore(Snapshot(SnapshotId(5, 1), encode_image(EMPTY)))
    with pytest.raises(SnapshotError, match="too short"):
        sm.restore(Snapshot(SnapshotId(5, 1), b"journal"))
    assert sm.image is EMPTY and not sm.loaded_snapshot


async def _until(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


def test_inside_a_loop_one_snapshot_is_encoded_off_the_loop_at_a_time() -> None:
    asyncio.run(_one_snapshot_in_flight())


async def _one_snapshot_in_flight() -> None:
    sm, saved = machine(interval=1)
    log = Log()
    sm.apply(log.batch(m.topic("a", T1)))
    sm.apply(log.batch(m.no_op()))  # due again, but the first is still encoding: not a second one
    assert saved == []  # nothing happens on the loop thread itself
    await _until(lambda: saved)
    assert [s.id.offset for s in saved] == [1]
    sm.apply(log.batch(m.no_op()))
    await _until(lambda: len(saved) == 2)
    assert saved[1].id.offset == 3 and decode_image(saved[1].data) == sm.image


def test_a_snapshot_encoded_before_a_restore_is_dropped() -> None:
    asyncio.run(_stale_snapshot())


async def _stale_snapshot() -> None:
    sm, saved = machine(interval=1)
    log = Log()
    sm.apply(log.batch(m.topic("a", T1)))
    sm.restore(Snapshot(SnapshotId(50, 2), encode_image(MetadataImage(offset=50))))
    await asyncio.get_running_loop().shutdown_default_executor()  # the stale encoding has finished
    for _ in range(3):  # and its hand-over (two loop callbacks) has run
        await asyncio.sleep(0)
    assert saved == [] and sm.image.offset == 50
