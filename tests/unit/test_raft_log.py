"""RaftLog: the epoch index, fetch validation, truncation and compaction."""

from __future__ import annotations

import pytest

from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.log import FetchValidation, RaftLog
from raftka.raft.storage.batch_codec import frame_bytes


def batches(*spec: tuple[int, int]) -> list[Batch]:
    """Consecutive batches from offset 0: each (epoch, records)."""
    out, offset = [], 0
    for epoch, count in spec:
        out.append(Batch(offset, epoch, 0, BatchKind.DATA, (b"r",) * count))
        offset += count
    return out


def snapshot_log(offset: int, epoch: int, *spec: tuple[int, int]) -> RaftLog:
    """A log whose snapshot ends at ``offset`` and whose batches follow it."""
    follow, base = [], offset
    for batch_epoch, count in spec:
        follow.append(Batch(base, batch_epoch, 0, BatchKind.DATA, (b"r",) * count))
        base += count
    return RaftLog(Snapshot(SnapshotId(offset, epoch), b"s"), follow)


# Offsets 0-1 in epoch 1, 2-4 in epoch 3, 5 in epoch 4: the log ends at 6.
LOG_SPEC = ((1, 2), (3, 2), (3, 1), (4, 1))


@pytest.fixture
def log() -> RaftLog:
    return RaftLog(None, batches(*LOG_SPEC))


# end_offset_for_epoch ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (0, OffsetAndEpoch(0, 0)),  # older than every batch: ends where the log starts
        (1, OffsetAndEpoch(2, 1)),
        (2, OffsetAndEpoch(2, 1)),  # absent: the largest epoch below it, and where that ends
        (3, OffsetAndEpoch(5, 3)),
        (4, OffsetAndEpoch(6, 4)),
        (9, OffsetAndEpoch(6, 4)),
    ],
)
def test_end_offset_for_epoch(log: RaftLog, epoch: int, expected: OffsetAndEpoch) -> None:
    assert log.end_offset_for_epoch(epoch) == expected


def test_end_offset_for_epoch_below_the_batches_uses_the_snapshot() -> None:
    log = snapshot_log(10, 2, (3, 2))
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(10, 0)  # older than the snapshot too
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(10, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(12, 3)


def test_end_offset_for_epoch_of_an_empty_log() -> None:
    assert RaftLog(None, []).end_offset_for_epoch(5) == OffsetAndEpoch(0, 0)


# validate_fetch ------------------------------------------------------------------------
VALID = FetchValidation()


@pytest.mark.parametrize(
    ("fetch_offset", "last_epoch", "expected"),
    [
        (0, 0, VALID),  # a new follower
        (2, 1, VALID),  # behind, on our history
        (5, 3, VALID),
        (6, 4, VALID),  # caught up
        (4, 3, VALID),  # mid-epoch: fine, it is a batch boundary of ours
        (7, 4, FetchValidation(diverging=OffsetAndEpoch(6, 4))),  # ahead of us in our last epoch
        (3, 1, FetchValidation(diverging=OffsetAndEpoch(2, 1))),  # past the end of epoch 1
        (4, 2, FetchValidation(diverging=OffsetAndEpoch(2, 1))),  # an epoch we never had
        (9, 7, FetchValidation(diverging=OffsetAndEpoch(6, 4))),  # a later epoch we never had
    ],
)
def test_validate_fetch(log: RaftLog, fetch_offset: int, last_epoch: int, expected: FetchValidation) -> None:
    result = log.validate_fetch(fetch_offset, last_epoch)
    assert result == expected
    assert result.valid is (expected == VALID)


def test_validate_fetch_below_the_log_start_sends_the_snapshot() -> None:
    log = snapshot_log(10, 2, (3, 2))
    assert log.validate_fetch(4, 1) == FetchValidation(snapshot_id=SnapshotId(10, 2))
    assert log.validate_fetch(0, 0) == FetchValidation(snapshot_id=SnapshotId(10, 2))


def test_validate_fetch_at_the_snapshot() -> None:
    log = snapshot_log(10, 2, (3, 2))
    assert log.validate_fetch(10, 2).valid
    assert log.validate_fetch(12, 3).valid
    # Every epoch the fetcher shares with us is inside the snapshot.
    assert log.validate_fetch(10, 1) == FetchValidation(snapshot_id=SnapshotId(10, 2))
    # Its epoch 2 ran past the end of ours: truncate to the snapshot.
    assert log.validate_fetch(11, 2) == FetchValidation(diverging=OffsetAndEpoch(10, 2))


def test_validate_fetch_of_an_empty_log() -> None:
    log = RaftLog(None, [])
    assert log.validate_fetch(0, 0).valid
    assert log.validate_fetch(3, 1) == FetchValidation(diverging=OffsetAndEpoch(0, 0))


# truncate_to -----------------------------------------------------------------------------
def test_truncate_to_drops_the_tail_and_its_epochs(log: RaftLog) -> None:
    log.truncate_to(2)
    assert (log.end_offset, log.last_epoch) == (2, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 1)
    log.append(Batch(2, 5, 0, BatchKind.DATA, (b"x",)))
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(2, 1)
    assert log.end_offset_for_epoch(5) == OffsetAndEpoch(3, 5)


def test_truncate_to_mid_epoch_keeps_the_epoch(log: RaftLog) -> None:
    log.truncate_to(4)
    assert log.end == OffsetAndEpoch(4, 3)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(4, 3)


def test_truncate_to_the_end_or_beyond_changes_nothing(log: RaftLog) -> None:
    log.truncate_to(6)
    log.truncate_to(60)
    assert log.end == OffsetAndEpoch(6, 4)


def test_truncate_to_the_start_empties_the_log(log: RaftLog) -> None:
    log.truncate_to(0)
    assert log.end == OffsetAndEpoch(0, 0) and log.is_empty()


def test_truncate_to_inside_a_batch_or_below_the_start_is_refused(log: RaftLog) -> None:
    with pytest.raises(AssertionError):
        log.truncate_to(1)
    with pytest.raises(AssertionError):
        snapshot_log(10, 2, (3, 2)).truncate_to(9)


# compact ---------------------------------------------------------------------------------
def test_compact_drops_what_the_snapshot_covers(log: RaftLog) -> None:
    log.compact(Snapshot(SnapshotId(4, 3), b"s"))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (4, 6, 4)
    assert [b.base_offset for b in log.batches_between(0, 6)] == [4, 5]
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 0)
    assert log.validate_fetch(2, 1) == FetchValidation(snapshot_id=SnapshotId(4, 3))


def test_compact_at_the_end_leaves_only_the_snapshot(log: RaftLog) -> None:
    log.compact(Snapshot(SnapshotId(6, 4), b"s"))
    assert log.end == OffsetAndEpoch(6, 4) and log.start_offset == 6
    assert not log.is_empty()
    assert log.read(6, max_bytes=100, max_batches=10) == ()


def test_compact_at_an_epoch_boundary_keeps_the_later_epochs(log: RaftLog) -> None:
    log.compact(Snapshot(SnapshotId(5, 3), b"s"))
    assert [b.base_offset for b in log.batches_between(0, 6)] == [5]
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(6, 4)
    log.append(Batch(6, 4, 0, BatchKind.DATA, (b"x",)))
    assert log.end == OffsetAndEpoch(7, 4)


def test_compact_inside_a_batch_is_refused(log: RaftLog) -> None:
    with pytest.raises(AssertionError):
        log.compact(Snapshot(SnapshotId(1, 1), b"s"))


# reading and loading ---------------------------------------------------------------------
def offsets(read: tuple[Batch, ...]) -> list[int]:
    return [b.base_offset for b in read]


def test_read_returns_at_least_one_batch_then_up_to_max_bytes_encoded(log: RaftLog) -> None:
    two = frame_bytes(log.batch_at(0)) + frame_bytes(log.batch_at(2))  # type: ignore[arg-type]
    assert offsets(log.read(0, max_bytes=1, max_batches=10)) == [0]  # over the limit, still sent
    assert offsets(log.read(0, max_bytes=two, max_batches=10)) == [0, 2]
    assert offsets(log.read(0, max_bytes=two - 1, max_batches=10)) == [0]
    assert offsets(log.read(2, max_bytes=1 << 20, max_batches=10)) == [2, 4, 5]
    assert log.read(1, max_bytes=1 << 20, max_batches=10) == ()  # not a batch boundary
    assert log.read(6, max_bytes=1 << 20, max_batches=10) == ()


def test_read_returns_at_most_max_batches(log: RaftLog) -> None:
    assert offsets(log.read(0, max_bytes=1 << 20, max_batches=1)) == [0]
    assert offsets(log.read(2, max_bytes=1 << 20, max_batches=2)) == [2, 4]


def test_read_stops_before_end_and_may_return_nothing(log: RaftLog) -> None:
    """What an observer may read: committed batches only (``end`` = high watermark)."""
    assert offsets(log.read(0, max_bytes=1 << 20, max_batches=10, end=4)) == [0, 2]
    assert log.read(2, max_bytes=1 << 20, max_batches=10, end=2) == ()
    assert log.read(2, max_bytes=1 << 20, max_batches=10, end=1) == ()


def test_a_read_of_tiny_control_batches_is_bounded_by_count_and_by_encoded_bytes() -> None:
    """An idle leader's NoOps carry 2 payload bytes each: counting payload alone, one
    1 MiB fetch from offset 0 was half a million batches encoded on the leader's loop."""
    noops = [Batch(i, 1, 0, BatchKind.NOOP, (control.NOOP_RECORD,)) for i in range(100_000)]
    log = RaftLog(None, noops)
    noop_bytes = frame_bytes(noops[0])

    by_count = log.read(0, max_bytes=1 << 20, max_batches=1000)
    assert offsets(by_count) == list(range(1000))

    by_bytes = log.read(0, max_bytes=100 * noop_bytes, max_batches=100_000)
    assert offsets(by_bytes) == list(range(100))
    assert sum(frame_bytes(b) for b in by_bytes) <= 100 * noop_bytes


def test_loading_skips_batches_the_snapshot_covers() -> None:
    log = RaftLog(Snapshot(SnapshotId(2, 1), b"s"), batches(*LOG_SPEC))
    assert [b.base_offset for b in log.batches_between(0, 6)] == [2, 4, 5]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 1)


def test_batch_at(log: RaftLog) -> None:
    batch = log.batch_at(3)
    assert batch is not None and batch.base_offset == 2
    assert log.batch_at(6) is None
