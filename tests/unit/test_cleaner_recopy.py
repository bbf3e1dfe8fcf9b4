"""One cleaning pass: the latest record of each key stays at its offset, in its batch, and
the rest goes (Kafka's ``CleanerTest`` cases)."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from raftka.broker.log.cleaner.manager import Candidate, LogCleaner
from raftka.broker.log.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from raftka.broker.log.cleaner.retained_batch import delete_horizon_ms, emptied
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.node.config import CleanerConfig
from raftka.records.batch import Compression, crc_matches
from tests.unit.cleaner_logs import append, consume, open_log

SEGMENT_BYTES = 300


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000


def cleaner(
    tmp_path: Path,
    partition_log: PartitionLog,
    clock: Clock,
    retention_ms: int = 1000,
    index_interval_bytes: int = 128,
) -> LogCleaner:
    settings = LogConfig(
        compact=True,
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=retention_ms,
        segment_bytes=SEGMENT_BYTES,
        index_interval_bytes=index_interval_bytes,
    )

    def candidates() -> list[Candidate]:
        upper = partition_log.last_stable_offset(partition_log.log_end_offset)
        return [Candidate("t-0", partition_log, settings, upper)]

    return LogCleaner(tmp_path, CleanerConfig(), candidates, wall_ms=lambda: clock.ms)


def test_a_pass_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    for i in range(30):
        append(partition_log, [(b"k%d" % (i % 3), b"v%d" % i)], clock.ms, compression=Compression.GZIP)
    partition_log.roll()
    before = consume(partition_log)
    result = cleaner(tmp_path, partition_log, clock).clean_now(OffsetMap(ENTRY_BYTES * 100))
    assert result is not None and result.end_offset == 30
    after = consume(partition_log)
    assert after.table == before.table == {b"k0": (27, b"v27"), b"k1": (28, b"v28"), b"k2": (29, b"v29")}
    assert after.offsets == [27, 28, 29]
    for header, batch in after.batches:  # and an empty batch where each group of segments ended
        assert crc_matches(batch, 0, header)
        assert header.compression == Compression.GZIP or header.record_count == 0
    assert (tmp_path / "cleaner-offset-checkpoint").read_text().splitlines()[2] == "t-0 30"
    partition_log.close()
    reopened = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    assert consume(reopened).table == before.table


def test_a_rewritten_batch_keeps_its_base_and_last_offset_and_sequence(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    append(partition_log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], clock.ms, producer=(5, 0, 0))
    append(partition_log, [(b"a", b"2"), (b"c", b"2")], clock.ms, producer=(5, 0, 3))
    append(partition_log, [(b"x", b"2")], clock.ms)
    partition_log.roll()
    cleaner(tmp_path, partition_log, clock).clean_now(OffsetMap(ENTRY_BYTES * 100))
    first, second, _ = consume(partition_log).batches
    assert (first[0].base_offset, first[0].last_offset, first[0].record_count) == (0, 2, 1)
    assert (first[0].producer_id, first[0].base_sequence) == (5, 0)
    assert (second[0].base_offset, second[0].last_offset, second[0].record_count) == (3, 4, 2)


def test_a_tombstone_stays_for_delete_retention_after_the_pass_that_first_kept_it(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    append(partition_log, [(b"a", b"1")], clock.ms)
    append(partition_log, [(b"a", None)], clock.ms)
    append(partition_log, [(b"b", b"1")], clock.ms)
    partition_log.roll()
    the_cleaner = cleaner(tmp_path, partition_log, clock, retention_ms=1000)
    the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100))
    batches = consume(partition_log).batches
    assert [h.base_offset for h, _ in batches] == [1, 2]
    assert delete_horizon_ms(batches[0][0]) == clock.ms + 1000
    append(partition_log, [(b"c", b"1")], clock.ms)  # something dirty, so the log is due again
    partition_log.roll()
    clock.ms += 999
    the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100))
    assert [h.base_offset for h, _ in consume(partition_log).batches] == [1, 2, 3]
    append(partition_log, [(b"d", b"1")], clock.ms)
    partition_log.roll()
    clock.ms += 1
    the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100))
    assert [h.base_offset for h, _ in consume(partition_log).batches] == [2, 3, 4]


def test_nothing_at_or_above_the_active_segment_or_the_last_stable_offset_is_touched(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    append(partition_log, [(b"a", b"1")], clock.ms)
    append(partition_log, [(b"a", b"2")], clock.ms)
    partition_log.roll()
    append(partition_log, [(b"a", b"3")], clock.ms, producer=(9, 0, 0), transactional=True)  # open
    append(partition_log, [(b"a", b"4")], clock.ms)
    partition_log.roll()
    append(partition_log, [(b"a", b"5")], clock.ms)  # the active segment
    assert partition_log.last_stable_offset(partition_log.log_end_offset) == 2
    assert cleaner(tmp_path, partition_log, clock).clean_now(OffsetMap(ENTRY_BYTES * 100)) is not None
    everything = consume(partition_log, upper=partition_log.log_end_offset)
    assert [h.base_offset for h, _ in everything.batches] == [1, 2, 3, 4]


def test_a_read_from_an_offset_the_cleaner_removed_starts_at_the_next_batch(tmp_path: Path) -> None:
    """Within the batches after a segment's last index entry (kept in memory), an offset
    in a gap is served from the batch after the gap, not the one before it."""
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    for key in (b"x", b"a", b"b", b"a"):
        append(partition_log, [(key, b"v")], clock.ms)
    partition_log.roll()
    cleaned = cleaner(tmp_path, partition_log, clock, index_interval_bytes=4096)  # one index entry
    cleaned.clean_now(OffsetMap(ENTRY_BYTES * 100))
    assert [h.base_offset for h, _ in consume(partition_log).batches] == [0, 2, 3]
    found = partition_log.segments[0].find(1)
    assert found is not None and found.header.base_offset == 2
    assert partition_log.read(1, 1 << 20).records[:8] == (2).to_bytes(8, "big")


def test_a_marker_goes_after_its_transaction_and_its_horizon(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    append(partition_log, [(b"a", b"1")], clock.ms, producer=(9, 0, 0), transactional=True)
    partition_log.append_marker(9, 0, True, 0, 0, clock.ms)
    partition_log.roll()
    partition_log.expire_producers(clock.ms + 1, 0)  # its last batch need not stay
    the_cleaner = cleaner(tmp_path, partition_log, clock, retention_ms=0)
    kinds = []
    for i in range(3):  # the batch goes; then the marker gets its horizon; then it goes
        append(partition_log, [(b"a", b"%d" % (i + 2))], clock.ms)
        partition_log.roll()
        the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100))
        first = consume(partition_log, 99).batches[0][0]
        kinds.append((first.base_offset, first.is_control, delete_horizon_ms(first)))
    assert kinds == [(1, True, None), (1, True, clock.ms), (4, False, None)]


def test_a_control_batch_the_cleaner_emptied_loads_quietly(tmp_path: Path) -> None:
    """A producer's last marker may be kept with no record, for its epoch, once no batch
    of its transaction is left before it."""
    clock = Clock()
    leader = open_log(tmp_path / "leader", SEGMENT_BYTES)
    append(leader, [(b"a", b"1")], clock.ms, producer=(9, 0, 0), transactional=True)
    leader.append_marker(9, 0, True, 0, 0, clock.ms)
    batches = consume(leader, leader.log_end_offset).batches
    follower = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    follower.truncate_fully_and_start_at(1)
    follower.append_as_follower(emptied(batches[1][0]))
    follower.flush()
    with capture_logs() as logs:
        reopened = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    assert not [e for e in logs if e["event"] == "a control batch that does not decode"]
    assert reopened.last_stable_offset(reopened.log_end_offset) == 2


def test_a_follower_copies_a_cleaned_leader_through_its_gaps(tmp_path: Path) -> None:
    clock = Clock()
    leader = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    for i in range(20):
        append(leader, [(b"k%d" % (i % 3), b"v%d" % i)], clock.ms)
    leader.roll()
    append(leader, [(b"k0", b"last")], clock.ms)
    cleaner(tmp_path, leader, clock).clean_now(OffsetMap(ENTRY_BYTES * 100))
    follower = open_log(tmp_path / "follower", SEGMENT_BYTES)
    while follower.log_end_offset < leader.log_end_offset:  # a replica fetcher's loop
        follower.append_as_follower(leader.read(follower.log_end_offset, 200).records)
    assert consume(follower).table == consume(leader).table
    assert consume(follower).offsets == consume(leader).offsets
    follower.close()
    assert consume(open_log(tmp_path / "follower", SEGMENT_BYTES)).table == consume(leader).table


def test_a_log_too_large_for_the_key_map_is_cleaned_in_several_passes(tmp_path: Path) -> None:
    clock = Clock()
    partition_log = open_log(tmp_path / "t-0", SEGMENT_BYTES)
    for i in range(18):
        append(partition_log, [(b"k%d" % (i % 9), b"v%d" % i)], clock.ms)
    partition_log.roll()
    the_cleaner = cleaner(tmp_path, partition_log, clock)
    ends = []
    while (result := the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 4))) is not None:  # 3 keys a pass
        ends.append(result.end_offset)
        assert the_cleaner.metrics.max_buffer_utilization_percent == 75.0
    assert ends == [3, 6, 9, 12, 15, 18]
    assert consume(partition_log).offsets == list(range(9, 18))
