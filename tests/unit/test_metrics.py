"""The Prometheus metrics: the collectors on in-process objects, the accumulators at the
points of work, the HTTP endpoint and its bounds, and docs/metrics.md's list of names, which must
be exactly what the nodes export."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from pytest import MonkeyPatch

from raftka.broker.log.cleaner.manager import CleanerMetrics
from raftka.broker.log.cleaner.metrics import CleanerCollector
from raftka.broker.metrics import BrokerCollector, BrokerTopicMetrics
from raftka.broker.quota.manager import ClientQuotas
from raftka.broker.quota.metrics import QuotaCollector
from raftka.broker.replica.isr import IsrChanges
from raftka.broker.replica.throttle import FOLLOWER, LEADER, ReplicationQuota
from raftka.client.consumer import AsyncConsumer
from raftka.client.producer import AsyncProducer
from raftka.metadata.image import BrokerRegistration, MetadataImage, PartitionState, TopicImage, frozen
from raftka.metadata.metrics import ControllerCollector, EventQueueProbe, image_counts
from raftka.node import metrics_endpoint
from raftka.node.config import AuthorizerConfig, MetricsConfig, NodeConfig
from raftka.node.descriptors import DESCRIPTORS
from raftka.node.metrics_endpoint import (
    CONNECTIONS_MAX,
    REQUEST_HEAD_MAX_BYTES,
    MetricsEndpoint,
    serve_metrics,
)
from raftka.raft.messages import BeginQuorumEpochRequest, Envelope
from raftka.raft.metrics import Histogram, RaftCollector, RaftMetrics, gauge
from raftka.raft.roles import Role
from raftka.records.batch import count_records
from raftka.records.codec import BatchBuilder
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.guard_metrics import ListenerCollector
from tests.unit.broker_in_process import broker_in_process
from tests.unit.metadata_controller_support import create, live_brokers, three
from tests.unit.test_raft_driver import leading, new_node
from tests.unit.test_raft_roles import _follower_of_2_in_epoch_5_now_prospective
from tests.unit.test_wire import until
from tests.unit.tls_support import make_certs
from tests.unit.transport_fakes import run

METRICS_PAGE = Path(__file__).parents[2] / "docs" / "metrics.md"


# accumulators -----------------------------------------------------------------------


def test_a_histogram_is_cumulative_with_an_inf_bucket_and_a_sum() -> None:
    histogram = Histogram((1, 10))
    for value in (0.5, 1, 3, 50):
        histogram.observe(value)
    assert histogram.buckets() == [("1.0", 2), ("10.0", 3), ("+Inf", 4)]
    assert histogram.total == 54.5


def test_the_core_times_an_election_from_its_first_campaign_until_a_leader_is_known() -> None:
    core, now = _follower_of_2_in_epoch_5_now_prospective()  # campaigning since `now`
    assert (core.election_started_ms, core.elections_ended) == (now, 0)
    claim = BeginQuorumEpochRequest(cluster_id="c", epoch=6, leader_id=3)
    core.step(Envelope(src=3, dst=1, msg=claim), now + 7)
    assert (core.role, core.leader_id) == (Role.FOLLOWER, 3)
    assert (core.elections_ended, core.last_election_ms, core.election_started_ms) == (1, 7, -1)


def test_each_election_the_core_ends_is_observed_once() -> None:
    metrics = RaftMetrics()
    metrics.elections_seen(0, 0)  # none yet
    metrics.elections_seen(1, 30)
    metrics.elections_seen(1, 30)  # the same election, seen again after another change
    metrics.elections_seen(2, 5)
    assert (sum(metrics.election_latency.counts), metrics.election_latency.total) == (2, 35)


def test_a_single_voter_counts_its_election_appends_and_commits() -> None:
    async def scenario() -> None:
        node = await leading(new_node())
        try:
            before = node.metrics.append_records
            await node.append([b"a", b"b", b"c"])
            metrics = node.metrics
            assert sum(metrics.election_latency.counts) == node.core.elections_ended >= 1
            assert metrics.append_records >= before + 3
            assert sum(metrics.commit_latency.counts) >= 1
            assert metrics.fetch_records == 0
            values = samples(RaftCollector(node).collect())
            assert values["kafka_server_raft_metrics_current_leader"] == 1
            assert values[("kafka_server_raft_metrics_current_state", "leader")] == 1
            assert values["kafka_server_raft_metrics_log_end_offset"] == node.core.log_end_offset
            assert values["kafka_server_raft_metrics_high_watermark"] == node.core.high_watermark
            assert values["kafka_server_raft_metrics_append_records_total"] == metrics.append_records
        finally:
            await node.shutdown()

    run(scenario)


# the controller's counts --------------------------------------------------------------


def test_image_counts_offline_imbalanced_and_fenced() -> None:
    brokers = {
        1: BrokerRegistration(1, "a", 1, (), "", False),
        2: BrokerRegistration(2, "b", 2, (), "", True),
    }
    partitions = {
        0: PartitionState(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=0, partition_epoch=0),
        1: PartitionState(
            replicas=(2, 1), isr=(1,), leader=1, leader_epoch=1, partition_epoch=1
        ),  # imbalanced
        2: PartitionState(
            replicas=(2,), isr=(2,), leader=2, leader_epoch=0, partition_epoch=0
        ),  # fenced leader
        3: PartitionState(replicas=(3,), isr=(), leader=-1, leader_epoch=1, partition_epoch=1),  # no leader
    }
    topic_id = uuid.uuid4().bytes
    image = MetadataImage(
        brokers=frozen(brokers),
        topics_by_id=frozen({topic_id: TopicImage("t", topic_id, frozen(partitions))}),
        topic_ids_by_name=frozen({"t": topic_id}),
    )
    counts = image_counts(image)
    assert (counts.offline_partitions, counts.preferred_replica_imbalance) == (2, 2)
    assert (counts.fenced_brokers, counts.active_brokers, counts.topics, counts.partitions) == (1, 1, 1, 4)


def test_the_controller_collector_reads_the_committed_image_and_activity() -> None:
    state_machine = SimpleNamespace(
        image=MetadataImage(brokers=frozen({1: BrokerRegistration(1, "a", 1, (), "", True)}))
    )
    controller = SimpleNamespace(is_active=False)
    collector = ControllerCollector(controller, state_machine, EventQueueProbe())  # type: ignore[arg-type]
    values = samples(collector.collect())
    assert values["kafka_controller_kafkacontroller_activecontrollercount"] == 0
    assert values["kafka_controller_kafkacontroller_fencedbrokercount"] == 1
    controller.is_active = True
    state_machine.image = MetadataImage()
    values = samples(collector.collect())
    assert values["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert values["kafka_controller_kafkacontroller_fencedbrokercount"] == 0


def test_three_controllers_in_process_one_active_every_one_counting_its_image() -> None:
    async def scenario() -> None:
        quorum, _ = await three()
        try:
            members = list(quorum.members.values())
            collectors = [
                (RaftCollector(m.node), ControllerCollector(m.controller, m.state_machine, EventQueueProbe()))
                for m in members
            ]
            active = next(m for m in members if m.controller.is_active)
            await live_brokers(active.controller)
            await create(active.controller, "t", partitions=3, rf=3)
            await quorum.converged()
            scrapes = [samples([*raft.collect(), *controller.collect()]) for raft, controller in collectors]
        finally:
            await quorum.close()
        assert sum(v["kafka_controller_kafkacontroller_activecontrollercount"] for v in scrapes) == 1
        assert len({v["kafka_server_raft_metrics_current_leader"] for v in scrapes}) == 1
        assert sum(v["kafka_server_raft_metrics_election_latency_ms_count"] for v in scrapes) >= 1
        for values in scrapes:  # every controller counts from its own committed image
            assert values["kafka_controller_kafkacontroller_globalpartitioncount"] == 3
            assert values["kafka_controller_kafkacontroller_activebrokercount"] == 3
            assert values["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
        leader = next(v for v in scrapes if v[("kafka_server_raft_metrics_current_state", "leader")] == 1)
        assert leader["kafka_server_raft_metrics_commit_latency_ms_count"] > 0
        followers = [v for v in scrapes if v is not leader]
        assert all(v["kafka_server_raft_metrics_fetch_records_total"] > 0 for v in followers)

    run(scenario)


def test_the_event_queue_probe_measures_how_late_the_loop_runs_it() -> None:
    async def scenario() -> None:
        probe = EventQueueProbe(interval_s=0.01)
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(0)  # the probe starts: due in 10 ms
        blocked_until = asyncio.get_running_loop().time() + 0.1
        while asyncio.get_running_loop().time() < blocked_until:  # the loop is busy: the probe is late
            pass
        while sum(probe.wait.counts) == 0:
            await asyncio.sleep(0.001)
        task.cancel()
        assert probe.wait.total >= 50  # at least ~90 ms late, with room for a coarse clock

    run(scenario)


# the broker ---------------------------------------------------------------------------


def test_a_consumer_fetch_counts_the_bytes_and_records_it_carries() -> None:
    builder = BatchBuilder()
    for i in range(7):
        builder.append(0, None, b"v%d" % i)
    batch = bytes(builder.build())
    response = broker_pb2.FetchResponse()
    response.topics.add(name="t").partitions.add(partition=0, records=batch + batch)
    response.topics.add(name="u").partitions.add(partition=0)  # nothing read
    metrics = BrokerTopicMetrics()
    metrics.sent(response)
    assert (metrics.bytes_out, metrics.messages_out) == (2 * len(batch), 14)


def test_counting_records_stops_at_a_short_tail_and_always_moves_on() -> None:
    builder = BatchBuilder()
    builder.append(0, None, b"v")
    batch = bytes(builder.build())
    assert count_records(b"") == 0
    assert count_records(batch + batch[:20]) == 1  # a tail shorter than a header is not a batch
    zero_length = bytearray(batch)
    zero_length[8:12] = bytes(4)  # a batchLength of 0 would never move on
    assert count_records(bytes(zero_length) * 3) >= 1  # returns (pytest's timeout catches a hang)


def test_under_replicated_counts_only_partitions_led_here_with_a_short_isr() -> None:
    """A partition being moved counts against the replicas the move keeps, as in Kafka."""
    moving = PartitionState((3, 1, 2), (1, 2), 1, 0, 1, adding_replicas=(3,), removing_replicas=(2,))
    topic = TopicImage("t", b"t", frozen({3: moving}))
    partitions = [
        SimpleNamespace(is_leader=True, isr=(1,), replicas=(1, 2), topic_id=b"t", partition=0),
        SimpleNamespace(is_leader=True, isr=(1, 2), replicas=(1, 2), topic_id=b"t", partition=1),
        SimpleNamespace(is_leader=False, isr=(2,), replicas=(1, 2), topic_id=b"t", partition=2),
        SimpleNamespace(is_leader=True, isr=(1, 2), replicas=(3, 1, 2), topic_id=b"t", partition=3),
    ]
    leader_quota = ReplicationQuota(LEADER, 1, MetadataImage, lambda: 0)
    follower_quota = ReplicationQuota(FOLLOWER, 1, MetadataImage, lambda: 0)
    leader_quota.record(700)
    follower_quota.record(300)
    replicas = SimpleNamespace(
        partitions=lambda: partitions,
        offline=lambda: {},
        metrics=BrokerTopicMetrics(),
        image=MetadataImage(topics_by_id=frozen({b"t": topic})),
        leader_quota=leader_quota,
    )
    isr_changes = SimpleNamespace(shrinks=2, expands=1)
    fetchers = SimpleNamespace(
        failed=lambda: {"t-3": "OSError(5, 'Input/output error')"}, quota=follower_quota
    )
    values = samples(BrokerCollector(replicas, isr_changes, fetchers).collect())  # type: ignore[arg-type]
    assert values["kafka_server_leaderreplication_byterate_total"] == 700
    assert values["kafka_server_followerreplication_byterate_total"] == 300
    assert values["kafka_server_replicamanager_underreplicatedpartitions"] == 1
    assert values["kafka_server_replicamanager_reassigningpartitions"] == 1
    assert values["kafka_server_replicamanager_leadercount"] == 3
    assert values["kafka_server_replicamanager_partitioncount"] == 4
    assert values["kafka_server_replicafetchermanager_failedpartitionscount"] == 1
    assert values["kafka_server_replicamanager_isrshrinkspersec_total"] == 2
    assert values["kafka_server_replicamanager_isrexpandspersec_total"] == 1


class AcceptingController:
    """Accepts every ISR change; before answering, the metadata log brings the change to
    the partition already (the race the count must not depend on)."""

    async def call(self, method: str, request: Any) -> Any:
        response = controller_pb2.AlterPartitionResponse()
        for topic in request.topics:
            for asked in topic.partitions:
                PARTITION.isr = tuple(asked.new_isr)
                PARTITION.partition_epoch = asked.partition_epoch + 1
                response.partitions.add(
                    topic_id=topic.topic_id,
                    partition=asked.partition,
                    isr=asked.new_isr,
                    partition_epoch=asked.partition_epoch + 1,
                )
        return response


class FakePartition:
    """What IsrChanges reads of a leader's partition (hashable, as partitions are)."""

    topic_id, partition, leader_epoch, partition_epoch, is_leader = b"t" * 16, 0, 1, 1, True
    isr: tuple[int, ...] = (1, 2, 3)
    pending_isr: tuple[int, ...] | None = None

    def isr_change_committed(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        self.pending_isr = None

    def broker_epochs(self, isr: tuple[int, ...], own_epoch: int) -> list[int]:
        return [own_epoch] * len(isr)


PARTITION = FakePartition()


def test_isr_changes_are_counted_once_the_controller_accepts_them() -> None:
    async def scenario() -> None:
        settled: asyncio.Queue[Any] = asyncio.Queue()
        changes = IsrChanges(AcceptingController(), 1, lambda: 1, settled.put_nowait)  # type: ignore[arg-type]
        task = asyncio.create_task(changes.run())
        try:
            for isr in ((1, 2), (1,), (1, 3)):
                PARTITION.pending_isr = isr
                changes.request(PARTITION, isr)  # type: ignore[arg-type]
                await settled.get()
        finally:
            task.cancel()
        assert (changes.shrinks, changes.expands) == (2, 1)

    run(scenario)


def test_a_real_broker_counts_what_producers_send_and_consumers_read(tmp_path: Path) -> None:
    """Through the data protocol, as clients use it; scraped over HTTP."""

    async def scenario() -> None:
        async with broker_in_process(tmp_path, {"t": 3}) as broker:
            isr_changes = SimpleNamespace(shrinks=0, expands=0)
            fetchers = SimpleNamespace(failed=dict, quota=None)
            endpoint = MetricsEndpoint([BrokerCollector(broker.replicas, isr_changes, fetchers)])  # type: ignore[arg-type]
            await endpoint.start("127.0.0.1", 0)
            try:
                before = await scrape(endpoint.port)
                assert before["kafka_server_brokertopicmetrics_messagesinpersec_total"] == 0
                producer = AsyncProducer(broker.address)
                try:
                    for i in range(50):
                        await producer.send("t", b"value-%d" % i)
                    await producer.flush()
                finally:
                    await producer.close()
                consumer = AsyncConsumer(broker.address, auto_offset_reset="earliest", fetch_max_wait_ms=50)
                try:
                    await consumer.assign_topic("t")
                    got: list[Any] = []
                    while len(got) < 50:
                        got += await consumer.poll(2000, 1000)
                finally:
                    await consumer.close()
                after = await scrape(endpoint.port)
            finally:
                await endpoint.close()
        assert after["kafka_server_brokertopicmetrics_messagesinpersec_total"] == 50
        assert after["kafka_server_brokertopicmetrics_bytesinpersec_total"] > 50 * len(b"value-0")
        assert after["kafka_server_brokertopicmetrics_messagesoutpersec_total"] == 50
        assert after["kafka_server_brokertopicmetrics_bytesoutpersec_total"] > 0
        assert after[("kafka_network_requestmetrics_totaltimems_count", "Produce")] >= 1
        assert after[("kafka_network_requestmetrics_totaltimems_count", "FetchConsumer")] >= 1
        assert after["kafka_server_replicamanager_leadercount"] == 3

    run(scenario)


# the endpoint -------------------------------------------------------------------------


class Constant:
    def __init__(self, name: str, value: float) -> None:
        self.name, self.value = name, value

    def collect(self) -> Any:
        yield gauge(self.name, "a test value", self.value)


def test_two_endpoints_in_one_process_export_their_own_values() -> None:
    async def scenario() -> None:
        first, second = MetricsEndpoint([Constant("x", 1)]), MetricsEndpoint([Constant("x", 2)])
        await first.start("127.0.0.1", 0)
        await second.start("127.0.0.1", 0)
        try:
            assert (await scrape(first.port))["x"] == 1
            assert (await scrape(second.port))["x"] == 2
        finally:
            await first.close()
            await second.close()

    run(scenario)


def test_the_endpoint_answers_only_get_metrics_and_bounds_what_it_reads() -> None:
    async def scenario() -> None:
        endpoint = MetricsEndpoint([Constant("x", 1)])
        await endpoint.start("127.0.0.1", 0)
        try:
            assert (await http(endpoint.port, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
            assert (await http(endpoint.port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
            head = await http(endpoint.port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")
            huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * REQUEST_HEAD_MAX_BYTES + b"\r\n\r\n"
            assert await http(endpoint.port, huge) == b""  # closed unanswered
        finally:
            await endpoint.close()

    run(scenario)


def test_idle_sockets_cannot_starve_the_endpoint() -> None:
    """16 idle sockets took every place for 10 s each: 0 of 30 scrapes were answered. A
    new connection takes the place of the oldest one still waiting for its request."""

    async def scenario() -> None:
        endpoint = MetricsEndpoint([Constant("x", 1)])
        await endpoint.start("127.0.0.1", 0)
        idle = []
        try:
            for _ in range(4 * CONNECTIONS_MAX):
                idle.append(await asyncio.open_connection("127.0.0.1", endpoint.port))
            answered = [(await scrape(endpoint.port))["x"] for _ in range(30)]
            assert answered == [1] * 30
            assert endpoint.evicted >= 3 * CONNECTIONS_MAX
        finally:
            for _, writer in idle:
                writer.close()
            await endpoint.close()

    run(scenario)


ALICE = "User:CN=alice,OU=client,O=raftka"


@pytest.mark.parametrize("allowed", [(), (ALICE,)])
def test_a_node_with_tls_serves_its_metrics_only_to_super_users_and_allowed_principals(
    tmp_path: Path, allowed: tuple[str, ...]
) -> None:
    """Over HTTPS to certificates of its CA, and of those only to the super users and
    ``metrics.allowed_principals``: the metrics name every client's principal."""
    certs = make_certs(tmp_path / "certs")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = NodeConfig(
        node_id=101,
        data_dir=tmp_path,
        voters=(),
        listener="127.0.0.1:1",
        metrics=MetricsConfig(port=port, allowed_principals=allowed),
        tls=certs.broker,
        authorizer=AuthorizerConfig(super_users=("User:CN=admin,OU=client,O=raftka",)),
    )

    async def scenario() -> None:
        endpoint = await serve_metrics(config, [Constant("x", 1)])
        assert endpoint is not None
        try:
            assert (await scrape(port, certs.admin.client_ssl))["x"] == 1
            alice = await http(port, b"GET /metrics HTTP/1.1\r\n\r\n", certs.alice.client_ssl)
            assert alice.startswith(b"HTTP/1.1 200" if allowed else b"HTTP/1.1 403"), alice[:40]
            assert await http(port, b"GET /metrics HTTP/1.1\r\n\r\n") == b""  # plaintext: nothing
            for refused in (certs.no_client_cert(), certs.foreign.client_ssl):
                try:  # refused in the handshake, or (TLS 1.3) just after it
                    answer = await http(port, b"GET /metrics HTTP/1.1\r\n\r\n", refused)
                except ssl.SSLError:
                    answer = b""
                assert answer == b""
        finally:
            await endpoint.close()

    run(scenario)


class Flaky(Constant):
    fail = False

    def collect(self) -> Any:
        if self.fail:
            raise RuntimeError("a collector's bug")
        yield from super().collect()


def test_a_collector_that_fails_costs_the_scrape_not_the_endpoint() -> None:
    async def scenario() -> None:
        flaky = Flaky("x", 1)
        endpoint = MetricsEndpoint([flaky])
        await endpoint.start("127.0.0.1", 0)
        try:
            flaky.fail = True
            assert (await http(endpoint.port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 500")
            flaky.fail = False
            assert (await scrape(endpoint.port))["x"] == 1
        finally:
            await endpoint.close()

    run(scenario)


# docs/metrics.md -------------------------------------------------------------------------------


def test_the_metrics_page_lists_exactly_the_metrics_the_nodes_export() -> None:
    section = METRICS_PAGE.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE))
    node = SimpleNamespace(
        core=SimpleNamespace(leader_id=1, epoch=1, role_name="leader", high_watermark=0, log_end_offset=0),
        metrics=RaftMetrics(),
    )
    controller = ControllerCollector(
        SimpleNamespace(is_active=True),
        SimpleNamespace(image=MetadataImage()),
        EventQueueProbe(),  # type: ignore[arg-type]
    )
    broker = BrokerCollector(
        SimpleNamespace(
            partitions=list,
            offline=dict,
            metrics=BrokerTopicMetrics(),
            image=MetadataImage(),
            leader_quota=ReplicationQuota(LEADER, 1, MetadataImage),
        ),  # type: ignore[arg-type]
        SimpleNamespace(shrinks=0, expands=0),  # type: ignore[arg-type]
        SimpleNamespace(failed=dict, quota=ReplicationQuota(FOLLOWER, 1, MetadataImage)),  # type: ignore[arg-type]
    )
    exported = {
        family.name + ("_total" if family.type == "counter" else "")
        for collector in (
            RaftCollector(node),
            controller,
            broker,
            QuotaCollector(ClientQuotas(dict)),
            ListenerCollector(list),
            CleanerCollector(SimpleNamespace(metrics=CleanerMetrics())),
            DESCRIPTORS,
        )  # type: ignore[arg-type]
        for family in collector.collect()
    }
    assert documented == exported


# helpers ------------------------------------------------------------------------------


def samples(families: Any) -> dict[Any, float]:
    """Sample name -> value; (name, first label value) for labelled samples."""
    out: dict[Any, float] = {}
    for family in families:
        assert isinstance(family, Metric)
        for sample in family.samples:
            labels = [v for k, v in sample.labels.items() if k != "le"]
            if "le" in sample.labels:
                continue
            out[(sample.name, labels[0]) if labels else sample.name] = sample.value
    return out


async def http(port: int, request: bytes, tls: ssl.SSLContext | None = None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()
    except ConnectionError:
        return b""
    finally:
        writer.close()


async def scrape(port: int, tls: ssl.SSLContext | None = None) -> dict[Any, float]:
    answer = await http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", tls)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return samples(text_string_to_metric_families(body.decode()))


def test_sockets_that_never_handshake_hold_no_more_than_the_endpoints_places(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    """A flood of sockets sending no certificate took a broker's descriptors to its limit:
    each was handshaken (for up to 10 s) before the endpoint's 16-connection bound saw it.
    Judged as accepted, the endpoint holds at most its 16, a scrape with a certificate
    still gets its answer, and every descriptor is given back when the flood ends."""
    certs = make_certs(tmp_path / "certs")
    flood = 8 * CONNECTIONS_MAX
    monkeypatch.setattr(metrics_endpoint, "IO_TIMEOUT_S", 120.0)  # no socket ends by timing out

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def scenario() -> None:
        endpoint = MetricsEndpoint([Constant("x", 1)])
        await endpoint.start("127.0.0.1", 0, certs.broker.server_ssl)
        before = fds()
        sockets = []
        try:
            for _ in range(flood):
                sockets.append(await asyncio.open_connection("127.0.0.1", endpoint.port))

            def shut_by_server() -> int:
                return sum(reader.at_eof() or reader.exception() is not None for reader, _ in sockets)

            await until(lambda: shut_by_server() >= flood - CONNECTIONS_MAX, "the flood judged")
            held = fds() - before - flood  # the server's side of the flood
            assert held <= CONNECTIONS_MAX, f"{held} descriptors held by the endpoint"
            assert (await scrape(endpoint.port, certs.admin.client_ssl))["x"] == 1
        finally:
            for _, writer in sockets:
                writer.close()
        await until(lambda: fds() <= before, "every descriptor given back")
        await endpoint.close()

    run(scenario)
