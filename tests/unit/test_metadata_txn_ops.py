"""Transactions in the quorum (``raftka.metadata.txn_ops``): the controller takes a
transition only from the transactional id's coordinator at its current registration and
only one the state machine allows; a commit's completion writes its pending offsets in the
same batch; replay refuses what the controller would, and a snapshot restates it all. A
hypothesis test drives random sequences of client requests through the coordinator's
decisions (``raftka.broker.transactions.state``) and the controller, as the two run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.transactions import state
from raftka.metadata import txn_ops
from raftka.metadata.delta import ReplayError
from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import MetadataImage
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.metadata.transactions import State, TransactionRecord
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.unit import metadata_support as m
from tests.unit.metadata_support import replay

E = pb.ErrorCode
TID_BYTES = m.topic_id(1)
NOW_MS = 1_000_000
BROKERS = (1, 2)
TID = next(t for t in (f"tx-{i}" for i in range(100)) if coordinator_for(t, BROKERS) == 1)
GROUP = next(g for g in (f"g-{i}" for i in range(100)) if coordinator_for(g, BROKERS) == 2)


def cluster() -> MetadataImage:
    return replay(
        MetadataImage(),
        m.register(1, 10, fenced=False),
        m.register(2, 20, fenced=False),
        m.topic("orders", TID_BYTES),
        *(m.partition(TID_BYTES, p, [1, 2], leader=1) for p in range(2)),
    )


def write(image: MetadataImage, record: TransactionRecord, broker_id: int = 1, epoch: int = 10):
    request = pb.WriteTransactionRequest(transaction=record, broker_id=broker_id, broker_epoch=epoch)
    plan = txn_ops.write(image, request, NOW_MS)
    return plan, replay(image, *plan.records) if plan.records else image


def txn(state_: int, epoch: int = 0, partitions: tuple[int, ...] = (), groups: tuple[str, ...] = ()):
    return m.transaction(TID, 5, epoch, state_, [("orders", p) for p in partitions], groups).transaction


def test_only_the_ids_coordinator_at_its_current_registration_may_write() -> None:
    image = cluster()
    for broker_id, epoch, code in (
        (2, 20, E.NOT_COORDINATOR),
        (1, 9, E.STALE_BROKER_EPOCH),
        (7, 1, E.BROKER_ID_NOT_REGISTERED),
    ):
        plan, _ = write(image, txn(State.TXN_EMPTY), broker_id, epoch)
        assert plan.response.status.error == code and plan.records == []
    plan, after = write(image, txn(State.TXN_EMPTY))
    assert plan.response.status.error == E.NONE
    recorded = after.transactions[TID]
    assert (recorded.coordinator, recorded.coordinator_broker_epoch, recorded.last_update_time_ms) == (
        1,
        10,
        NOW_MS,
    )
    fenced = replay(after, m.fence(1, 10))  # now broker 2 coordinates every id
    plan, _ = write(fenced, txn(State.TXN_ONGOING, partitions=(0,)))
    assert plan.response.status.error == E.NOT_COORDINATOR
    plan, moved = write(fenced, txn(State.TXN_ONGOING, partitions=(0,)), 2, 20)
    assert plan.response.status.error == E.NONE and moved.transactions[TID].coordinator_epoch == 1


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        ((), txn(State.TXN_ONGOING, partitions=(0,)), "cannot follow nothing"),
        ((txn(State.TXN_EMPTY, 3),), txn(State.TXN_EMPTY, 3), "not above"),
        (
            (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0,))),
            txn(State.TXN_ONGOING, 1, (0,)),
            "producer_epoch",
        ),
        (
            (
                txn(State.TXN_EMPTY),
                txn(State.TXN_ONGOING, partitions=(0,)),
                txn(State.TXN_PREPARE_COMMIT, partitions=(0,)),
            ),
            txn(State.TXN_COMPLETE_ABORT, partitions=(0,)),
            "cannot follow TXN_PREPARE_COMMIT",
        ),
        (
            (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0,))),
            txn(State.TXN_EMPTY, 1),
            "cannot follow TXN_ONGOING",
        ),
    ],
)
def test_a_transition_the_state_machine_forbids_is_refused_and_not_replayed(
    before: tuple[TransactionRecord, ...], after: TransactionRecord, why: str
) -> None:
    image = cluster()
    for record in before:
        plan, image = write(image, record)
        assert plan.response.status.error == E.NONE, plan.response.status.message
    plan, unchanged = write(image, after)
    assert plan.response.status.error == E.INVALID_TXN_STATE and why in plan.response.status.message
    assert plan.records == [] and unchanged is image
    with pytest.raises(ReplayError, match="TransactionRecord"):
        replay(image, m.Record(transaction=after))


def test_a_transaction_may_not_name_a_partition_that_does_not_exist() -> None:
    _, image = write(cluster(), txn(State.TXN_EMPTY))
    plan, _ = write(image, txn(State.TXN_ONGOING, partitions=(0, 5)))
    assert (
        plan.response.status.error == E.UNKNOWN_TOPIC_OR_PARTITION
        and "orders-5" in plan.response.status.message
    )


def txn_offsets(
    image: MetadataImage, offset: int, *, group: str = GROUP, epoch: int = 0, coordinator: int = 2
):
    request = pb.TxnOffsetCommitRequest(
        transactional_id=TID,
        producer_id=5,
        producer_epoch=epoch,
        offsets=pb.OffsetCommitRequest(
            group=group,
            topics=[
                pb.OffsetCommitTopic(
                    topic="orders", partitions=[pb.OffsetCommitPartition(partition=1, offset=offset)]
                )
            ],
            coordinator_id=coordinator,
            coordinator_epoch=20 if coordinator == 2 else 10,
        ),
    )
    plan = txn_ops.commit_offsets(image, request, NOW_MS)
    return plan, replay(image, *plan.records) if plan.records else image


def test_a_commit_writes_its_pending_offsets_with_its_completion_and_an_abort_drops_them() -> None:
    image = cluster()
    for record in (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0,))):
        _, image = write(image, record)
    plan, _ = txn_offsets(image, 42)
    assert (
        plan.response.status.error == E.INVALID_TXN_STATE
        and "AddOffsetsToTxn" in plan.response.status.message
    )
    _, image = write(image, txn(State.TXN_ONGOING, partitions=(0,), groups=(GROUP,)))
    for refused, code in (
        (txn_offsets(image, 42, epoch=1), E.PRODUCER_FENCED),
        (txn_offsets(image, 42, coordinator=1), E.NOT_COORDINATOR),  # not the group's coordinator
    ):
        assert refused[0].response.status.error == code and refused[0].records == []
    plan, image = txn_offsets(image, 42)
    assert plan.response.status.error == E.NONE
    assert image.txn_offsets[TID] == {(GROUP, TID_BYTES, 1): (42, "", NOW_MS)}
    assert GROUP not in image.offsets
    assert decode_image(encode_image(image)) == image  # a snapshot restates the pending offsets
    _, image = write(image, txn(State.TXN_PREPARE_COMMIT, partitions=(0,), groups=(GROUP,)))
    plan, image = write(image, txn(State.TXN_COMPLETE_COMMIT, partitions=(0,), groups=(GROUP,)))
    assert [r.WhichOneof("record") for r in plan.records] == ["offset_commit", "transaction"]
    assert image.offsets[GROUP][(TID_BYTES, 1)].offset == 42 and image.txn_offsets == {}

    for record in (txn(State.TXN_ONGOING, partitions=(1,), groups=(GROUP,)),):
        _, image = write(image, record)
    _, image = txn_offsets(image, 99)
    _, image = write(image, txn(State.TXN_PREPARE_ABORT, partitions=(1,), groups=(GROUP,)))
    plan, image = write(image, txn(State.TXN_COMPLETE_ABORT, partitions=(1,), groups=(GROUP,)))
    assert [r.WhichOneof("record") for r in plan.records] == ["transaction"]
    assert image.offsets[GROUP][(TID_BYTES, 1)].offset == 42 and image.txn_offsets == {}


# random sequences of requests -----------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["init", "init_kip360", "add", "add_offsets", "commit", "abort", "complete", "time_out"]
        ),
        st.integers(0, 3),  # which producer instance asks (an index into those initialized)
        st.integers(0, 1),  # which partition
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_random_requests_keep_the_transaction_invariants(ops: list[tuple[str, int, int]]) -> None:
    """Whatever the order of requests from producers old and new: an epoch handed out is
    above every earlier one of its producer id; a request from a fenced epoch changes
    nothing; a transaction, once prepared, completes exactly once and the way it was
    prepared, before another begins."""
    image = cluster()
    producers: list[tuple[int, int]] = []  # (producer id, epoch) each instance was given
    handed_out: list[tuple[int, int]] = []
    next_id = iter(range(100, 10_000))
    prepared: TransactionRecord | None = None
    completions = 0
    for op, who, partition in ops:
        current = image.transactions.get(TID)
        producer = producers[who % len(producers)] if producers else (-1, -1)
        if op in ("init", "init_kip360"):
            expected = producer if op == "init_kip360" else (-1, -1)
            new_id = next(next_id) if state.needs_new_producer_id(current) else None
            decision = state.init_producer_id(current, TID, 60_000, 900_000, expected, new_id)
        elif op == "add":
            decision = state.add_partitions(current, TID, *producer, {("orders", partition)})
        elif op == "add_offsets":
            decision = state.add_offsets(current, TID, *producer, GROUP)
        elif op in ("commit", "abort"):
            decision = state.end(current, TID, *producer, op == "commit")
        elif op == "complete":
            if current is None or current.state not in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT):
                continue
            decision = state.Transition(state.completed(current))
        else:
            if current is None or current.state != State.TXN_ONGOING:
                continue
            decision = state.Transition(state.fenced(current))
        fenced_asker = (
            current is not None
            and producer[0] == current.producer_id
            and producer[1] < current.producer_epoch
        )
        if isinstance(decision, state.Refused):
            if fenced_asker and op in ("add", "add_offsets", "commit", "abort"):
                assert decision.code == E.PRODUCER_FENCED
            continue
        if isinstance(decision, state.Unchanged):
            if op.startswith("init"):
                producers.append((decision.record.producer_id, decision.record.producer_epoch))
            continue
        if fenced_asker and op in ("add", "add_offsets", "commit", "abort"):
            raise AssertionError(f"{op} from fenced {producer} decided {decision}")
        plan, image = write(image, decision.record)
        assert plan.response.status.error == E.NONE, (op, plan.response.status.message)
        recorded = image.transactions[TID]
        if recorded.state in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT):
            prepared = recorded
        if recorded.state in (State.TXN_COMPLETE_COMMIT, State.TXN_COMPLETE_ABORT):
            assert prepared is not None
            assert recorded.state == state.completed(prepared).state
            completions += 1
            prepared = None
        if recorded.state == State.TXN_ONGOING:
            assert prepared is None, "a transaction began before the prepared one completed"
        if op.startswith("init") and recorded.state == State.TXN_EMPTY:
            given = (recorded.producer_id, recorded.producer_epoch)
            assert all(epoch < given[1] for pid, epoch in handed_out if pid == given[0])
            handed_out.append(given)
            producers.append(given)
    assert completions <= len([op for op, _, _ in ops if op == "complete"])


def test_ids_idle_past_the_expiration_are_forgotten_and_open_ones_kept() -> None:
    busy = next(t for t in (f"busy-{i}" for i in range(100)) if coordinator_for(t, BROKERS) == 1)
    image = cluster()
    for record in (
        txn(State.TXN_EMPTY),
        m.transaction(busy, 6, 0).transaction,
        m.transaction(busy, 6, 0, State.TXN_ONGOING, [("orders", 0)]).transaction,
    ):
        plan, image = write(image, record)
        assert plan.response.status.error == E.NONE
    assert txn_ops.expire(image, NOW_MS + 999, 1_000, 100).records == []  # not idle long enough
    expired = txn_ops.expire(image, NOW_MS + 1_000, 1_000, 100)
    assert [r.remove_transaction.transactional_id for r in expired.records] == [TID]  # the other is open
    after = replay(image, *expired.records)
    assert set(after.transactions) == {busy}
    with pytest.raises(ReplayError, match="its transaction is open"):
        replay(
            after, m.Record(remove_transaction=metadata_pb2.RemoveTransactionRecord(transactional_id=busy))
        )
    plan, _ = write(after, m.transaction(TID, 77, 0).transaction)  # forgotten: it starts anew
    assert plan.response.status.error == E.NONE


@pytest.mark.parametrize(
    ("before", "after", "dropped"),
    [
        (  # a coordinator answering a request it held through a pause, from an older image
            (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0, 1))),
            txn(State.TXN_ONGOING, partitions=(1,)),
            "orders-0",
        ),
        (
            (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0,), groups=(GROUP,))),
            txn(State.TXN_ONGOING, partitions=(0,)),
            GROUP,
        ),
        (
            (txn(State.TXN_EMPTY), txn(State.TXN_ONGOING, partitions=(0, 1))),
            txn(State.TXN_PREPARE_COMMIT, partitions=(1,)),
            "as they are",
        ),
        (
            (
                txn(State.TXN_EMPTY),
                txn(State.TXN_ONGOING, partitions=(0, 1)),
                txn(State.TXN_PREPARE_ABORT, partitions=(0, 1)),
            ),
            txn(State.TXN_COMPLETE_ABORT, partitions=(0,)),
            "as they are",
        ),
    ],
)
def test_an_open_transaction_never_loses_a_partition_or_group(
    before: tuple[TransactionRecord, ...], after: TransactionRecord, dropped: str
) -> None:
    """A partition dropped from an open transaction would never get its marker, and its
    last stable offset would stay below the transaction for ever (issue 30: found by the
    data-plane simulation). The replay still takes such a record, as older logs may hold one."""
    image = cluster()
    for record in before:
        plan, image = write(image, record)
        assert plan.response.status.error == E.NONE, plan.response.status.message
    plan, unchanged = write(image, after)
    assert plan.response.status.error == E.INVALID_TXN_STATE and dropped in plan.response.status.message
    assert plan.records == [] and unchanged is image
    assert plan.response.transaction == image.transactions[TID]  # the coordinator learns the state
    replay(image, m.Record(transaction=after))
