"""The transaction coordinator on one in-process broker, over the data protocol: a
transactional id gets a producer id and its epochs, a transaction's partitions and the
markers written to their leaders, its offsets committed only with it, zombies fenced,
timed-out transactions aborted, prepared ones finished by a coordinator that takes over,
and bad input refused naming its field."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from raftka.metadata.delta import MetadataDelta
from raftka.metadata.transactions import PRODUCER_EPOCH_MAX, State
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit import metadata_support as m
from tests.unit.broker_in_process import InProcessBroker, broker_in_process

E = controller_pb2.ErrorCode
Pb = broker_pb2
C = controller_pb2
TOPIC = "orders"
TID = "tx-1"


def run(tmp_path: Path, scenario: Callable[[InProcessBroker, BrokerClient], Awaitable[None]]) -> None:
    async def main() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 3, "other": 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                await scenario(broker, client)
            finally:
                client.close()

    asyncio.run(main())


async def init(
    client: BrokerClient, tid: str = TID, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
):
    return await client.InitProducerId(
        Pb.InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch
        ),
        timeout=5,
    )


async def add(
    client: BrokerClient, pid: int, epoch: int, *partitions: int, topic: str = TOPIC, tid: str = TID
):
    answer = await client.AddPartitionsToTxn(
        Pb.AddPartitionsToTxnRequest(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            topics=[Pb.TxnTopic(name=topic, partitions=partitions)],
        ),
        timeout=5,
    )
    return {(t.name, p.partition): p.error for t in answer.topics for p in t.partitions}


async def end(client: BrokerClient, pid: int, epoch: int, committed: bool, tid: str = TID) -> int:
    answer = await client.EndTxn(
        Pb.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed),
        timeout=5,
    )
    return answer.status.error


async def settled(broker: InProcessBroker, tid: str, wanted: int) -> None:
    """Until the controller's image shows the id in state ``wanted`` (markers written)."""
    for _ in range(500):
        record = broker.controller.image.transactions.get(tid)
        if record is not None and record.state == wanted:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(
        f"{tid} never reached {State.Name(wanted)}: {broker.controller.image.transactions.get(tid)}"
    )


def test_a_committed_transaction_writes_a_commit_marker_to_every_partition(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        first = await init(client)
        assert (first.status.error, first.producer_epoch) == (E.NONE, 0)
        pid = first.producer_id
        assert await add(client, pid, 0, 0, 2) == {(TOPIC, 0): E.NONE, (TOPIC, 2): E.NONE}
        assert await add(client, pid, 0, 1) == {(TOPIC, 1): E.NONE}
        assert await end(client, pid, 0, committed=True) == E.NONE
        await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
        markers = [m for _, r in broker.markers.requests for m in r.markers]
        assert {(t.name, p) for m in markers for t in m.topics for p in t.partitions} == {
            (TOPIC, 0),
            (TOPIC, 1),
            (TOPIC, 2),
        }
        assert all(m.committed and (m.producer_id, m.producer_epoch) == (pid, 0) for m in markers)
        assert await end(client, pid, 0, committed=True) == E.NONE  # a retry of the same end
        assert await end(client, pid, 0, committed=False) == E.INVALID_TXN_STATE

    run(tmp_path, scenario)


def test_init_producer_id_aborts_the_open_transaction_and_fences_its_producer(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        pid = (await init(client)).producer_id
        assert await add(client, pid, 0, 0) == {(TOPIC, 0): E.NONE}
        again = await init(client)  # a new instance of the same transactional id
        assert again.status.error == E.CONCURRENT_TRANSACTIONS  # Kafka's answer: ask again
        await settled(broker, TID, State.TXN_COMPLETE_ABORT)
        (_, request), *_ = broker.markers.requests
        marker = request.markers[0]
        assert (marker.committed, marker.producer_epoch) == (False, 1)  # the abort fences epoch 0
        newest = await init(client)
        assert (newest.status.error, newest.producer_id, newest.producer_epoch) == (E.NONE, pid, 2)
        assert await add(client, pid, 0, 1) == {(TOPIC, 1): E.PRODUCER_FENCED}
        assert await end(client, pid, 0, committed=True) == E.PRODUCER_FENCED
        assert await end(client, pid + 1, 2, committed=True) == E.INVALID_PRODUCER_ID_MAPPING
        assert await add(client, pid, 2, 1) == {(TOPIC, 1): E.NONE}

    run(tmp_path, scenario)


def test_a_producer_whose_epoch_is_exhausted_gets_a_new_producer_id_and_a_retry_gets_it_again(
    tmp_path: Path,
) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        delta = MetadataDelta(broker.controller.image)
        delta.replay(m.transaction(TID, 7, PRODUCER_EPOCH_MAX))
        broker.controller.set_image(delta.apply(broker.controller.image.offset + 1))
        renewed = await init(client, pid=7, epoch=PRODUCER_EPOCH_MAX)
        assert renewed.status.error == E.NONE
        assert renewed.producer_id != 7 and renewed.producer_epoch == 0
        recorded = broker.controller.image.transactions[TID]
        assert (recorded.last_producer_id, recorded.last_producer_epoch) == (7, PRODUCER_EPOCH_MAX)
        retried = await init(client, pid=7, epoch=PRODUCER_EPOCH_MAX)  # KIP-360: the answer was lost
        assert (retried.producer_id, retried.producer_epoch) == (renewed.producer_id, 0)
        stale = await init(client, pid=7, epoch=5)
        assert stale.status.error == E.PRODUCER_FENCED

    run(tmp_path, scenario)


def test_a_transaction_open_longer_than_its_timeout_is_aborted_under_a_new_epoch(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        pid = (await init(client, timeout_ms=1_000)).producer_id
        assert await add(client, pid, 0, 0, 1) == {(TOPIC, 0): E.NONE, (TOPIC, 1): E.NONE}
        await broker.api.transactions.abort_timed_out()
        assert broker.controller.image.transactions[TID].state == State.TXN_ONGOING  # not yet
        broker.controller.wall_clock_ms += 1_001
        await broker.api.transactions.abort_timed_out()
        await settled(broker, TID, State.TXN_COMPLETE_ABORT)
        assert broker.controller.image.transactions[TID].producer_epoch == 1
        markers = [m for _, r in broker.markers.requests for m in r.markers]
        assert {(m.committed, m.producer_epoch) for m in markers} == {(False, 1)}
        assert await end(client, pid, 0, committed=True) == E.PRODUCER_FENCED
        assert (await init(client, pid=pid, epoch=0)).status.error == E.PRODUCER_FENCED  # no way back in

    run(tmp_path, scenario)


async def txn_commit(client: BrokerClient, pid: int, epoch: int, group: str, offset: int):
    request = C.TxnOffsetCommitRequest(
        transactional_id=TID,
        producer_id=pid,
        producer_epoch=epoch,
        offsets=C.OffsetCommitRequest(
            group=group,
            topics=[C.OffsetCommitTopic(topic=TOPIC, partitions=[C.OffsetCommitPartition(offset=offset)])],
        ),
    )
    return await client.TxnOffsetCommit(request, timeout=5)


async def fetched(client: BrokerClient, group: str, require_stable: bool) -> tuple[int, int]:
    answer = await client.OffsetFetch(
        C.OffsetFetchRequest(
            group=group,
            topics=[C.TopicPartitions(topic=TOPIC, partitions=[0])],
            require_stable=require_stable,
        ),
        timeout=5,
    )
    (only,) = answer.offsets
    return only.error, only.offset


def test_offsets_committed_in_a_transaction_count_only_once_it_commits(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        pid = (await init(client)).producer_id
        assert (
            await txn_commit(client, pid, 0, "g", 42)
        ).status.error == E.INVALID_TXN_STATE  # no AddOffsets
        assert await add(client, pid, 0, 0) == {(TOPIC, 0): E.NONE}
        added = await client.AddOffsetsToTxn(
            Pb.AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, group_id="g"),
            timeout=5,
        )
        assert added.status.error == E.NONE
        answer = await txn_commit(client, pid, 0, "g", 42)
        assert answer.status.error == E.NONE and [p.error for p in answer.partitions] == [E.NONE]
        assert await fetched(client, "g", require_stable=False) == (E.NONE, -1)
        assert await fetched(client, "g", require_stable=True) == (E.UNSTABLE_OFFSET_COMMIT, -1)
        assert await end(client, pid, 0, committed=True) == E.NONE
        await settled(broker, TID, State.TXN_COMPLETE_COMMIT)
        assert await fetched(client, "g", require_stable=True) == (E.NONE, 42)
        assert broker.controller.image.txn_offsets == {}

        assert await add(client, pid, 0, 0) == {(TOPIC, 0): E.NONE}  # the next transaction, aborted
        await client.AddOffsetsToTxn(
            Pb.AddOffsetsToTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, group_id="g"),
            timeout=5,
        )
        assert (await txn_commit(client, pid, 0, "g", 99)).status.error == E.NONE
        assert await end(client, pid, 0, committed=False) == E.NONE
        await settled(broker, TID, State.TXN_COMPLETE_ABORT)
        assert await fetched(client, "g", require_stable=True) == (E.NONE, 42)

    run(tmp_path, scenario)


def test_verify_only_answers_whether_the_partition_is_in_the_ongoing_transaction(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        pid = (await init(client)).producer_id
        await add(client, pid, 0, 0)
        answer = await client.AddPartitionsToTxn(
            Pb.AddPartitionsToTxnRequest(
                transactional_id=TID,
                producer_id=pid,
                producer_epoch=0,
                topics=[Pb.TxnTopic(name=TOPIC, partitions=[0, 1])],
                verify_only=True,
            ),
            timeout=5,
        )
        verdict = {p.partition: p.error for t in answer.topics for p in t.partitions}
        assert verdict == {0: E.NONE, 1: E.INVALID_TXN_STATE}
        assert broker.controller.image.transactions[TID].topics[0].partitions == [0]  # nothing added

    run(tmp_path, scenario)


def test_describe_and_list_show_the_transaction_as_kafka_names_it(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        pid = (await init(client, timeout_ms=30_000)).producer_id
        await init(client, tid="tx-idle")
        await add(client, pid, 0, 2, 0)
        described = await client.DescribeTransactions(
            Pb.DescribeTransactionsRequest(transactional_ids=[TID, "nobody"]), timeout=5
        )
        ours, unknown = described.transactions
        assert (ours.state, ours.producer_id, ours.producer_epoch, ours.timeout_ms) == (
            "Ongoing",
            pid,
            0,
            30_000,
        )
        assert ours.start_time_ms == broker.controller.wall_clock_ms
        assert [(t.name, list(t.partitions)) for t in ours.topics] == [(TOPIC, [0, 2])]
        assert unknown.error == E.TRANSACTIONAL_ID_NOT_FOUND
        listed = await client.ListTransactions(Pb.ListTransactionsRequest(), timeout=5)
        assert {(t.transactional_id, t.state) for t in listed.transactions} == {
            (TID, "Ongoing"),
            ("tx-idle", "Empty"),
        }
        ongoing = await client.ListTransactions(
            Pb.ListTransactionsRequest(states=["Ongoing", "Bogus"]), timeout=5
        )
        assert [t.transactional_id for t in ongoing.transactions] == [TID]
        assert list(ongoing.unknown_state_filters) == ["Bogus"]

    run(tmp_path, scenario)


def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(tmp_path: Path) -> None:
    async def scenario(broker: InProcessBroker, client: BrokerClient) -> None:
        for tid in ("", "x" * 250):
            answer = (
                await init(client, tid=tid) if tid else await client.EndTxn(Pb.EndTxnRequest(), timeout=5)
            )
            assert answer.status.error == E.INVALID_REQUEST and "transactional_id" in answer.status.message
        for timeout_ms in (0, -5, 900_001):
            answer = await init(client, timeout_ms=timeout_ms)
            assert answer.status.error == E.INVALID_TRANSACTION_TIMEOUT
            assert "transaction_timeout_ms" in answer.status.message
        assert broker.controller.image.transactions == {}
        pid = (await init(client)).producer_id
        assert await add(client, pid, 0, 0, 7) == {
            (TOPIC, 0): E.OPERATION_NOT_ATTEMPTED,
            (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert broker.controller.image.transactions[TID].state == State.TXN_EMPTY
        assert await end(client, pid, 0, committed=True) == E.INVALID_TXN_STATE  # nothing to commit

    run(tmp_path, scenario)
