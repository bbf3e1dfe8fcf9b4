"""The idempotent producer's state moves with leadership: brokers in one process, real
logs, fetches handed over by the test (``test_replication``'s cluster). A follower
builds the state from the batches it appends, so a new leader answers a retry with the
original offsets; a follower that truncates forgets what it cut; every refusal writes
nothing."""

from __future__ import annotations

from pathlib import Path

from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2
from tests.unit.test_producer_state import idempotent
from tests.unit.test_replication import TOPIC_NAME, Cluster, Node, result_of, run

E = controller_pb2.ErrorCode


async def produce(node: Node, payload: bytes, acks: int = 1) -> pb.ProducePartitionResult:
    request = pb.ProduceRequest(acks=acks, timeout_ms=10_000)
    request.topics.add(name=TOPIC_NAME).partitions.add(partition=0, records=payload)
    return result_of(await node.replicas.produce(request))


def producers(node: Node) -> dict:
    return {pid: (e.epoch, list(e.batches)) for pid, e in node.partition.log.producers.producers.items()}


def test_a_retried_batch_gets_its_original_offset_from_a_new_leader(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        first, second = idempotent(7, 0, 0, b"a", b"b"), idempotent(7, 0, 2, b"c")
        assert (await produce(cluster.nodes[1], first)).base_offset == 0
        assert (await produce(cluster.nodes[1], second)).base_offset == 2
        await cluster.catch_up(2, 3)
        cluster.elect(2, (2, 3))  # the producer never heard back from broker 1 and retries at 2
        new_leader = cluster.nodes[2]
        for payload, offset in ((second, 2), (first, 0)):
            retried = await produce(new_leader, payload, acks=-1)
            assert (retried.error, retried.base_offset) == (E.NONE, offset)
        assert new_leader.partition.log.log_end_offset == 3, "no second copy"
        assert (await produce(new_leader, idempotent(7, 0, 3, b"d"))).base_offset == 3
        await cluster.catch_up(1, 3)
        assert new_leader.values() == cluster.nodes[1].values() == [b"a", b"b", b"c", b"d"]
        assert producers(cluster.nodes[1]) == producers(new_leader) == producers(cluster.nodes[3])

    run(body())


def test_a_follower_that_truncates_forgets_the_batches_it_cut(tmp_path: Path) -> None:
    """Producer 8's batch reached only broker 1 before it lost leadership; 1 truncates it
    away. Leading again, 1 must write 8's retry, not answer it with the offset that now
    holds producer 9's batch."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        n1, n2 = cluster.nodes[1], cluster.nodes[2]
        await produce(n1, idempotent(7, 0, 0, b"a"))
        await cluster.catch_up(2, 3)
        lost = idempotent(8, 0, 0, b"lost")
        assert (await produce(n1, lost)).base_offset == 1  # not replicated
        cluster.elect(2, (2, 3))
        assert (await produce(n2, idempotent(9, 0, 0, b"z"))).base_offset == 1
        await cluster.catch_up(1, 3)
        assert n1.values() == [b"a", b"z"] and producers(n1) == producers(n2)
        cluster.elect(1, (1, 2, 3))
        retried = await produce(n1, lost)
        assert (retried.error, retried.base_offset) == (E.NONE, 2)
        assert n1.values() == [b"a", b"z", b"lost"]

    run(body())


def test_refusals_write_nothing_and_name_the_producer(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        await produce(leader, idempotent(5, 2, 0, b"a"))
        for payload, code, words in (
            (idempotent(5, 2, 3, b"gap"), E.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence 3 does not follow 0"),
            (idempotent(5, 1, 1, b"old"), E.INVALID_PRODUCER_EPOCH, "epoch 1 is older than 2"),
            (idempotent(5, 3, 1, b"new"), E.OUT_OF_ORDER_SEQUENCE_NUMBER, "must start at sequence 0"),
            (idempotent(5, 2, 1, b"x") + idempotent(5, 2, 2, b"y"), E.INVALID_RECORD, "must come alone"),
            (idempotent(5, -1, 1, b"x"), E.INVALID_RECORD, "both must be 0 or more"),
        ):
            result = await produce(leader, payload)
            assert (result.error, result.base_offset) == (code, -1), E.Name(result.error)
            assert words in result.message and "t-0" in result.message
            assert leader.partition.log.log_end_offset == 1
        bumped = await produce(leader, idempotent(5, 3, 0, b"bumped"))
        assert (bumped.error, bumped.base_offset) == (E.NONE, 1)

    run(body())
