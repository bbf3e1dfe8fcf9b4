"""Transactions in a partition log: open transactions, the last stable offset, markers and
the aborted-transaction index kept equal to what the log holds, through rolls, clean and
unclean restarts, truncation and retention (Kafka's ProducerStateManagerTest and
TransactionIndexTest, and LogLoaderTest's transaction cases, are the list)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.broker.log import producer_snapshots
from raftka.broker.log.partition_log import AppendInfo, PartitionLog
from raftka.broker.log.producer_state import ProducerStateError
from raftka.broker.log.transaction_index import AbortedTxn
from raftka.cli.main import main
from raftka.records.codec import BatchBuilder, read_records
from raftka.v1 import controller_pb2
from tests.unit.test_partition_log import NOW
from tests.unit.test_producer_state import append, open_log

E = controller_pb2.ErrorCode


def batch(
    producer_id: int, sequence: int, *values: bytes, transactional: bool = True, epoch: int = 0
) -> bytes:
    builder = BatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, transactional=transactional
    )
    for value in values:
        builder.append(NOW, None, value)
    return bytes(builder.build())


def marker(
    log: PartitionLog, producer_id: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0
) -> AppendInfo:
    return log.append_marker(producer_id, epoch, committed, coordinator_epoch, 0, NOW)


def aborted(log: PartitionLog) -> list[AbortedTxn]:
    return log.aborted_transactions(log.log_start_offset, log.log_end_offset)


def open_transactions(log: PartitionLog) -> dict[int, int]:
    return dict(log.producers.transactions.ongoing)


# the leader's rules ----------------------------------------------------------------------


def test_a_transaction_opens_at_its_first_batch_and_its_marker_ends_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(1, 0, b"a", b"b"))
    append(log, batch(1, 2, b"c"))
    assert open_transactions(log) == {1: 0} and log.last_stable_offset(3) == 0
    assert marker(log, 1, committed=True).first_offset == 3
    assert open_transactions(log) == {} and log.last_stable_offset(4) == 4
    assert aborted(log) == [], "a commit is not indexed"
    append(log, batch(1, 3, b"d"))  # the marker took no sequence number
    assert open_transactions(log) == {1: 4}


def test_an_open_transaction_refuses_its_producers_non_transactional_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(1, 0, b"t"))
    with pytest.raises(ProducerStateError) as refused:
        append(log, batch(1, 1, b"plain", transactional=False))
    assert refused.value.code == E.INVALID_TXN_STATE and log.log_end_offset == 1
    marker(log, 1, committed=False)
    assert append(log, batch(1, 1, b"plain", transactional=False)).first_offset == 2


def test_markers_from_an_older_producer_or_coordinator_epoch_are_fenced_and_write_nothing(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    append(log, batch(1, 0, b"t", epoch=3))
    marker(log, 1, committed=False, epoch=3, coordinator_epoch=5)
    for epoch, coordinator_epoch, code in [
        (2, 5, E.INVALID_PRODUCER_EPOCH),
        (3, 4, E.TRANSACTION_COORDINATOR_FENCED),
    ]:
        with pytest.raises(ProducerStateError) as refused:
            marker(log, 1, committed=True, epoch=epoch, coordinator_epoch=coordinator_epoch)
        assert refused.value.code == code
    assert log.log_end_offset == 2
    assert marker(log, 1, committed=True, epoch=3, coordinator_epoch=5).first_offset == 2, (
        "a retry, same epochs"
    )


def test_a_marker_for_no_open_transaction_is_written_and_ends_nothing(tmp_path: Path) -> None:
    """As Kafka's appendEndTxnMarker: the coordinator may send a marker again (after its
    failover) or for a partition the producer never wrote; it is written, indexes nothing
    and holds no last stable offset, and the producer then starts its sequence at 0."""
    log = open_log(tmp_path)
    append(log, batch(5, 0, b"open"))
    assert marker(log, 4, committed=False).first_offset == 1
    assert aborted(log) == [] and open_transactions(log) == {5: 0}
    marker(log, 5, committed=False)
    assert marker(log, 5, committed=False).first_offset == 3, "a retried marker"
    assert aborted(log) == [AbortedTxn(5, 0, 2, 3)] and log.last_stable_offset(4) == 4
    with pytest.raises(ProducerStateError) as gap:
        append(log, batch(4, 7, b"x"))
    assert gap.value.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(4, 0, b"x")).first_offset == 4
    assert [r.value for r in read_records(log.read(0, 1 << 20).records)] == [b"open", b"x"], (
        "markers are no data"
    )


# kept equal to the log ---------------------------------------------------------------------


@dataclass
class Model:
    """What the log should know: open transactions and the aborted ones, in marker order."""

    open: dict[int, int] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    def marker(self, producer_id: int, offset: int, committed: bool) -> None:
        first = self.open.pop(producer_id, None)
        if first is not None and not committed:
            self.aborted.append(
                AbortedTxn(producer_id, first, offset, min(self.open.values(), default=offset + 1))
            )


PRODUCERS = st.integers(1, 3)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), PRODUCERS, st.integers(1, 3)),
        st.tuples(st.just("idempotent"), PRODUCERS, st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
        st.tuples(st.just("commit"), PRODUCERS, st.just(0)),
        st.tuples(st.just("abort"), PRODUCERS, st.just(0)),
        st.tuples(st.just("close"), st.just(0), st.just(0)),
        st.tuples(st.just("crash"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_any_interleaving_keeps_the_last_stable_offset_and_the_aborted_index_equal_to_the_log(
    steps: list[tuple[str, int, int]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder)
        log = open_log(path, segment_bytes=300)
        model = Model()
        for kind, producer_id, records in steps:
            values = [b"v%d" % i for i in range(records)]
            if kind in ("txn", "idempotent"):
                sequence = model.sequences.get(producer_id, 0)
                payload = batch(producer_id, sequence, *values, transactional=kind == "txn")
                if kind == "idempotent" and producer_id in model.open:
                    with pytest.raises(ProducerStateError):
                        append(log, payload)
                    continue
                info = append(log, payload)
                model.sequences[producer_id] = sequence + records
                if kind == "txn":
                    model.open.setdefault(producer_id, info.first_offset)
            elif kind == "plain":
                append(log, batch(-1, -1, *values, transactional=False, epoch=-1))
            elif kind in ("commit", "abort"):
                model.marker(
                    producer_id, marker(log, producer_id, kind == "commit").first_offset, kind == "commit"
                )
            elif kind == "close":
                log.close()
                log = open_log(path, segment_bytes=300)
            else:  # a crash: nothing flushed is trusted, the newest snapshot is lost
                for segment in log.segments:
                    segment.close()
                newest = producer_snapshots.offsets(path)[-1:]
                for offset in newest:
                    producer_snapshots.delete(path, offset)
                log = open_log(path, clean=False, segment_bytes=300)
            end = log.log_end_offset
            assert open_transactions(log) == model.open
            assert log.last_stable_offset(end) == min(model.open.values(), default=end)
            assert aborted(log) == model.aborted
        log.close()


def test_a_restart_keeps_the_earliest_open_transaction_whichever_producer_wrote_last(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, batch(1, 0, b"first"))  # 1 opens at 0
    append(log, batch(2, 0, b"second"))  # 2 opens at 1
    append(log, batch(1, 1, b"again"))  # 1 wrote last
    log.close()
    again = open_log(tmp_path)
    assert again.last_stable_offset(3) == 0
    marker(again, 1, committed=True)
    assert again.last_stable_offset(4) == 1


def test_an_unclean_restart_rebuilds_open_transactions_and_the_index_of_every_scanned_segment(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(12):
        append(log, batch(1 + i % 3, i // 3, b"value-%02d" % i))
        if i % 3 == 2:
            marker(log, 1 + (i // 3) % 3, committed=i % 2 == 0)
    want_open, want_aborted = open_transactions(log), aborted(log)
    assert want_open and want_aborted and len(log.segments) > 3
    for segment in log.segments:
        segment.close()
    for index in tmp_path.glob("*.txnindex"):  # lost in the crash, or holding entries past the cut
        index.write_bytes(b"\x00" * 7)
    for offset in producer_snapshots.offsets(tmp_path):
        producer_snapshots.delete(tmp_path, offset)
    again = open_log(tmp_path, clean=False, segment_bytes=300)
    assert open_transactions(again) == want_open
    assert aborted(again) == want_aborted
    for segment in again.segments:  # and on disk: what the next start reads
        assert segment.txn_index.entries == type(segment.txn_index)(segment.txn_index.path).entries


def test_truncation_reopens_a_transaction_whose_marker_it_cut_and_drops_its_index_entry(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    append(log, batch(1, 0, b"a"))
    append(log, batch(2, 0, b"b"))
    at = marker(log, 1, committed=False).first_offset
    assert aborted(log) == [AbortedTxn(1, 0, 2, 1)]
    log.truncate_to(at)
    assert aborted(log) == [] and open_transactions(log) == {1: 0, 2: 1}
    log.close()
    reopened = open_log(tmp_path)
    assert aborted(reopened) == [] and open_transactions(reopened) == {1: 0, 2: 1}


def test_retention_deletes_a_segments_aborted_index_with_it_and_the_lso_stays_at_the_log_start(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_bytes=0)
    append(log, batch(1, 0, b"x" * 100))
    marker(log, 1, committed=False)
    append(log, batch(2, 0, b"open"))  # never ended: a hanging transaction
    first_index = log.segments[0].txn_index.path
    assert first_index.exists() and log.last_stable_offset(log.log_end_offset) == 2
    while len(log.segments) < 3:
        append(log, batch(-1, -1, b"y" * 100, transactional=False, epoch=-1))
    assert log.delete_old_segments(NOW, log.log_end_offset) >= 1
    assert not first_index.exists() and aborted(log) == []
    assert log.log_start_offset > 2 and log.last_stable_offset(log.log_end_offset) == log.log_start_offset


def test_log_dump_shows_markers_open_transactions_and_the_aborted_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, batch(42, 0, b"a"))
    marker(log, 42, committed=False, coordinator_epoch=3)
    append(log, batch(43, 0, b"b"))
    log.close()
    assert main(["log", "dump", str(tmp_path / "t-0")]) == 0
    text = capsys.readouterr().out
    assert "isTransactional: true isControl: false" in text
    assert (
        "isTransactional: true isControl: true" in text and "endTxnMarker: ABORT coordinatorEpoch: 3" in text
    )
    assert "| producerId: 42 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in text
    assert main(["log", "dump", str(tmp_path / "t-0"), "--output", "json"]) == 0
    assert '"current_txn_first_offset": 2' in capsys.readouterr().out
