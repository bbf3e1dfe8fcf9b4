"""Kafka's replication rules, deterministic: brokers in one process, real partition logs
on disk, fetches handed from follower to leader by the test (no network, no timers).

Each step is explicit: a produce on the leader, one fetch round of a follower, a
metadata image that changes leaders or the ISR. The tests then assert on what the logs
hold and what the leader answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from raftka.broker.log.manager import LogManager
from raftka.broker.partitions import BrokerPartitions
from raftka.broker.replica.fetcher import FollowerFetch
from raftka.broker.replica.manager import ReplicaManager
from raftka.metadata.image import (
    TOPIC,
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionState,
    TopicImage,
    frozen,
)
from raftka.node.config import BrokerConfig
from raftka.records.codec import BatchBuilder, read_records
from raftka.security.principal import BROKER, CLIENT, Principal, current_principal
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
TOPIC_NAME = "t"
TOPIC_ID = uuid.UUID(int=7).bytes
LAG_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Node:
    """One broker: its logs, replica manager and follower fetch state."""

    def __init__(self, broker_id: int, root: Path, clock: Clock) -> None:
        self.broker_id = broker_id
        self.broker_epoch = 1  # its lifecycle's: the offset of its registration, as the controller answered
        self.isr_requests: list[tuple[int, ...]] = []
        self.logs = LogManager(root / f"broker-{broker_id}")
        self.logs.open_all()
        config = BrokerConfig(replica_lag_time_max_ms=LAG_MS)
        self.fetch = FollowerFetch(broker_id, config, lambda: self.broker_epoch, lambda p: None)
        self.roles = BrokerPartitions(broker_id)
        self.replicas = ReplicaManager(
            broker_id,
            self.logs,
            config,
            request_isr_change=lambda p, isr: self.isr_requests.append(isr),
            on_follow=lambda p: self.fetch.partitions.__setitem__(p, 0.0),
            on_stop_following=lambda p: self.fetch.partitions.pop(p, None),
            high_watermarks={},
            clock_ms=clock,
        )

    def adopt(self, image: MetadataImage) -> None:
        self.replicas.apply(image, self.roles.update(image))

    @property
    def partition(self):  # noqa: ANN201
        return self.replicas.get(TOPIC_NAME, 0)

    def offsets(self) -> list[int]:
        return [r.offset for r in read_records(self.partition.log.read(0, 1 << 30).records)]

    def values(self) -> list[bytes]:
        return [r.value for r in read_records(self.partition.log.read(0, 1 << 30).records)]


class Cluster:
    def __init__(self, root: Path, min_isr: int = 1) -> None:
        self.clock = Clock()
        self.nodes = {b: Node(b, root, self.clock) for b in (1, 2, 3)}
        self.state = PartitionState(
            replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=0, partition_epoch=0
        )
        self.fenced: set[int] = set()
        self.epochs = dict.fromkeys(self.nodes, 1)  # registered broker -> its broker epoch in the image
        self.min_isr = min_isr
        self.publish()

    def publish(self, **changes: object) -> None:
        """A metadata image with the partition changed as given, adopted by every broker."""
        self.state = dataclasses.replace(self.state, **changes)
        brokers = {
            b: BrokerRegistration(
                b, "x", epoch, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),), "", b in self.fenced
            )
            for b, epoch in self.epochs.items()
        }
        image = MetadataImage(
            offset=10,
            brokers=frozen(brokers),
            topics_by_id=frozen({TOPIC_ID: TopicImage(TOPIC_NAME, TOPIC_ID, frozen({0: self.state}))}),
            topic_ids_by_name=frozen({TOPIC_NAME: TOPIC_ID}),
            configs=frozen({(TOPIC, TOPIC_NAME): frozen({"min.insync.replicas": str(self.min_isr)})}),
        )
        for node in self.nodes.values():
            node.adopt(image)

    def elect(self, leader: int, isr: tuple[int, ...]) -> None:
        self.publish(
            leader=leader,
            isr=isr,
            leader_epoch=self.state.leader_epoch + 1,
            partition_epoch=self.state.partition_epoch + 1,
        )

    async def replicate(self, follower: int) -> pb.FetchResponse:
        """One fetch round: the follower asks its leader, the leader answers at once."""
        node = self.nodes[follower]
        request, sent = node.fetch.request(node.fetch.ready(float("inf")))
        request.max_wait_ms = 0
        response = await self.nodes[self.state.leader].replicas.fetch(request)
        node.fetch.apply(response, sent)
        return response

    async def catch_up(self, *followers: int, rounds: int = 4) -> None:
        for _ in range(rounds):
            for follower in followers:
                await self.replicate(follower)


def batch(*values: bytes) -> bytes:
    builder = BatchBuilder()
    for value in values:
        assert builder.append(1_700_000_000_000, None, value)
    return bytes(builder.build())


def produce_request(values: list[bytes], acks: int = -1, timeout_ms: int = 10_000) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
    request.topics.add(name=TOPIC_NAME).partitions.add(partition=0, records=batch(*values))
    return request


def result_of(response: pb.ProduceResponse) -> pb.ProducePartitionResult:
    return response.topics[0].partitions[0]


def run(coro) -> None:  # noqa: ANN001
    asyncio.run(coro)


def test_an_old_leader_truncates_its_unreplicated_records_by_epoch_when_it_returns(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader, b2, b3 = cluster.nodes[1], cluster.nodes[2], cluster.nodes[3]
        assert result_of(await leader.replicas.produce(produce_request([b"a", b"b"], acks=1))).error == E.NONE
        await cluster.catch_up(2, 3)
        assert leader.partition.high_watermark == 2
        # Unreplicated on the old leader only, in batches of their own.
        for value in (b"lost1", b"lost2", b"lost3"):
            assert result_of(await leader.replicas.produce(produce_request([value], acks=1))).error == E.NONE
        assert leader.partition.log.log_end_offset == 5

        cluster.elect(2, (2, 3))  # broker 1 is cut off; 2 leads at epoch 1
        assert result_of(await b2.replicas.produce(produce_request([b"c"], acks=1))).error == E.NONE
        await cluster.catch_up(3, 1)

        assert leader.values() == b2.values() == b3.values() == [b"a", b"b", b"c"]
        assert leader.offsets() == [0, 1, 2]
        assert leader.partition.log.latest_epoch == 1

    run(body())


def test_a_follower_that_diverges_over_several_epochs_converges(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        n1, n2 = cluster.nodes[1], cluster.nodes[2]
        await n1.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(2, 3)
        await n1.replicas.produce(produce_request([b"x1"], acks=1))  # epoch 0, only on 1
        cluster.elect(2, (2, 3))
        await n2.replicas.produce(produce_request([b"y1", b"y2"], acks=1))  # epoch 1, only on 2
        cluster.elect(3, (3,))  # 2 cut off too: 3 leads at epoch 2 with just "a"
        await cluster.nodes[3].replicas.produce(produce_request([b"z"], acks=1))
        await cluster.catch_up(1, 2)
        assert n1.values() == n2.values() == cluster.nodes[3].values() == [b"a", b"z"]

    run(body())


def test_the_high_watermark_never_goes_back_on_any_broker(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        seen = {b: 0 for b in cluster.nodes}

        def check() -> None:
            for b, node in cluster.nodes.items():
                hw = node.partition.high_watermark
                assert hw >= seen[b], f"broker {b}: high watermark {seen[b]} -> {hw}"
                seen[b] = hw

        for round_ in range(3):
            leader = cluster.nodes[cluster.state.leader]
            await leader.replicas.produce(produce_request([b"v%d" % round_] * 3, acks=1))
            check()
            others = [b for b in cluster.nodes if b != cluster.state.leader]
            await cluster.catch_up(*others)
            check()
            await leader.replicas.produce(produce_request([b"u"], acks=1))  # unreplicated tail
            check()
            nxt = others[0]
            cluster.elect(nxt, tuple(b for b in (1, 2, 3) if b != cluster.state.leader))
            check()
            await cluster.catch_up(*[b for b in cluster.nodes if b != nxt])
            check()
        assert seen[cluster.state.leader] > 0

    run(body())


def test_acks_all_waits_for_every_isr_member_and_the_answer_names_the_base_offset(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        leader = cluster.nodes[1]
        pending = asyncio.create_task(leader.replicas.produce(produce_request([b"a", b"b"])))
        await asyncio.sleep(0)
        await cluster.replicate(2)
        await cluster.replicate(2)  # 2 caught up; 3 not yet: not acknowledged
        await asyncio.sleep(0)
        assert not pending.done()
        await cluster.catch_up(3, rounds=2)
        result = result_of(await pending)
        assert (result.error, result.base_offset) == (E.NONE, 0)
        assert leader.partition.high_watermark == 2

    run(body())


def test_acks_all_below_min_isr_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        cluster.publish(isr=(1,), partition_epoch=1)
        leader = cluster.nodes[1]
        result = result_of(await leader.replicas.produce(produce_request([b"a"])))
        assert result.error == E.NOT_ENOUGH_REPLICAS
        assert "min.insync.replicas 2" in result.message
        assert leader.partition.log.log_end_offset == 0
        assert result_of(await leader.replicas.produce(produce_request([b"a"], acks=1))).error == E.NONE

    run(body())


def test_an_isr_shrinking_below_min_while_waiting_answers_not_enough_replicas_after_append(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        leader = cluster.nodes[1]
        pending = asyncio.create_task(leader.replicas.produce(produce_request([b"a"])))
        await asyncio.sleep(0)
        cluster.publish(isr=(1,), partition_epoch=1)  # 2 and 3 dropped (e.g. fenced)
        result = result_of(await pending)
        assert result.error == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert leader.partition.log.log_end_offset == 1, "written, as Kafka does"

    run(body())


def test_a_lagging_follower_is_shrunk_then_expanded_with_compare_and_set(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        await leader.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(2, 3)
        await leader.replicas.produce(produce_request([b"b"], acks=1))
        await cluster.catch_up(2)  # 3 stops fetching
        cluster.clock.ms += LAG_MS + 1
        await cluster.replicate(2)  # 2 keeps up
        leader.replicas.shrink_isrs()
        assert leader.isr_requests == [(1, 2)]
        partition = leader.partition
        assert partition.maximal_isr() == {1, 2, 3}, "3 counts until the shrink commits"

        # The controller refuses: someone else changed the partition (CAS conflict).
        partition.isr_change_refused(partition.partition_epoch + 1)
        leader.replicas.isr_change_done(partition)
        leader.replicas.shrink_isrs()
        assert leader.isr_requests == [(1, 2)], "no new change before the metadata moves"
        cluster.publish(partition_epoch=1)  # the metadata catches up (ISR unchanged)
        leader.replicas.shrink_isrs()
        assert leader.isr_requests == [(1, 2), (1, 2)]

        cluster.publish(isr=(1, 2), partition_epoch=2)  # the shrink commits
        assert partition.maximal_isr() == {1, 2}
        await cluster.catch_up(3, rounds=2)  # 3 returns and reaches the high watermark
        assert leader.isr_requests[-1] == (1, 2, 3)
        cluster.publish(isr=(1, 2, 3), partition_epoch=3)
        assert partition.isr == (1, 2, 3) and partition.pending_isr is None

    run(body())


def test_a_fenced_follower_is_not_taken_back_into_the_isr(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        cluster.fenced.add(3)
        cluster.publish(isr=(1, 2), partition_epoch=1)
        await cluster.catch_up(3, rounds=2)
        assert cluster.nodes[1].isr_requests == []

    run(body())


@pytest.mark.parametrize("request_kind", ["produce", "fetch", "list_offsets"])
def test_stale_and_future_leader_epochs_are_refused(tmp_path: Path, request_kind: str) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        cluster.elect(1, (1, 2, 3))
        cluster.elect(1, (1, 2, 3))  # leader epoch 2
        leader = cluster.nodes[1]
        for epoch, code in ((1, E.FENCED_LEADER_EPOCH), (3, E.UNKNOWN_LEADER_EPOCH), (2, E.NONE)):
            if request_kind == "produce":
                request = produce_request([b"a"], acks=1)
                request.topics[0].partitions[0].current_leader_epoch = epoch
                result = result_of(await leader.replicas.produce(request))
            elif request_kind == "fetch":
                request = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20)
                request.topics.add(name=TOPIC_NAME).partitions.add(
                    partition=0, current_leader_epoch=epoch, partition_max_bytes=1 << 20
                )
                result = (await leader.replicas.fetch(request)).topics[0].partitions[0]
            else:
                request = pb.ListOffsetsRequest()
                request.topics.add(name=TOPIC_NAME).partitions.add(
                    partition=0, current_leader_epoch=epoch, timestamp=-1
                )
                result = leader.replicas.list_offsets(request).topics[0].partitions[0]
            assert result.error == code, (epoch, E.Name(result.error))
            if code != E.NONE:
                assert (result.leader_id, result.leader_epoch) == (1, 2)
        assert leader.partition.log.log_end_offset == (1 if request_kind == "produce" else 0)

    run(body())


def test_a_follower_and_a_non_replica_are_not_leaders(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        result = result_of(await cluster.nodes[2].replicas.produce(produce_request([b"a"], acks=1)))
        assert (result.error, result.leader_id) == (E.NOT_LEADER_OR_FOLLOWER, 1)
        request = produce_request([b"a"], acks=1)
        request.topics[0].name = "nope"
        assert (
            result_of(await cluster.nodes[1].replicas.produce(request)).error == E.UNKNOWN_TOPIC_OR_PARTITION
        )

    run(body())


def test_consumers_read_only_below_the_high_watermark(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        await leader.replicas.produce(produce_request([b"a", b"b"], acks=1))
        request = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20)
        request.topics.add(name=TOPIC_NAME).partitions.add(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        first = (await leader.replicas.fetch(request)).topics[0].partitions[0]
        assert (first.error, first.records, first.high_watermark) == (E.NONE, b"", 0)
        await cluster.catch_up(2, 3)
        second = (await leader.replicas.fetch(request)).topics[0].partitions[0]
        assert [r.value for r in read_records(second.records)] == [b"a", b"b"]
        assert second.high_watermark == 2

    run(body())


def test_a_parked_consumer_fetch_wakes_when_the_high_watermark_moves(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        request = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20, min_bytes=1, max_wait_ms=60_000)
        request.topics.add(name=TOPIC_NAME).partitions.add(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        parked = asyncio.create_task(leader.replicas.fetch(request))
        await leader.replicas.produce(produce_request([b"a"], acks=1))
        await asyncio.sleep(0)
        assert not parked.done(), "not committed yet: nothing for a consumer"
        await cluster.catch_up(2, 3)
        answer = (await asyncio.wait_for(parked, 10)).topics[0].partitions[0]
        assert [r.value for r in read_records(answer.records)] == [b"a"]

    run(body())


# who may fetch as a follower ------------------------------------------------------------

CLIENT_CERT = Principal("User:CN=alice,OU=client,O=raftka", CLIENT)
BROKER_3_CERT = Principal("User:CN=broker-3,OU=broker,O=raftka", BROKER, 3)
# case -> (the claims (replica_id, replica_epoch) the spoofer makes, the certificate it
# presents (None: no TLS), the answer: a whole-request refusal or, for a non-replica, per partition)
SPOOFS = {
    "a stale broker epoch": ([(2, 0), (3, 0)], None, E.STALE_BROKER_EPOCH),
    "a broker epoch not yet registered": ([(2, 2), (3, 2)], None, E.STALE_BROKER_EPOCH),
    "an unknown broker": ([(4, 1)], None, E.BROKER_ID_NOT_REGISTERED),
    "a fenced broker": ([(3, 1)], None, E.INELIGIBLE_REPLICA),
    "a registered broker that is no replica": ([(5, 1)], None, E.NOT_LEADER_OR_FOLLOWER),
    "a client's certificate": ([(2, 1), (3, 1)], CLIENT_CERT, E.CLUSTER_AUTHORIZATION_FAILED),
    "another broker's certificate": ([(2, 1)], BROKER_3_CERT, E.CLUSTER_AUTHORIZATION_FAILED),
}


@contextlib.contextmanager
def presenting(principal: Principal | None) -> Iterator[None]:
    """Requests handled meanwhile come from ``principal``, as a TLS listener sets it."""
    token = current_principal.set(principal)
    try:
        yield
    finally:
        current_principal.reset(token)


def follower_fetch(replica_id: int, replica_epoch: int, fetch_offset: int) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=replica_id, replica_epoch=replica_epoch, max_bytes=1 << 20)
    request.topics.add(name=TOPIC_NAME, topic_id=TOPIC_ID).partitions.add(
        partition=0, fetch_offset=fetch_offset, last_fetched_epoch=-1, partition_max_bytes=1 << 20
    )
    return request


def refusal_of(response: pb.FetchResponse) -> tuple[int, bytes]:
    """(the request's error, else the partition's; the records answered)."""
    if response.status.error != E.NONE:
        assert not response.topics
        return response.status.error, b""
    result = response.topics[0].partitions[0]
    return result.error, result.records


@pytest.mark.parametrize("case", list(SPOOFS))
def test_a_spoofed_follower_fetch_reads_nothing_and_moves_neither_the_high_watermark_nor_the_isr(
    tmp_path: Path, case: str
) -> None:
    """Records only the leader holds, an acks=all produce waiting for follower 2, and 3 out
    of the ISR: a fetch claiming 2 would acknowledge the produce, one claiming 3 would
    bring it back into the ISR, either would read above the high watermark."""
    claims, principal, code = SPOOFS[case]

    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        if case == "a fenced broker":
            cluster.fenced.add(3)
        cluster.epochs[5] = 1  # registered, replica of nothing
        cluster.publish(isr=(1, 2), partition_epoch=1)
        leader = cluster.nodes[1]
        pending = asyncio.create_task(leader.replicas.produce(produce_request([b"a", b"b"])))
        await asyncio.sleep(0)
        with presenting(principal):
            for replica_id, replica_epoch in claims:
                for fetch_offset in (0, 2, 2):
                    answer = await leader.replicas.fetch(
                        follower_fetch(replica_id, replica_epoch, fetch_offset)
                    )
                    assert refusal_of(answer) == (code, b""), (replica_id, E.Name(refusal_of(answer)[0]))
        assert leader.partition.high_watermark == 0
        assert leader.isr_requests == []
        assert not pending.done(), "acknowledged though only the leader holds the records"

        await cluster.catch_up(2, rounds=2)  # the real follower 2, no certificate (no TLS)
        assert result_of(await pending).error == E.NONE
        assert leader.partition.high_watermark == 2

    run(body())


def test_a_follower_fetches_with_its_certificate_and_its_current_broker_epoch(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        await leader.replicas.produce(produce_request([b"a"], acks=1))
        with presenting(Principal("User:CN=broker-2,OU=broker,O=raftka", BROKER, 2)):
            await cluster.catch_up(2, rounds=2)
        assert cluster.nodes[2].values() == [b"a"]

        # 2 lost its session and registered again: the leader has not replayed that yet.
        cluster.nodes[2].broker_epoch = 40
        await leader.replicas.produce(produce_request([b"b"], acks=1))
        refused = await cluster.replicate(2)
        assert refused.status.error == E.STALE_BROKER_EPOCH
        assert (
            "replica_epoch: broker 2: epoch 40 is not the current registration's (1)"
            in refused.status.message
        )
        assert cluster.nodes[2].values() == [b"a"]

        cluster.epochs[2] = 40
        cluster.publish()
        await cluster.catch_up(2, rounds=2)
        assert cluster.nodes[2].values() == [b"a", b"b"]
        stale = await leader.replicas.fetch(follower_fetch(2, 1, 2))  # the old registration's epoch
        assert stale.status.error == E.STALE_BROKER_EPOCH

    run(body())


def test_refused_follower_fetches_are_logged_at_most_once_per_interval(tmp_path: Path) -> None:
    """A client can send refused fetches at will: one line per interval on each leader, a
    warning for a wrong certificate; a stale epoch (every broker restart brings one) is news."""

    async def body() -> None:
        with structlog.testing.capture_logs() as logs:
            leader = Cluster(tmp_path / "a").nodes[1]
            with presenting(CLIENT_CERT):
                for _ in range(3):
                    await leader.replicas.fetch(follower_fetch(2, 1, 0))
            leader = Cluster(tmp_path / "b").nodes[1]
            for _ in range(3):
                await leader.replicas.fetch(follower_fetch(2, 0, 0))
        refused = [(e["log_level"], e["error"]) for e in logs if e["event"] == "follower fetch refused"]
        assert refused == [("warning", "CLUSTER_AUTHORIZATION_FAILED"), ("info", "STALE_BROKER_EPOCH")]

    run(body())


def test_a_follower_says_once_that_its_leader_refuses_it(tmp_path: Path) -> None:
    """The fetcher asks again every backoff while refused: one line per distinct refusal."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        follower = cluster.nodes[2]
        with structlog.testing.capture_logs() as logs:
            follower.broker_epoch = 40  # registered again; the leader has not replayed it
            for _ in range(3):
                await cluster.replicate(2)
            follower.broker_epoch = 1
            await cluster.replicate(2)
            follower.broker_epoch = 40
            await cluster.replicate(2)
        said = [(e["log_level"], e["detail"]) for e in logs if e["event"] == "fetch refused"]
        stale = "STALE_BROKER_EPOCH: replica_epoch: broker 2: epoch 40 is not the current registration's (1)"
        assert said == [("info", stale), ("info", stale)]

    run(body())
