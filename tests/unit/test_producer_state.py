"""Idempotent producers' state in a partition log: the leader's rules (duplicates answered
with their offsets, gaps and old epochs refused with nothing written, a new epoch from
0, unknown producers at any sequence), and the state kept equal to what the log holds
through rolls, unclean restarts (snapshot plus replay), torn tails, truncation and
retention. Kafka's ProducerStateManagerTest and the producer-state cases of
LogLoaderTest are the list."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.broker.log import producer_snapshots
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import AppendInfo, PartitionLog
from raftka.broker.log.producer_state import PRODUCERS_MAX, BatchMetadata, ProducerState, ProducerStateError
from raftka.broker.log.segment import SCAN_CHUNK_BYTES, LogSegment
from raftka.cli.main import main
from raftka.records.batch import SEQUENCE_MODULUS, read_header
from raftka.records.codec import BatchBuilder, read_records
from raftka.records.validation import BatchLimits, validate_batches
from raftka.v1 import controller_pb2
from tests.unit.test_partition_log import NOW, TOPIC_ID, values

E = controller_pb2.ErrorCode


def idempotent(producer_id: int, epoch: int, sequence: int, *values: bytes, timestamp: int = NOW) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    for value in values:
        assert builder.append(timestamp, None, value)
    return bytes(builder.build())


def append(log: PartitionLog, payload: bytes, epoch: int = 0) -> AppendInfo:
    validated = validate_batches(payload, BatchLimits(1 << 20), now_ms=NOW)
    return log.append_as_leader(validated.payload, validated.batches, epoch, NOW)


def open_log(path: Path, clean: bool = True, recovery_point: int = 0, **config: int) -> PartitionLog:
    return PartitionLog.open(
        path, TOPIC_ID, LogConfig(**config), clean_shutdown=clean, recovery_point=recovery_point
    )


def state_of(log: PartitionLog) -> dict[int, tuple[int, list[BatchMetadata]]]:
    return {pid: (entry.epoch, list(entry.batches)) for pid, entry in log.producers.producers.items()}


def refused(log: PartitionLog, payload: bytes) -> ProducerStateError:
    end = log.log_end_offset
    with pytest.raises(ProducerStateError) as error:
        append(log, payload)
    assert log.log_end_offset == end, "nothing written for a refused batch"
    return error.value


# the leader's rules -------------------------------------------------------------------


def test_a_retry_of_any_of_the_last_five_batches_gets_its_offsets_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    firsts = [append(log, idempotent(7, 0, 2 * i, b"a%d" % i, b"b%d" % i)).first_offset for i in range(6)]
    assert firsts == [0, 2, 4, 6, 8, 10]
    for i in range(1, 6):
        again = append(log, idempotent(7, 0, 2 * i, b"a%d" % i, b"b%d" % i))
        assert (again.duplicate, again.first_offset, again.last_offset) == (True, 2 * i, 2 * i + 1)
    assert log.log_end_offset == 12
    too_old = refused(log, idempotent(7, 0, 0, b"a0", b"b0"))  # the sixth back: out of the window
    assert too_old.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert values(log) == [v for i in range(6) for v in (b"a%d" % i, b"b%d" % i)]


def test_a_gap_an_old_epoch_and_a_new_epoch_not_at_zero_are_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, idempotent(7, 3, 0, b"x"))
    gap = refused(log, idempotent(7, 3, 2, b"y"))
    assert gap.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and "sequence 2 does not follow 0" in gap.message
    old = refused(log, idempotent(7, 2, 1, b"y"))
    assert old.code == E.INVALID_PRODUCER_EPOCH and "epoch 2 is older than 3" in old.message
    not_zero = refused(log, idempotent(7, 4, 5, b"y"))
    assert not_zero.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and "must start at sequence 0" in not_zero.message
    append(log, idempotent(7, 4, 0, b"bumped"))  # the epoch bump, from 0
    stale_retry = refused(log, idempotent(7, 3, 0, b"x"))  # a duplicate only within its epoch
    assert stale_retry.code == E.INVALID_PRODUCER_EPOCH
    assert values(log) == [b"x", b"bumped"]


def test_an_unknown_producer_is_taken_at_any_sequence_and_sequences_wrap(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    near_end = SEQUENCE_MODULUS - 2
    assert append(log, idempotent(9, 0, near_end, b"a", b"b")).first_offset == 0  # never seen: any sequence
    assert append(log, idempotent(9, 0, 0, b"c")).first_offset == 2  # 2^31 - 1 is followed by 0
    assert append(log, idempotent(9, 0, 1, b"d")).first_offset == 3
    assert append(log, idempotent(9, 0, near_end, b"a", b"b")).duplicate
    assert append(log, _plain(b"no producer")).first_offset == 4


def _plain(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(NOW, None, value)
    return bytes(builder.build())


def test_a_partition_keeps_a_bounded_number_of_producers_forgetting_the_least_recent() -> None:
    state = ProducerState()
    for pid in range(PRODUCERS_MAX + 1):
        state.apply(read_header(_offsets(idempotent(pid, 0, 0, b"v"), pid)))
    assert len(state.producers) == PRODUCERS_MAX and 0 not in state.producers
    state.apply(read_header(_offsets(idempotent(1, 0, 1, b"v"), PRODUCERS_MAX + 1)))  # 1 writes again
    state.apply(read_header(_offsets(idempotent(PRODUCERS_MAX + 1, 0, 0, b"v"), PRODUCERS_MAX + 2)))
    assert 1 in state.producers and 2 not in state.producers


def test_producers_expire_after_their_last_batchs_timestamp() -> None:
    state = ProducerState()
    state.apply(read_header(_offsets(idempotent(1, 0, 0, b"v", timestamp=NOW), 0)))
    state.apply(read_header(_offsets(idempotent(2, 0, 0, b"v", timestamp=NOW + 500), 1)))
    assert state.expire(NOW + 1_000, 1_000) == 1 and list(state.producers) == [2]


def _offsets(payload: bytes, base_offset: int) -> bytes:
    data = bytearray(payload)
    data[0:8] = base_offset.to_bytes(8, "big")
    return bytes(data)


# kept equal to the log -----------------------------------------------------------------


def _fill(log: PartitionLog, batches: int) -> list[bytes]:
    """Two producers writing in turns, one record per batch; the payloads, in order."""
    payloads = [idempotent(1 + i % 2, 0, i // 2, b"v%03d" % i) for i in range(batches)]
    for payload in payloads:
        assert not append(log, payload).duplicate
    return payloads


@pytest.fixture
def replayed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The base offsets of the batches a log replays into its producers' state."""
    seen: list[int] = []
    original = LogSegment.headers_from

    def counting(segment: LogSegment, offset: int):  # noqa: ANN202
        for header in original(segment, offset):
            seen.append(header.base_offset)
            yield header

    monkeypatch.setattr(LogSegment, "headers_from", counting)
    return seen


def test_a_roll_snapshots_the_state_and_an_unclean_restart_replays_only_what_follows(
    tmp_path: Path, replayed: list[int]
) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    payloads = _fill(log, 20)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3 and producer_snapshots.offsets(tmp_path) == bases[1:]
    before = state_of(log)
    # a crash: no close, no snapshot at the end; the rolled segments were flushed
    again = open_log(tmp_path, clean=False, recovery_point=log.recovery_point, segment_bytes=400)
    assert log.recovery_point == bases[-1]
    assert state_of(again) == before
    assert replayed == list(range(bases[-1], 20)), "from the newest snapshot on"
    retry = append(again, payloads[-1])
    assert (retry.duplicate, retry.first_offset) == (True, 19)


def test_unreadable_snapshots_are_deleted_and_an_older_one_used(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    payloads = _fill(log, 20)
    before = state_of(log)
    *older, damaged, torn = producer_snapshots.offsets(tmp_path)
    path = producer_snapshots.path_for(tmp_path, torn)
    path.write_bytes(path.read_bytes()[:-3])  # cut short by a crash before its fsync
    path = producer_snapshots.path_for(tmp_path, damaged)
    data = bytearray(path.read_bytes())
    data[-30] ^= 0x01  # a flipped bit in a batch's offsets
    path.write_bytes(bytes(data))
    again = open_log(tmp_path, clean=False, recovery_point=log.recovery_point, segment_bytes=400)
    assert producer_snapshots.offsets(tmp_path) == older
    assert state_of(again) == before
    assert append(again, payloads[-2]).duplicate


def test_a_torn_tail_cut_at_restart_is_forgotten_so_its_retry_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, idempotent(1, 0, 0, b"kept"))
    last = idempotent(1, 0, 1, b"torn")
    append(log, last)
    segment = log.active.path
    with open(segment, "r+b") as f:
        f.truncate(segment.stat().st_size - 5)  # the last write never completed
    again = open_log(tmp_path, clean=False)
    assert again.log_end_offset == 1
    retry = append(again, last)
    assert (retry.duplicate, retry.first_offset) == (False, 1)
    assert values(again) == [b"kept", b"torn"]


def test_truncation_reloads_the_state_at_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    payloads = _fill(log, 20)
    log.truncate_to(11)  # keeps batches 0..10: producer 1 up to sequence 5, producer 2 up to 4
    assert log.log_end_offset == 11
    assert all(o <= 11 for o in producer_snapshots.offsets(tmp_path))
    assert {pid: entry.last.last_sequence for pid, entry in log.producers.producers.items()} == {1: 5, 2: 4}
    assert append(log, payloads[10]).duplicate  # still there
    assert not append(log, payloads[11]).duplicate  # cut: written again, at 11
    assert log.log_end_offset == 12
    log.truncate_fully_and_start_at(30)
    assert log.producers.producers == {} and producer_snapshots.offsets(tmp_path) == []


def test_retention_deletes_the_snapshots_of_its_segments_and_keeps_the_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400, retention_bytes=500)
    _fill(log, 20)
    before = state_of(log)
    assert log.delete_old_segments(NOW, log.log_end_offset) > 0
    first = log.segments[0].base_offset
    assert min(producer_snapshots.offsets(tmp_path)) >= first
    assert state_of(log) == before, "producers are forgotten by expiry, not by retention (Kafka 3.x)"
    log.close()
    assert state_of(open_log(tmp_path, clean=False, segment_bytes=400)) == before


def test_a_clean_close_snapshots_the_end_so_the_next_start_replays_nothing(
    tmp_path: Path, replayed: list[int]
) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    _fill(log, 13)
    before = state_of(log)
    log.close()
    assert producer_snapshots.offsets(tmp_path)[-1] == 13
    assert state_of(open_log(tmp_path)) == before and replayed == []


def test_followers_apply_the_batches_they_append(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    for payload in (idempotent(4, 0, 0, b"a", b"b"), idempotent(4, 1, 0, b"c"), _plain(b"d")):
        append(leader, payload, epoch=2)
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert state_of(follower) == state_of(leader) == {4: (1, [BatchMetadata(0, 0, 2, 2, NOW)])}
    assert [r.value for r in read_records(follower.read(0, 1 << 20).records)] == [b"a", b"b", b"c", b"d"]


def test_log_dump_shows_each_batchs_producer_and_the_snapshots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, idempotent(42, 3, 7, b"a", b"b"))
    log.close()
    assert main(["log", "dump", str(tmp_path / "t-0")]) == 0
    text = capsys.readouterr().out
    assert "baseSequence: 7 producerId: 42 producerEpoch: 3" in text
    assert "producer snapshot offset: 2 producers: 1" in text
    assert (
        "| producerId: 42 producerEpoch: 3 firstSequence: 7 lastSequence: 8 firstOffset: 0 lastOffset: 1"
        in text
    )
    snapshot = producer_snapshots.path_for(tmp_path / "t-0", 2)
    snapshot.write_bytes(snapshot.read_bytes()[:-1])
    assert main(["log", "dump", str(snapshot), "--output", "json"]) == 0
    assert '"type": "damaged"' in capsys.readouterr().out


def test_a_replay_over_large_and_small_batches_reads_every_header(tmp_path: Path) -> None:
    """Past the first chunk, a large batch is skipped over (its header read alone), small
    ones are read a chunk at a time."""
    log = open_log(tmp_path)
    sizes = [300_000, 10, 300_000, 300_000, 300_000, 10, 300_000, 10, 10, 300_000, 10]
    for sequence, size in enumerate(sizes):
        append(log, idempotent(3, 0, sequence, b"x" * size))
    assert log.size_in_bytes > SCAN_CHUNK_BYTES
    before = state_of(log)
    again = open_log(tmp_path, clean=False)
    assert state_of(again) == before
    assert [b.first_offset for b in again.producers.producers[3].batches] == [6, 7, 8, 9, 10]
