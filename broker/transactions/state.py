"""The transaction coordinator's decisions, as Kafka's TransactionCoordinator makes them:
pure functions of a transactional id's recorded state and one request, no I/O.

Each answers ``Refused`` (an error for the client, nothing written), ``Unchanged`` (the
request is already true: answer it, write nothing) or ``Transition`` (the new state to
record; the controller checks it again against its own image, see
``raftka.metadata.transactions``). The checks come in Kafka's order, so a client sees the
error Kafka would send: the producer id, then the epoch, then the state.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.metadata import transactions
from raftka.metadata.transactions import NO_PRODUCER, PRODUCER_EPOCH_MAX, State, TransactionRecord
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Refused:
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Unchanged:
    record: TransactionRecord


@dataclass(frozen=True, slots=True)
class Transition:
    record: TransactionRecord
    # InitProducerId meeting an open transaction: this aborts it (fencing its producer),
    # and the client is told CONCURRENT_TRANSACTIONS and asks again, as Kafka does
    then_retry: bool = False


Decision = Refused | Unchanged | Transition


def _copy(record: TransactionRecord) -> TransactionRecord:
    copied = TransactionRecord()
    copied.CopyFrom(record)
    return copied


def needs_new_producer_id(current: TransactionRecord | None) -> bool:
    """A first InitProducerId, or one whose epoch bump would exhaust the epochs."""
    return current is None or (
        current.state not in transactions.OPEN and current.producer_epoch >= PRODUCER_EPOCH_MAX
    )


def init_producer_id(
    current: TransactionRecord | None,
    transactional_id: str,
    timeout_ms: int,
    timeout_max_ms: int,
    expected: tuple[int, int],
    new_producer_id: int | None,
) -> Decision:
    """Kafka's handleInitProducerId: a new id at epoch 0 the first time, else the epoch
    bumped (fencing the previous producer); an open transaction is aborted first.
    ``expected``: the (producer id, epoch) a KIP-360 client names, (-1, -1) if none;
    ``new_producer_id``: given when ``needs_new_producer_id``."""
    if not 0 < timeout_ms <= timeout_max_ms:
        return Refused(
            E.INVALID_TRANSACTION_TIMEOUT,
            f"transaction_timeout_ms: {timeout_ms} is not in 1..{timeout_max_ms} (transaction.max.timeout.ms)",
        )
    if current is None:
        assert new_producer_id is not None
        return Transition(_fresh(transactional_id, new_producer_id, 0, timeout_ms, NO_PRODUCER, NO_PRODUCER))
    expected_id, expected_epoch = expected
    if expected_id != NO_PRODUCER and not _may_bump(current, expected_id, expected_epoch):
        return Refused(
            E.PRODUCER_FENCED,
            f"producer {expected_id} epoch {expected_epoch} is not {transactional_id!r}'s current "
            f"({current.producer_id} epoch {current.producer_epoch})",
        )
    if current.state in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT):
        return Refused(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing its transaction")
    if current.state == State.TXN_ONGOING:
        return Transition(fenced(current), then_retry=True)
    if (
        expected_id != NO_PRODUCER
        and expected_epoch == current.last_producer_epoch
        and (expected_id == current.producer_id or expected_id == current.last_producer_id)
    ):
        return Unchanged(current)  # a retry of the bump that already happened
    if current.producer_epoch >= PRODUCER_EPOCH_MAX:
        assert new_producer_id is not None
        return Transition(
            _fresh(
                transactional_id, new_producer_id, 0, timeout_ms, current.producer_id, current.producer_epoch
            )
        )
    return Transition(
        _fresh(
            transactional_id,
            current.producer_id,
            current.producer_epoch + 1,
            timeout_ms,
            NO_PRODUCER,
            current.producer_epoch,
        )
    )


def _may_bump(current: TransactionRecord, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId and the epoch check of prepareIncrementProducerEpoch:
    the current producer at its epoch, or a retry of the last bump (same or replaced id)."""
    if producer_id == current.producer_id:
        return epoch in (current.producer_epoch, current.last_producer_epoch)
    return producer_id == current.last_producer_id and epoch == current.last_producer_epoch


def _fresh(
    transactional_id: str, producer_id: int, epoch: int, timeout_ms: int, last_id: int, last_epoch: int
) -> TransactionRecord:
    return TransactionRecord(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        last_producer_id=last_id,
        last_producer_epoch=last_epoch,
        state=State.TXN_EMPTY,
        timeout_ms=timeout_ms,
        start_time_ms=-1,
    )


def fenced(current: TransactionRecord) -> TransactionRecord:
    """The open transaction aborted under a new epoch (InitProducerId from a new producer,
    or the timeout): its markers carry that epoch, so the old producer's writes are
    refused at every partition and the old producer itself is told PRODUCER_FENCED."""
    record = _copy(current)
    record.state = State.TXN_PREPARE_ABORT
    record.last_producer_epoch = NO_PRODUCER  # as Kafka's: naming the old epoch is no retry, it is fenced
    record.producer_epoch = min(current.producer_epoch + 1, PRODUCER_EPOCH_MAX + 1)
    return record


def _producer_problem(
    current: TransactionRecord | None, transactional_id: str, producer_id: int, epoch: int
) -> Refused | None:
    if current is None or current.producer_id != producer_id:
        return Refused(
            E.INVALID_PRODUCER_ID_MAPPING,
            f"producer_id: {producer_id} is not transactional id {transactional_id!r}'s",
        )
    if current.producer_epoch != epoch:
        return Refused(
            E.PRODUCER_FENCED,
            f"producer_epoch: {epoch} is not {transactional_id!r}'s current {current.producer_epoch}",
        )
    return None


def _joinable(current: TransactionRecord, transactional_id: str) -> Refused | None:
    if current.state in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT):
        return Refused(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing its transaction")
    return None


def add_partitions(
    current: TransactionRecord | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    added: set[Partition],
) -> Decision:
    """Kafka's handleAddPartitionsToTransaction: starts a transaction or widens the open one."""
    problem = _producer_problem(current, transactional_id, producer_id, epoch) or _joinable(
        current, transactional_id
    )  # type: ignore[arg-type]
    if problem is not None:
        return problem
    assert current is not None
    if current.state == State.TXN_ONGOING and added <= transactions.partitions(current):
        return Unchanged(current)
    record = _ongoing(current)
    transactions.with_partitions(record, added)
    return Transition(record)


def add_offsets(
    current: TransactionRecord | None, transactional_id: str, producer_id: int, epoch: int, group: str
) -> Decision:
    """Kafka's AddOffsetsToTxn: the group's offsets will commit with the transaction."""
    problem = _producer_problem(current, transactional_id, producer_id, epoch) or _joinable(
        current, transactional_id
    )  # type: ignore[arg-type]
    if problem is not None:
        return problem
    assert current is not None
    if current.state == State.TXN_ONGOING and group in current.groups:
        return Unchanged(current)
    record = _ongoing(current)
    record.groups.append(group)
    return Transition(record)


def _ongoing(current: TransactionRecord) -> TransactionRecord:
    """The record a transaction grows: a new one starts empty."""
    record = _copy(current)
    if current.state != State.TXN_ONGOING:
        del record.topics[:]
        del record.groups[:]
        record.state = State.TXN_ONGOING
    return record


def verify(
    current: TransactionRecord | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    wanted: set[Partition],
) -> Refused | dict[Partition, int]:
    """KIP-890's check for a partition leader: each partition NONE if the producer's
    ongoing transaction holds it, else INVALID_TXN_STATE (nothing to append)."""
    problem = _producer_problem(current, transactional_id, producer_id, epoch) or _joinable(
        current, transactional_id
    )  # type: ignore[arg-type]
    if problem is not None:
        return problem
    assert current is not None
    held = transactions.partitions(current) if current.state == State.TXN_ONGOING else set()
    return {p: E.NONE if p in held else E.INVALID_TXN_STATE for p in wanted}


def end(
    current: TransactionRecord | None, transactional_id: str, producer_id: int, epoch: int, committed: bool
) -> Decision:
    """Kafka's handleEndTransaction: an ongoing transaction becomes prepared; a retry of
    one already ended the same way is answered as it was."""
    problem = _producer_problem(current, transactional_id, producer_id, epoch)
    if problem is not None:
        return problem
    assert current is not None
    prepare, complete = (
        (State.TXN_PREPARE_COMMIT, State.TXN_COMPLETE_COMMIT)
        if committed
        else (State.TXN_PREPARE_ABORT, State.TXN_COMPLETE_ABORT)
    )
    verb = "commit" if committed else "abort"
    if current.state == State.TXN_ONGOING:
        record = _copy(current)
        record.state = prepare
        return Transition(record)
    if current.state == complete:
        return Unchanged(current)
    if current.state == prepare:
        return Refused(E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} is completing its {verb}")
    return Refused(
        E.INVALID_TXN_STATE,
        f"{transactional_id!r} is {transactions.KAFKA_STATE_NAMES[current.state]}: there is no transaction to {verb}",
    )


def completed(prepared: TransactionRecord) -> TransactionRecord:
    """Every marker written: the prepared transaction completes the way it was prepared."""
    assert prepared.state in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT), prepared.state
    record = _copy(prepared)
    record.state = (
        State.TXN_COMPLETE_COMMIT if prepared.state == State.TXN_PREPARE_COMMIT else State.TXN_COMPLETE_ABORT
    )
    return record


def timed_out(record: TransactionRecord, now_wall_ms: int) -> bool:
    """Ongoing for longer than its timeout (the controller's start time, the wall clock:
    a new coordinator judges it the same way)."""
    return record.state == State.TXN_ONGOING and now_wall_ms - record.start_time_ms > record.timeout_ms
