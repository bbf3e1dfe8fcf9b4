"""Kafka's transaction APIs on the Kafka listener, asked by a raw client at every version
Kafka 3.9 serves: FindCoordinator for a transactional id, InitProducerId, AddPartitionsToTxn
(its batched shape from version 4), AddOffsetsToTxn, TxnOffsetCommit and EndTxn make one
committed transaction per version whose offsets the group then has; a fenced epoch is
PRODUCER_FENCED from version 2, INVALID_PRODUCER_EPOCH before (InitProducerId: from 4);
DescribeTransactions and ListTransactions in their shapes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from raftka.metadata.transactions import State
from tests.unit.kafka_wire import BrokerThread, broker_thread, call

TOPIC = "kt"
PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 90, 47, 48
APT = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
TOC = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    with broker_thread(
        tmp_path_factory.mktemp("kafka-txn"), {TOPIC: 2}, transactions_for_real=True
    ) as broker:
        yield broker


def add_partitions(tid: str, pid: int, epoch: int, version: int) -> AddPartitionsToTxnRequest:
    topics = [APT(name=TOPIC, partitions=[0, 1])]
    return AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=False, topics=topics
            )
        ],
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics,
    )


def partition_errors(answer: AddPartitionsToTxnResponse, version: int) -> set[int]:
    topics = (
        answer.results_by_topic_v3_and_below
        if version < 4
        else answer.results_by_transaction[0].topic_results
    )
    return {p.partition_error_code for t in topics for p in t.results_by_partition}


def settled(served: BrokerThread, tid: str) -> None:
    for _ in range(500):
        record = served.broker.controller.image.transactions.get(tid)
        if record is not None and record.state == State.TXN_COMPLETE_COMMIT:
            return
        time.sleep(0.01)
    raise AssertionError(f"{tid} never committed")


@pytest.mark.parametrize("step", range(6))
def test_a_transaction_at_every_version(served: BrokerThread, step: int) -> None:
    tid, group = f"kv{step}", f"gv{step}"
    find_v, init_v, add_v, other_v = min(step + 1, 6), min(step, 5), min(step, 5), min(step, 4)
    found = call(
        served.bootstrap,
        FindCoordinatorRequest(key=tid, key_type=1, coordinator_keys=[tid]),
        find_v,
        FindCoordinatorResponse,
    )
    coordinator = found if find_v < 4 else found.coordinators[0]
    assert (coordinator.error_code, coordinator.port) == (0, int(served.bootstrap.rpartition(":")[2]))
    init = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    started = call(served.bootstrap, init, init_v, InitProducerIdResponse)
    assert (started.error_code, started.producer_epoch) == (0, 0)
    pid = started.producer_id
    added = call(served.bootstrap, add_partitions(tid, pid, 0, add_v), add_v, AddPartitionsToTxnResponse)
    assert partition_errors(added, add_v) == {0}
    offsets = AddOffsetsToTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=0, group_id=group)
    assert call(served.bootstrap, offsets, other_v, AddOffsetsToTxnResponse).error_code == 0
    commit = TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=0, generation_id=-1, member_id="",
        group_instance_id=None,
        topics=[TOC(name=TOPIC, partitions=[TOC.TxnOffsetCommitRequestPartition(
            partition_index=1, committed_offset=17, committed_leader_epoch=-1, committed_metadata="")])],
    )  # fmt: skip
    committed = call(served.bootstrap, commit, other_v, TxnOffsetCommitResponse)
    assert [p.error_code for t in committed.topics for p in t.partitions] == [0]
    fenced = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=3, committed=True)
    expected = PRODUCER_FENCED if other_v >= 2 else INVALID_PRODUCER_EPOCH
    assert call(served.bootstrap, fenced, other_v, EndTxnResponse).error_code == expected
    end = EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=0, committed=True)
    assert call(served.bootstrap, end, other_v, EndTxnResponse).error_code == 0
    settled(served, tid)
    assert [c.offset for c in served.broker.controller.image.offsets[group].values()] == [17]
    retry_of_old = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=pid, producer_epoch=7
    )
    if init_v >= 3:  # KIP-360's producer id and epoch, from version 3
        answer = call(served.bootstrap, retry_of_old, init_v, InitProducerIdResponse)
        assert answer.error_code == (PRODUCER_FENCED if init_v >= 4 else INVALID_PRODUCER_EPOCH)


def test_describe_and_list_transactions_in_kafkas_shapes(served: BrokerThread) -> None:
    tid = "described"
    init = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=30_000, producer_id=-1, producer_epoch=-1
    )
    pid = call(served.bootstrap, init, 4, InitProducerIdResponse).producer_id
    call(served.bootstrap, add_partitions(tid, pid, 0, 3), 3, AddPartitionsToTxnResponse)
    described = call(
        served.bootstrap,
        DescribeTransactionsRequest(transactional_ids=[tid, "unknown-id"]),
        0,
        DescribeTransactionsResponse,
    )
    ours, unknown = described.transaction_states
    assert (ours.error_code, ours.transaction_state, ours.producer_id, ours.transaction_timeout_ms) == (
        0,
        "Ongoing",
        pid,
        30_000,
    )
    assert [(t.topic, sorted(t.partitions)) for t in ours.topics] == [(TOPIC, [0, 1])]
    assert unknown.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    for version in (0, 1):
        listing = ListTransactionsRequest(
            state_filters=["Ongoing", "Nonsense"], producer_id_filters=[], duration_filter=-1
        )
        listed = call(served.bootstrap, listing, version, ListTransactionsResponse)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            (tid, "Ongoing")
        ]
        assert listed.unknown_state_filters == ["Nonsense"]
