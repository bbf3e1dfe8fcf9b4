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
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from raftka.broker.log import checkpoint
from raftka.broker.log.manager import RECOVERY_POINTS_FILE, LogManager
from raftka.broker.partitions import BrokerPartitions
from raftka.broker.replica.fetcher import FollowerFetch
from raftka.broker.replica.manager import ReplicaManager
from raftka.broker.replica.partition import Partition
from raftka.broker.replica.throttle import FOLLOWER, ReplicationQuota
from raftka.metadata.image import BROKER as BROKER_RESOURCE
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
from raftka.records.codec import BatchBuilder, Compression, read_records
from raftka.security.principal import BROKER, CLIENT, Principal, current_principal
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2
from raftka.wire import frames
from raftka.wire.client import BrokerClient
from raftka.wire.server import FrameServer

E = controller_pb2.ErrorCode
TOPIC_NAME = "t"
TOPIC_ID = uuid.UUID(int=7).bytes
LAG_MS = 30_000
INCARNATION = "x"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Node:
    """One broker: its logs, replica manager and follower fetch state."""

    def __init__(
        self,
        broker_id: int,
        root: Path,
        clock: Clock,
        incarnation: str = INCARNATION,
        high_watermarks: dict[str, int] | None = None,
        config: BrokerConfig | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.broker_epoch = 1  # its lifecycle's: the offset of its registration, as the controller answered
        self.isr_requests: list[tuple[int, ...]] = []
        self.slow_disk = False  # a truncation's checkpoint is on disk only once the test runs on_disk_later
        self.on_disk_later: list[Callable[[], None]] = []
        self.logs = LogManager(root / f"broker-{broker_id}")
        self.logs.open_all()
        config = config or BrokerConfig(replica_lag_time_max_ms=LAG_MS)
        self.fetch = FollowerFetch(
            broker_id,
            config,
            lambda: self.broker_epoch,
            self._truncated,
            clock=lambda: clock.ms / 1000,
            quota=ReplicationQuota(FOLLOWER, broker_id, lambda: self.replicas.image, clock),
        )
        self.roles = BrokerPartitions(broker_id, incarnation)
        self.replicas = ReplicaManager(
            broker_id,
            self.logs,
            config,
            request_isr_change=lambda p, isr: self.isr_requests.append(isr),
            on_follow=self.fetch.add,
            on_stop_following=self.fetch.remove,
            high_watermarks=high_watermarks or {},
            clock_ms=clock,
        )

    def _truncated(self, partitions: list[Partition], then: Callable[[], None]) -> None:
        on_disk = (lambda: self.on_disk_later.append(then)) if self.slow_disk else then
        self.replicas.truncated(partitions, on_disk)

    def adopt(self, image: MetadataImage) -> None:
        self.replicas.apply(image, self.roles.update(image))

    @property
    def partition(self):  # noqa: ANN201
        return self.replicas.get(TOPIC_NAME, 0)

    def offsets(self) -> list[int]:
        return [r.offset for r in read_records(self.partition.log.read(0, 1 << 30).records)]

    def values(self) -> list[bytes]:
        """Every value from the log start: a read answers from one segment, so read on."""
        log, found = self.partition.log, []
        start = log.log_start_offset
        while start < log.log_end_offset:
            records = list(read_records(log.read(start, 1 << 30).records))
            found += [r.value for r in records]
            start = records[-1].offset + 1
        return found


class Cluster:
    def __init__(
        self,
        root: Path,
        min_isr: int = 1,
        partitions: int = 1,
        broker_config: BrokerConfig | None = None,
        **topic_configs: str,
    ) -> None:
        self.root = root
        self.partition_count = partitions
        self.clock = Clock()
        self.topic_configs = topic_configs
        self.broker_configs: dict[str, dict[str, str]] = {}  # broker id or "" -> its dynamic configs
        self.nodes = {b: Node(b, root, self.clock, config=broker_config) for b in (1, 2, 3)}
        self.incarnations = dict.fromkeys(self.nodes, INCARNATION)  # what the image registers
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
        image = self.image()
        for node in self.nodes.values():
            node.adopt(image)

    def image(self) -> MetadataImage:
        brokers = {
            b: BrokerRegistration(
                b,
                self.incarnations.get(b, INCARNATION),
                epoch,
                (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b),),
                "",
                b in self.fenced,
            )
            for b, epoch in self.epochs.items()
        }
        return MetadataImage(
            offset=10,
            brokers=frozen(brokers),
            topics_by_id=frozen(
                {
                    TOPIC_ID: TopicImage(
                        TOPIC_NAME, TOPIC_ID, frozen(dict.fromkeys(range(self.partition_count), self.state))
                    )
                }
            ),
            topic_ids_by_name=frozen({TOPIC_NAME: TOPIC_ID}),
            configs=frozen(
                {
                    (TOPIC, TOPIC_NAME): frozen(self.all_topic_configs()),
                    **{
                        (BROKER_RESOURCE, name): frozen(values)
                        for name, values in self.broker_configs.items()
                    },
                }
            ),
        )

    def restart_wiped(self, broker_id: int, incarnation: str) -> Node:
        """A new process for ``broker_id`` on an empty disk, given the current image."""
        node = self.nodes[broker_id] = Node(broker_id, self.root / incarnation, self.clock, incarnation)
        self.publish()
        return node

    def all_topic_configs(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_isr), **self.topic_configs}

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


T0_MS = 1_700_000_000_000  # the records' timestamp unless a test says otherwise


def batch(*values: bytes, timestamp_ms: int = T0_MS) -> bytes:
    builder = BatchBuilder()
    for value in values:
        assert builder.append(timestamp_ms, None, value)
    return bytes(builder.build())


def produce_request(
    values: list[bytes],
    acks: int = -1,
    timeout_ms: int = 10_000,
    timestamp_ms: int = T0_MS,
    partition: int = 0,
) -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
    request.topics.add(name=TOPIC_NAME).partitions.add(
        partition=partition, records=batch(*values, timestamp_ms=timestamp_ms)
    )
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


async def committed_everywhere(cluster: Cluster, values: list[bytes]) -> None:
    """Each value a batch of its own on leader 1, acknowledged once every follower has it,
    and every follower knows they are committed."""
    for value in values:
        pending = asyncio.create_task(cluster.nodes[1].replicas.produce(produce_request([value])))
        await asyncio.sleep(0)  # appended, waiting for the ISR
        await cluster.catch_up(2, 3, rounds=2)  # fetched, then acknowledged by the next fetch
        assert result_of(await pending).error == E.NONE
    await cluster.catch_up(2, 3, rounds=1)  # the followers learn the last high watermark
    for node in cluster.nodes.values():
        assert (node.values(), node.partition.high_watermark) == (values, len(values))


def test_a_restarted_broker_takes_no_role_until_this_incarnation_is_registered_and_unfenced(
    tmp_path: Path,
) -> None:
    """Broker 1, the leader, restarts on an empty disk while the image still registers its
    previous process and names it leader at epoch 0: it neither leads nor follows, refuses
    produce and fetch, and its followers keep every committed record."""

    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        committed = [b"a", b"b", b"c"]
        await committed_everywhere(cluster, committed)

        restarted = cluster.restart_wiped(1, "restarted")
        assert restarted.partition is None
        refused = result_of(await restarted.replicas.produce(produce_request([b"d"])))
        assert refused.error == E.NOT_LEADER_OR_FOLLOWER
        assert "not registered and unfenced" in refused.message
        for follower in (2, 3):
            answer = (await cluster.replicate(follower)).topics[0].partitions[0]
            assert answer.error == E.NOT_LEADER_OR_FOLLOWER and not answer.HasField("diverging_epoch")
            node = cluster.nodes[follower]
            assert (node.values(), node.partition.high_watermark) == (committed, 3)

        # Its registration: the controller moved the leadership away (epoch 1), fenced.
        cluster.incarnations[1] = "restarted"
        cluster.fenced.add(1)
        cluster.elect(2, (2, 3))
        assert restarted.partition is None, "registered but fenced: still nothing"
        cluster.fenced.discard(1)
        cluster.publish()
        assert (restarted.partition.leader_id, restarted.partition.leader_epoch) == (2, 1)
        await cluster.catch_up(1, 3)
        assert restarted.values() == committed

    run(body())


@pytest.mark.parametrize("lost", ["disk", "tail"])
def test_a_follower_refuses_to_truncate_committed_records_when_its_leader_lost_its_own_epoch(
    tmp_path: Path, lost: str
) -> None:
    """The leader comes back as the same registered process, on an empty disk or without
    its unflushed tail, so it leads epoch 0 again and tells its followers that their log
    diverges below their high watermark: they keep what is committed and stall until the
    leader epoch moves."""

    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        committed = [b"a", b"b", b"c"]
        await committed_everywhere(cluster, committed)

        if lost == "disk":
            leader = cluster.restart_wiped(1, INCARNATION)
        else:
            leader = cluster.nodes[1]
            leader.partition.log.truncate_to(1)
        kept = leader.partition.log.log_end_offset
        assert leader.partition.is_leader and kept < 3
        for follower in (2, 3):
            answer = (await cluster.replicate(follower)).topics[0].partitions[0]
            assert answer.diverging_epoch.end_offset == (-1 if lost == "disk" else kept), answer
            node = cluster.nodes[follower]
            assert (node.values(), node.partition.high_watermark) == (committed, 3)
            assert node.partition not in node.fetch.partitions, "stalled, not fetching again"

        cluster.elect(2, (2, 3))  # the controller moves the leadership: fetching resumes
        await cluster.catch_up(1, 3)
        assert leader.values() == cluster.nodes[3].values() == committed

    run(body())


def test_the_checkpointed_high_watermarks_stand_until_the_broker_serves(tmp_path: Path) -> None:
    """Checkpointing only the partitions served would write an empty checkpoint while the
    broker waits for its registration, forgetting every high watermark should it stop."""
    cluster = Cluster(tmp_path)
    found = {f"{TOPIC_NAME}-0": 3, "deleted-0": 5}
    node = Node(1, tmp_path / "restarted", cluster.clock, "restarted", high_watermarks=found)
    node.adopt(cluster.image())  # registers the previous process
    assert node.replicas.high_watermarks() == found
    cluster.incarnations[1] = "restarted"
    node.adopt(cluster.image())
    assert node.replicas.high_watermarks() == {f"{TOPIC_NAME}-0": 0}, "its log is empty; the stray is gone"


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


def test_timed_out_and_abandoned_acks_all_produces_leave_no_waiter_while_the_high_watermark_stands_still(
    tmp_path: Path,
) -> None:
    """Followers that never fetch (an ISR shrink the controller keeps refusing looks the
    same): producers retrying on timeouts, and one whose connection closed, must not pile
    up waiters (nor bytes) that only a moving high watermark would let go."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        replicas = cluster.nodes[1].replicas
        for _ in range(20):
            result = result_of(await replicas.produce(produce_request([b"x"], timeout_ms=0)))
            assert result.error == E.REQUEST_TIMED_OUT
        abandoned = asyncio.create_task(replicas.produce(produce_request([b"y"], timeout_ms=60_000)))
        await until(lambda: replicas._bytes_waiting > 0, "the produce to wait for the ISR")
        abandoned.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await abandoned
        await asyncio.sleep(0)  # one pass of the loop: the cancellations' callbacks
        assert cluster.nodes[1].partition.high_watermark == 0
        assert (len(replicas._acks), replicas._bytes_waiting) == (0, 0)

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


def test_a_new_leader_answers_offset_not_available_until_its_high_watermark_reaches_its_epoch_start(
    tmp_path: Path,
) -> None:
    """Kafka's rule: the latest offset, and a timestamp found at or past the high watermark,
    wait for the new leader's high watermark to reach its epoch's start; never a lower one."""

    def list_offset(node: Node, timestamp: int) -> pb.ListOffsetsPartitionResult:
        request = pb.ListOffsetsRequest()
        request.topics.add(name=TOPIC_NAME).partitions.add(partition=0, timestamp=timestamp)
        return node.replicas.list_offsets(request).topics[0].partitions[0]

    async def body() -> None:
        cluster = Cluster(tmp_path)
        n1, n2 = cluster.nodes[1], cluster.nodes[2]
        await n1.replicas.produce(produce_request([b"a", b"b", b"c"], acks=1))
        await cluster.catch_up(2, 3)
        later_ms = T0_MS + 60_000
        await n1.replicas.produce(produce_request([b"d", b"e"], acks=1, timestamp_ms=later_ms))
        await cluster.catch_up(2, 3, rounds=1)  # both hold all 5; the leader's HW is 3 still
        await cluster.catch_up(2, 3, rounds=1)  # the leader's HW reaches 5; 2 heard 3 last
        assert list_offset(n1, -1).offset == n1.partition.high_watermark == 5  # what clients saw
        assert n2.partition.high_watermark == 3

        cluster.elect(2, (2, 3))
        assert n2.partition.epoch_start_offset == 5
        for timestamp in (-1, later_ms):  # latest; a record found at or past the lagging HW
            lagging = list_offset(n2, timestamp)
            assert lagging.error == E.OFFSET_NOT_AVAILABLE, (timestamp, E.Name(lagging.error))
            assert "start offset 5" in lagging.message
        assert (list_offset(n2, -2).error, list_offset(n2, -2).offset) == (E.NONE, 0)  # earliest
        assert (list_offset(n2, T0_MS).error, list_offset(n2, T0_MS).offset) == (E.NONE, 0)  # below the HW

        await cluster.catch_up(3, rounds=1)  # 3 fetches from the new leader: its HW reaches 5
        assert (list_offset(n2, -1).error, list_offset(n2, -1).offset) == (E.NONE, 5)
        assert (list_offset(n2, later_ms).error, list_offset(n2, later_ms).offset) == (E.NONE, 3)

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


def fetch_from(offset: int, last_fetched_epoch: int | None = None) -> pb.FetchRequest:
    """A consumer's fetch at ``offset``, saying which epoch it last read when given."""
    request = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20, max_wait_ms=0)
    asked = request.topics.add(name=TOPIC_NAME).partitions.add(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    if last_fetched_epoch is not None:
        asked.last_fetched_epoch = last_fetched_epoch
    return request


def test_a_consumer_past_an_unclean_leaders_log_is_told_where_its_epoch_ends_not_served_on(
    tmp_path: Path,
) -> None:
    """KIP-320 over the data protocol. A consumer read c, d (offsets 2, 3, epoch 0, committed
    by the ISR 1, 2); broker 3, which never had them, is elected uncleanly and writes e, f, g.
    Fetching at 4 blind, the consumer would get g and never see e, f; saying it last read
    epoch 0, it is told epoch 0 ends at 2 on this leader and is given nothing."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        n1, n3 = cluster.nodes[1], cluster.nodes[3]
        await n1.replicas.produce(produce_request([b"a", b"b"], acks=1))
        await cluster.catch_up(2, 3)
        cluster.publish(isr=(1, 2), partition_epoch=cluster.state.partition_epoch + 1)
        await n1.replicas.produce(produce_request([b"c", b"d"], acks=1))
        await cluster.catch_up(2)
        assert n1.partition.high_watermark == 4
        cluster.elect(3, (3,))
        for value in (b"e", b"f", b"g"):
            await n3.replicas.produce(produce_request([value], acks=1))
        assert n3.partition.high_watermark == 5

        answers = {}
        for why, request in {
            "blind": fetch_from(4),
            "last read epoch 0": fetch_from(4, 0),
            "an epoch newer than the leader's": fetch_from(5, 2),
            "on the log": fetch_from(2, 0),
        }.items():
            result = (await n3.replicas.fetch(request)).topics[0].partitions[0]
            diverging = result.diverging_epoch if result.HasField("diverging_epoch") else None
            answers[why] = (
                E.Name(result.error),
                None if diverging is None else (diverging.epoch, diverging.end_offset),
                [r.value for r in read_records(result.records)],
            )
        assert answers == {
            "blind": ("NONE", None, [b"g"]),
            "last read epoch 0": ("NONE", (0, 2), []),
            "an epoch newer than the leader's": ("NONE", (1, 5), []),
            "on the log": ("NONE", None, [b"e", b"f", b"g"]),
        }

    run(body())


def test_a_parked_follower_fetch_that_wakes_late_does_not_take_the_followers_log_end_back(
    tmp_path: Path,
) -> None:
    """2's fetch at 2 parks; its client gives up on it and 2 fetches again, catching up to
    4. Woken later, the old fetch must not record 2 at 2 again: a follower's fetch counts
    once, when it arrives (Kafka's ``updateFollowerFetchState``), not on every wake-up."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader, n2 = cluster.nodes[1], cluster.nodes[2]
        await leader.replicas.produce(produce_request([b"a", b"b"], acks=1))
        await cluster.catch_up(2, 3)
        stale, _ = n2.fetch.request(n2.fetch.ready(float("inf")))
        stale.max_wait_ms = 60_000
        parked = asyncio.create_task(leader.replicas.fetch(stale))
        await asyncio.sleep(0)  # it runs until it parks: nothing past 2 yet
        assert not parked.done()
        await leader.replicas.produce(produce_request([b"c", b"d"], acks=1))  # wakes it, later
        await cluster.replicate(2)  # the newer fetches: at 2, then at 4
        await cluster.replicate(2)
        assert leader.partition.followers[2].log_end_offset == 4
        await asyncio.wait_for(parked, 10)
        assert leader.partition.followers[2].log_end_offset == 4

    run(body())


def test_retention_never_deletes_past_the_high_watermark_so_acks_all_is_answered_for_replicated_records(
    tmp_path: Path,
) -> None:
    """Kafka's deletableSegments: with retention.bytes 0 every inactive segment is due, but
    a segment goes only once the high watermark has passed its last record. Deleted before
    the followers fetched it, the followers would restart at the new log start and the
    high watermark would acknowledge records no follower holds."""

    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=3, **{"segment.bytes": "100", "retention.bytes": "0"})
        leader = cluster.nodes[1]
        produced = [b"v%d" % i for i in range(5)]
        pending = []
        for value in produced:  # each batch rolls a segment of its own
            pending.append(asyncio.create_task(leader.replicas.produce(produce_request([value]))))
            await asyncio.sleep(0)
        log = leader.partition.log
        assert len(log.segments) == len(produced)
        now_ms = 1_700_000_000_000
        leader.logs.apply_retention(now_ms, leader.replicas.high_watermarks())
        assert (log.log_start_offset, leader.partition.high_watermark) == (0, 0), "no follower has fetched"
        assert not any(task.done() for task in pending)

        # 2 holds everything; 3 has not fetched: the high watermark stays
        await cluster.catch_up(2, rounds=2 * len(produced))
        leader.logs.apply_retention(now_ms, leader.replicas.high_watermarks())
        assert log.log_start_offset == leader.partition.high_watermark == 0

        await cluster.catch_up(3, 2, rounds=2 * len(produced))  # a fetch answers from one segment
        assert [result_of(await task).error for task in pending] == [E.NONE] * len(produced)
        assert cluster.nodes[2].values() == cluster.nodes[3].values() == produced
        leader.logs.apply_retention(now_ms, leader.replicas.high_watermarks())
        assert 0 < log.log_start_offset <= leader.partition.high_watermark == len(produced)

    run(body())


def test_a_decompression_bomb_is_refused_with_nothing_written_and_the_leader_serves_on(
    tmp_path: Path,
) -> None:
    """4 MiB of zeros in a zstd batch of a few hundred bytes, against a bound of 1 MiB."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        leader.replicas.config = dataclasses.replace(
            leader.replicas.config, uncompressed_batch_bytes_max=1 << 20
        )
        builder = BatchBuilder(Compression.ZSTD)
        assert builder.append(1_700_000_000_000, None, bytes(4 << 20))
        bomb = pb.ProduceRequest(acks=1, timeout_ms=10_000)
        bomb.topics.add(name=TOPIC_NAME).partitions.add(partition=0, records=bytes(builder.build()))
        refused = result_of(await leader.replicas.produce(bomb))
        assert refused.error == E.INVALID_RECORD
        assert "broker.uncompressed_batch_bytes_max" in refused.message
        assert leader.partition.log.log_end_offset == 0
        assert result_of(await leader.replicas.produce(produce_request([b"a"], acks=1))).error == E.NONE
        assert leader.values() == [b"a"]

    run(body())


def test_a_follower_truncation_checkpoints_its_lowered_recovery_point(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        old_leader = cluster.nodes[1]
        await old_leader.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(2, 3)
        for value in (b"lost1", b"lost2"):
            await old_leader.replicas.produce(produce_request([value], acks=1))
        old_leader.partition.log.flush()
        old_leader.logs.checkpoint_recovery_points()
        assert recovery_points(old_leader) == {"t-0": 3}

        cluster.elect(2, (2, 3))
        await cluster.nodes[2].replicas.produce(produce_request([b"b"], acks=1))
        await cluster.catch_up(1)
        assert old_leader.values() == [b"a", b"b"]
        # What follows the cut is not flushed: a crash now must scan it, not trust it.
        assert recovery_points(old_leader) == {"t-0": 1}

    run(body())


def test_a_restarted_replica_takes_its_checkpointed_high_watermark_only_up_to_its_recovery_point(
    tmp_path: Path,
) -> None:
    """Seed 282 of the data-plane simulation found it: a follower's log below a high
    watermark it checkpointed is not known to be on disk past the recovery point (a power
    cut may have brought back a tail an unflushed truncation had cut), so a restart trusts
    the checkpoint only that far; the leader's fetch answers raise it again."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        await cluster.nodes[1].replicas.produce(produce_request([b"a", b"b", b"c"], acks=1))
        await cluster.catch_up(2, 3)
        follower = cluster.nodes[2]
        follower.logs.write_high_watermarks(follower.replicas.high_watermarks())
        follower.logs.checkpoint_recovery_points()
        assert follower.partition.high_watermark == 3 and follower.partition.log.recovery_point == 0

        restarted = Node(
            2, tmp_path, cluster.clock, "restarted", high_watermarks=follower.logs.read_high_watermarks()
        )
        cluster.incarnations[2] = "restarted"
        restarted.adopt(cluster.image())
        assert restarted.partition.log.log_end_offset == 3
        assert restarted.partition.high_watermark == 0

    run(body())


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def consumer_fetch(max_bytes: int) -> pb.FetchRequest:
    request = pb.FetchRequest(replica_id=-1, max_bytes=max_bytes, max_wait_ms=0)
    request.topics.add(name=TOPIC_NAME).partitions.add(
        partition=0, fetch_offset=0, partition_max_bytes=max_bytes
    )
    return request


def test_fetches_on_a_connection_that_never_reads_share_its_answer_bound_and_others_are_served(
    tmp_path: Path,
) -> None:
    """64 fetches of 1 MiB each, sent at once by a client that reads nothing (a tiny
    receive buffer, so the kernel takes little): their answers together stay within the
    connection's 2 MiB (and the one batch a fetch returns whole), where each used to pin
    its own 1 MiB; another connection's fetch gets its whole answer meanwhile."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        for i in range(12):
            await leader.replicas.produce(produce_request([bytes([i]) * (256 << 10)], acks=1))
        await cluster.catch_up(2, 3, rounds=8)
        assert leader.partition.high_watermark == 12
        batch_bytes = len(leader.partition.log.read(0, 1).records)  # the first batch comes whole
        bound = 2 << 20
        answered: list[int] = []

        async def fetch(request: pb.FetchRequest) -> pb.FetchResponse:
            response = await leader.replicas.fetch(request)
            answered.append(len(response.topics[0].partitions[0].records))
            return response

        server = FrameServer({frames.FETCH.key: fetch}, answer_bytes_max=bound)
        port = await server.start("127.0.0.1", 0)
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", port))
        _, writer = await asyncio.open_connection(sock=stuck)
        other = BrokerClient(f"127.0.0.1:{port}")
        try:
            await until(lambda: len(server.connections) == 1, "the stuck connection accepted")
            (connection,) = server.connections
            sent_by = connection._transport.get_extra_info("socket")
            sent_by.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # and no autotuning
            in_kernel = sent_by.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + stuck.getsockopt(
                socket.SOL_SOCKET, socket.SO_RCVBUF
            )
            requests = [frames.encode_request(frames.FETCH, i, consumer_fetch(1 << 20)) for i in range(64)]
            writer.write(b"".join(requests))
            await until(lambda: len(answered) == 64, "every fetch of the stuck connection answered")
            queued = connection.queued_answer_bytes()
            assert bound // 2 < queued <= bound + batch_bytes, f"{queued} bytes of answers queued"
            assert connection.answers.held == 0
            read = sum(answered)
            assert read <= bound + batch_bytes + in_kernel, f"{read} bytes of records read for answers"
            answer = await other.Fetch(consumer_fetch(1 << 20), timeout=10)
            assert len(answer.topics[0].partitions[0].records) > 3 * (256 << 10)
        finally:
            other.close()
            writer.close()
            await server.close()

    run(body())


def recovery_points(node: Node) -> dict[str, int]:
    return {name: offset for name, offset in checkpoint.read(node.logs.directory / RECOVERY_POINTS_FILE)}


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
