"""Transactions move with leadership: brokers in one process, real logs, fetches handed
over by the test (``test_replication``'s cluster). Followers build the open transactions
and the aborted index from the batches and markers they replicate, a marker is answered
only once the ISR holds it, and a new leader serves the same last stable offset and
aborted transactions to read_committed consumers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftka.broker.log.transaction_index import AbortedTxn
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2
from tests.unit.test_replication import TOPIC_NAME, Cluster, Node, result_of, run
from tests.unit.test_transaction_markers import txn_batch

E = controller_pb2.ErrorCode


async def produce(node: Node, payload: bytes) -> pb.ProducePartitionResult:
    request = pb.ProduceRequest(acks=1, timeout_ms=10_000, transactional_id="tx")
    request.topics.add(name=TOPIC_NAME).partitions.add(partition=0, records=payload)
    return result_of(await node.replicas.produce(request))


def markers(producer_id: int, committed: bool) -> pb.WriteTxnMarkersRequest:
    request = pb.WriteTxnMarkersRequest()
    marker = request.markers.add(producer_id=producer_id, producer_epoch=0, committed=committed)
    marker.topics.add(name=TOPIC_NAME, partitions=[0])
    return request


async def read_committed(node: Node) -> pb.FetchPartitionResult:
    request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1 << 20, isolation_level=1)
    request.topics.add(name=TOPIC_NAME).partitions.add(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    response = await node.replicas.fetch(request)
    return response.topics[0].partitions[0]


def transactions(node: Node) -> tuple[dict[int, int], list[AbortedTxn], int]:
    log = node.partition.log
    return (
        dict(log.producers.transactions.ongoing),
        log.aborted_transactions(0, log.log_end_offset),
        node.partition.last_stable_offset,
    )


def test_followers_replicate_markers_and_a_new_leader_keeps_the_last_stable_offset(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        n1, n2 = cluster.nodes[1], cluster.nodes[2]
        assert (await produce(n1, txn_batch(1, 0, b"a0", b"a1"))).base_offset == 0
        assert (await produce(n1, txn_batch(2, 0, b"c0"))).base_offset == 2
        writing = asyncio.create_task(n1.replicas.write_txn_markers(markers(1, committed=False)))
        await asyncio.sleep(0)  # the marker is written, and waits for the ISR
        assert n1.partition.log.log_end_offset == 4 and not writing.done()
        await cluster.catch_up(2, 3)
        answer = await writing
        assert answer.markers[0].topics[0].partitions[0].error == E.NONE, "answered once the ISR holds it"
        await cluster.catch_up(2, 3)  # the followers learn the high watermark
        for node in cluster.nodes.values():  # ended transactions below it are let go on every replica
            assert not node.partition.log.producers.transactions.unreplicated
        want = ({2: 2}, [AbortedTxn(1, 0, 3, 2)], 2)
        assert transactions(n1) == transactions(n2) == transactions(cluster.nodes[3]) == want

        cluster.elect(2, (2, 3))
        led = await read_committed(n2)
        assert (led.error, led.last_stable_offset) == (E.NONE, 2)
        assert [(t.producer_id, t.first_offset) for t in led.aborted_transactions] == [(1, 0)]
        writing = asyncio.create_task(n2.replicas.write_txn_markers(markers(2, committed=True)))
        await asyncio.sleep(0)
        await cluster.catch_up(3)
        assert (await writing).markers[0].topics[0].partitions[0].error == E.NONE
        done = await read_committed(n2)
        assert (done.last_stable_offset, done.high_watermark) == (5, 5)
        await cluster.catch_up(1, 3)
        assert transactions(n1) == transactions(n2) == ({}, [AbortedTxn(1, 0, 3, 2)], 5)

    run(body())
