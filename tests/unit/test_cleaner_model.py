"""The log cleaner against a model: the same appends go to a log that is cleaned and to
one that never is, across keyed records, tombstones, idempotent and transactional
producers (committed and aborted), segment rolls, passes with small key maps (a log
cleaned in several passes) and restarts that rebuild everything from the segments. After
every pass a read_committed consumer from the beginning builds the same key -> (offset,
value) table from both, offsets strictly increase, nothing from the first uncleanable
offset on changed, and the producers' state rebuilt from the cleaned log keeps each
producer's epoch and last batch."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.broker.log.cleaner.manager import Candidate, LogCleaner
from raftka.broker.log.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.node.config import CleanerConfig
from raftka.records.batch import Compression
from tests.unit.cleaner_logs import append, consume, open_log

SEGMENT_BYTES = 400
IDEMPOTENT = 100
TRANSACTIONAL = (200, 201)
RETENTION_MS = 50

keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])
values = st.one_of(st.none(), st.binary(min_size=1, max_size=8))
records = st.lists(st.tuples(keys, values), min_size=1, max_size=3)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.sampled_from([None, IDEMPOTENT]), records, st.sampled_from(list(Compression))
        ),
        st.tuples(st.just("txn"), st.sampled_from(TRANSACTIONAL), records),
        st.tuples(st.just("end"), st.sampled_from(TRANSACTIONAL), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean"), st.integers(4, 40)),
        st.tuples(st.just("tick"), st.integers(1, 40)),
        st.tuples(st.just("restart")),
    ),
    max_size=60,
)


def producers(partition_log: PartitionLog) -> dict[int, tuple[int, int | None, int | None]]:
    """producer id -> (epoch, last sequence, last offset) of its last batch."""
    out = {}
    for producer_id, entry in partition_log.producers.producers.items():
        last = entry.last if entry.batches else None
        out[producer_id] = (entry.epoch, last and last.last_sequence, last and last.last_offset)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_a_cleaned_log_reads_as_the_uncleaned_one(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as root:
        check(Path(root), ops)


def check(root: Path, ops: list[tuple]) -> None:
    clock = [1_000_000]
    logs = {name: open_log(root / name / "t-0", SEGMENT_BYTES) for name in ("cleaned", "plain")}
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    compaction = LogConfig(
        compact=True,
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION_MS,
        segment_bytes=SEGMENT_BYTES,
        index_interval_bytes=128,
    )

    def candidates() -> list[Candidate]:
        cleaned = logs["cleaned"]
        return [Candidate("t-0", cleaned, compaction, cleaned.last_stable_offset(cleaned.log_end_offset))]

    def new_cleaner() -> LogCleaner:
        return LogCleaner(root / "cleaned", CleanerConfig(), candidates, wall_ms=lambda: clock[0])

    cleaner = new_cleaner()
    for op in ops:
        if op[0] == "put":
            _, producer_id, batch, codec = op
            producer = (-1, -1, -1)
            if producer_id is not None:
                producer = (producer_id, 0, sequences.get(producer_id, 0))
                sequences[producer_id] = producer[2] + len(batch)
            for partition_log in logs.values():
                append(partition_log, batch, clock[0], producer=producer, compression=codec)
        elif op[0] == "txn":
            _, producer_id, batch = op
            producer = (producer_id, 0, sequences.get(producer_id, 0))
            sequences[producer_id] = producer[2] + len(batch)
            open_txns.add(producer_id)
            for partition_log in logs.values():
                append(partition_log, batch, clock[0], producer=producer, transactional=True)
        elif op[0] == "end" and op[1] in open_txns:
            open_txns.discard(op[1])
            for partition_log in logs.values():
                partition_log.append_marker(op[1], 0, op[2], 0, 0, clock[0])
        elif op[0] == "roll":
            for partition_log in logs.values():
                partition_log.roll(clock[0])
        elif op[0] == "tick":
            clock[0] += op[1]
        elif op[0] == "restart":
            for name, partition_log in logs.items():  # a crash's reload: producers rebuilt from the batches
                partition_log.flush()
                logs[name] = open_log(root / name / "t-0", SEGMENT_BYTES)
            cleaner = new_cleaner()
        elif op[0] == "clean":
            cleaned = logs["cleaned"]
            upper = min(cleaned.last_stable_offset(cleaned.log_end_offset), cleaned.active.base_offset)
            untouched = [
                (h, b) for h, b in consume(cleaned, cleaned.log_end_offset).batches if h.base_offset >= upper
            ]
            cleaner.clean_now(OffsetMap(ENTRY_BYTES * op[1]))
            assert not cleaner.uncleanable
            after = consume(cleaned, cleaned.log_end_offset).batches
            assert [(h, b) for h, b in after if h.base_offset >= upper] == untouched
        assert_same(logs["cleaned"], logs["plain"])
    for name, partition_log in logs.items():
        partition_log.flush()
        logs[name] = open_log(root / name / "t-0", SEGMENT_BYTES)
    assert_same(logs["cleaned"], logs["plain"])
    assert producers(logs["cleaned"]) == producers(logs["plain"])


def assert_same(cleaned: PartitionLog, plain: PartitionLog) -> None:
    assert cleaned.log_end_offset == plain.log_end_offset
    assert cleaned.last_stable_offset(cleaned.log_end_offset) == plain.last_stable_offset(
        plain.log_end_offset
    )
    read = consume(cleaned)
    assert read.table == consume(plain).table
    assert read.offsets == sorted(set(read.offsets))
    batch_offsets = [h.base_offset for h, _ in consume(cleaned, cleaned.log_end_offset).batches]
    assert batch_offsets == sorted(set(batch_offsets))
