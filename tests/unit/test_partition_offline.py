"""An error applying one partition's metadata takes that partition offline on this broker
and spares the rest: the broker applies the other partitions' changes, serves them, and a
restart that replays the same metadata does not fail on it either. Real partition logs
on disk; the failures are real file system errors."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric
from structlog.testing import capture_logs

from raftka.broker.log import manager as log_manager
from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import LogManager
from raftka.broker.metrics import BrokerCollector
from raftka.broker.offline_report import OfflineReport
from raftka.broker.partitions import BrokerPartitions
from raftka.broker.replica import manager as replica_manager
from raftka.broker.replica.manager import ReplicaManager
from raftka.metadata.image import TOPIC, BrokerRegistration, MetadataImage, PartitionState, TopicImage, frozen
from raftka.metadata.validation import OFFLINE_REPLICAS_MAX
from raftka.node import descriptors
from raftka.node.config import BrokerConfig
from raftka.records.codec import BatchBuilder
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
BROKER = 1
INCARNATION = "incarnation-1"  # registered and unfenced in every image: the broker serves
LONG_TOPIC = "l" * 236  # its old ``-delete`` name was longer than 255 bytes


class Broker:
    """One broker's replica manager over real logs, fed images by the test."""

    def __init__(self, root: Path) -> None:
        self.logs = LogManager(root)
        self.logs.open_all()
        self.roles = BrokerPartitions(BROKER, INCARNATION)
        self.offline_changes = 0  # what the lifecycle hears: a heartbeat goes out at once
        self.replicas = ReplicaManager(
            BROKER,
            self.logs,
            BrokerConfig(),
            request_isr_change=lambda p, isr: None,
            on_follow=lambda p: None,
            on_stop_following=lambda p: None,
            high_watermarks={},
            on_offline_changed=self._offline_changed,
        )
        self.report = OfflineReport(
            lambda: [(o.topic_id, p) for (_, p), o in self.replicas.offline().items()]
        )

    def _offline_changed(self) -> None:
        self.offline_changes += 1

    def adopt(self, image: MetadataImage) -> None:
        self.replicas.apply(image, self.roles.update(image))

    async def produce(self, topic: str, value: bytes) -> pb.ProducePartitionResult:
        return await self.produce_to(topic, 0, value)

    async def produce_to(self, topic: str, partition: int, value: bytes) -> pb.ProducePartitionResult:
        builder = BatchBuilder()
        assert builder.append(1_700_000_000_000, None, value)
        request = pb.ProduceRequest(acks=1, timeout_ms=1_000)
        request.topics.add(name=topic).partitions.add(partition=partition, records=bytes(builder.build()))
        return (await self.replicas.produce(request)).topics[0].partitions[0]

    def gauge(self, name: str) -> float:
        families: list[Metric] = list(BrokerCollector(self.replicas, Counts(), NoFetchers()).collect())  # type: ignore[arg-type]
        return next(s.value for f in families for s in f.samples if s.name == name)


class Counts:
    shrinks = expands = 0


class NoFetchers:
    quota = None

    def failed(self) -> dict:
        return {}


def image(offset: int, leader_epochs: dict[str, int]) -> MetadataImage:
    """Topics of one partition each, led by this broker at the given leader epochs."""
    ids = {name: uuid.uuid5(uuid.NAMESPACE_OID, name).bytes for name in leader_epochs}
    topics = {
        ids[name]: TopicImage(
            name,
            ids[name],
            frozen({0: PartitionState((BROKER,), (BROKER,), BROKER, epoch, epoch)}),
        )
        for name, epoch in leader_epochs.items()
    }
    return MetadataImage(
        offset=offset,
        brokers=frozen({BROKER: BrokerRegistration(BROKER, INCARNATION, 1, (), "", False)}),
        topics_by_id=frozen(topics),
        topic_ids_by_name=frozen(ids),
    )


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the one listing them


def run(coro: Any) -> None:
    asyncio.run(coro)


def test_a_partition_whose_log_cannot_be_created_goes_offline_and_the_others_serve(tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "bad-0").write_bytes(b"")  # a file where its folder must go: mkdir fails
        broker = Broker(tmp_path)
        with capture_logs() as logged:
            broker.adopt(image(1, {"good": 0, "bad": 0}))
            broker.adopt(image(2, {"good": 0, "bad": 1}))  # tried again, failing alike: not logged again
        [offline] = [e for e in logged if e["log_level"] == "error"]
        assert (offline["topic"], offline["partition"], offline["change"]) == ("bad", 0, "lead")
        assert "FileExistsError" in offline["error"]

        assert (await broker.produce("good", b"a")).error == E.NONE
        refused = await broker.produce("bad", b"a")
        assert refused.error == E.KAFKA_STORAGE_ERROR and "bad-0 is offline on broker 1" in refused.message
        assert set(broker.replicas.offline()) == {("bad", 0)}
        assert broker.gauge("kafka_server_replicamanager_offlinereplicacount") == 1
        assert broker.gauge("kafka_server_replicamanager_partitioncount") == 1

        (tmp_path / "bad-0").unlink()  # the operator fixed the disk; the next change tries again
        broker.adopt(image(3, {"good": 0, "bad": 2}))
        assert (await broker.produce("bad", b"b")).error == E.NONE
        assert broker.replicas.offline() == {}
        assert broker.gauge("kafka_server_replicamanager_offlinereplicacount") == 0
        broker.logs.close()

    run(body())


def test_the_heartbeat_reports_an_offline_partition_until_it_comes_back(tmp_path: Path) -> None:
    """The lifecycle hears of each change (once, not per failing retry) and the report,
    read for every heartbeat, names the partition by topic id until a retry succeeds."""
    (tmp_path / "bad-0").write_bytes(b"")  # a file where its folder must go: mkdir fails
    broker = Broker(tmp_path)
    first = image(1, {"good": 0, "bad": 0})
    broker.adopt(first)
    assert broker.offline_changes == 1
    bad = controller_pb2.OfflineTopicReplicas(topic_id=first.topic_ids_by_name["bad"], partitions=[0])
    assert broker.report() == [bad]
    broker.adopt(image(2, {"good": 0, "bad": 1}))  # the controller moved it; the retry fails alike
    assert broker.offline_changes == 1 and broker.report() == [bad]
    (tmp_path / "bad-0").unlink()
    broker.adopt(image(3, {"good": 0, "bad": 2}))
    assert broker.offline_changes == 2 and broker.report() == []
    broker.logs.close()


def test_a_leaders_log_that_fails_a_write_goes_offline_alone_and_is_reported(tmp_path: Path) -> None:
    """Its folder removed under it, the leader's next segment roll fails for real: that
    produce is answered KAFKA_STORAGE_ERROR (clients retry, at the leader the controller
    elects next), the partition goes offline here and the heartbeat reports it; the other
    partitions serve on, and a retry on its next change opens it again."""

    async def body() -> None:
        broker = Broker(tmp_path)
        rolling = dataclasses.replace(
            image(1, {"good": 0, "bad": 0}),
            configs=frozen({(TOPIC, "bad"): frozen({"segment.bytes": "1024"})}),
        )
        broker.adopt(rolling)
        assert (await broker.produce("bad", b"a")).error == E.NONE
        shutil.rmtree(tmp_path / "bad-0")
        with capture_logs() as logged:
            failed = await broker.produce("bad", bytes(2000))  # over segment.bytes: a roll
        assert failed.error == E.KAFKA_STORAGE_ERROR and "FileNotFoundError" in failed.message
        assert set(broker.replicas.offline()) == {("bad", 0)}
        [offline] = [e for e in logged if e["log_level"] == "error"]
        assert offline["change"] == "append"
        assert broker.offline_changes == 1
        bad_id = rolling.topic_ids_by_name["bad"]
        assert broker.report() == [controller_pb2.OfflineTopicReplicas(topic_id=bad_id, partitions=[0])]
        refused = await broker.produce("bad", b"b")
        assert refused.error == E.KAFKA_STORAGE_ERROR and "its log failed (append)" in refused.message
        assert (await broker.produce("good", b"a")).error == E.NONE

        broker.adopt(dataclasses.replace(image(2, {"good": 0, "bad": 1}), configs=rolling.configs))
        assert broker.replicas.offline() == {} and broker.report() == []
        assert (await broker.produce("bad", b"c")).error == E.NONE
        broker.logs.close()

    run(body())


def test_a_report_lists_at_most_the_bound_the_same_ones_every_time() -> None:
    offline = [(bytes([i % 3]) * 16, i) for i in range(OFFLINE_REPLICAS_MAX + 5)]
    report = OfflineReport(lambda: reversed(offline))
    with capture_logs() as logged:
        first, second = report(), report()
    assert first == second
    assert sum(len(t.partitions) for t in first) == OFFLINE_REPLICAS_MAX
    assert [t.topic_id for t in first] == [bytes([i]) * 16 for i in range(3)], "one entry per topic, in order"
    assert [e["event"] for e in logged if e["log_level"] == "warning"] == [
        "more partitions offline than a heartbeat may report; the rest stay unreported"
    ], "rate-limited"


def test_a_deletion_that_fails_spares_the_rest_and_a_restart_replaying_it_does_not_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old ``-delete`` name (too long for this topic) makes the rename fail for real."""
    created, deleted = image(1, {"good": 0, LONG_TOPIC: 0}), image(2, {"good": 0})

    async def body() -> None:
        monkeypatch.setattr(log_manager, "delete_folder", lambda name: f"{name}.{uuid.uuid4().hex}-delete")
        broker = Broker(tmp_path)
        broker.adopt(created)
        assert (await broker.produce(LONG_TOPIC, b"x")).error == E.NONE
        broker.adopt(deleted)  # the rename fails: ENAMETOOLONG
        assert (await broker.produce("good", b"a")).error == E.NONE
        gone = await broker.produce(LONG_TOPIC, b"y")
        assert gone.error == E.UNKNOWN_TOPIC_OR_PARTITION, "the topic is deleted; its leftover is no answer"
        assert set(broker.replicas.offline()) == {(LONG_TOPIC, 0)}
        broker.logs.close()

        replaying = Broker(tmp_path)  # a restart replays the committed create and delete
        replaying.adopt(created)
        replaying.adopt(deleted)
        assert (await replaying.produce("good", b"b")).error == E.NONE
        replaying.logs.close()

        monkeypatch.undo()
        fixed = Broker(tmp_path)
        fixed.adopt(created)
        fixed.adopt(deleted)
        assert (await fixed.produce("good", b"c")).error == E.NONE
        assert fixed.replicas.get("good", 0).log.log_end_offset == 3, "good kept every record"
        assert fixed.replicas.offline() == {}
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("l")], "the leftover is gone"
        fixed.logs.close()

    run(body())


def test_replicas_beyond_the_descriptor_limit_go_offline_and_the_broker_keeps_its_reserve(
    tmp_path: Path,
) -> None:
    """A 400-partition topic took more descriptors than a default limit of 1,024 holds: the
    broker then could not write a checkpoint nor accept a connection. Here the limit sits
    200 above what the process holds: the replicas that fit are served, the rest go offline
    on this broker alone, and the reserve stays free."""
    partitions = 300
    topic_id = uuid.uuid5(uuid.NAMESPACE_OID, "wide").bytes
    state = PartitionState((BROKER,), (BROKER,), BROKER, 0, 0)
    wide = MetadataImage(
        offset=1,
        brokers=frozen({BROKER: BrokerRegistration(BROKER, INCARNATION, 1, (), "", False)}),
        topics_by_id=frozen(
            {topic_id: TopicImage("wide", topic_id, frozen(dict.fromkeys(range(partitions), state)))}
        ),
        topic_ids_by_name=frozen({"wide": topic_id}),
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    async def body() -> None:
        broker = Broker(tmp_path)
        limit = open_fds() + 200
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        try:
            with capture_logs():
                broker.adopt(wide)
            free = limit - open_fds()
            broker.logs.write_high_watermarks(broker.replicas.high_watermarks())  # room for the checkpoint
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        offline = broker.replicas.offline()
        assert 0 < len(offline) < partitions
        assert all("file descriptors are free" in o.error for o in offline.values())
        assert free >= descriptors.reserve(limit)
        assert broker.gauge("kafka_server_replicamanager_offlinereplicacount") == len(offline)
        assert broker.gauge("kafka_server_replicamanager_partitioncount") == partitions - len(offline)
        served = next(p for p in range(partitions) if ("wide", p) not in offline)
        refused = next(p for p in range(partitions) if ("wide", p) in offline)
        assert (await broker.produce_to("wide", served, b"a")).error == E.NONE
        assert (await broker.produce_to("wide", refused, b"a")).error == E.KAFKA_STORAGE_ERROR
        broker.logs.close()

    run(body())


def test_logs_found_at_start_beyond_the_descriptor_limit_stay_closed_and_go_offline(tmp_path: Path) -> None:
    """A restart opened every log it found, however many descriptors that took."""
    partitions = 300
    topic_id = uuid.uuid5(uuid.NAMESPACE_OID, "wide").bytes
    first = LogManager(tmp_path)
    first.open_all()
    for p in range(partitions):
        first.get_or_create("wide", p, topic_id, LogConfig())
    first.close()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = open_fds() + 200
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        with capture_logs() as logged:
            again = LogManager(tmp_path)
            again.open_all()
        free = limit - open_fds()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    opened = len(again.names())
    assert 0 < opened < partitions
    assert free >= descriptors.reserve(limit)
    [closed] = [e for e in logged if e["log_level"] == "error"]  # one line, not one per log
    assert closed["count"] == partitions - opened
    again.close()


def test_replicas_offline_for_want_of_descriptors_come_back_by_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of connections took a broker to its descriptor limit, and the replicas of a
    topic created meanwhile stayed offline after it ended, until a restart. Once
    descriptors are free again, they open on the next retry, with no new metadata."""
    monkeypatch.setattr(replica_manager, "DESCRIPTORS_RETRY_MIN_S", 0.05)
    partitions = 300
    topic_id = uuid.uuid5(uuid.NAMESPACE_OID, "wide").bytes
    state = PartitionState((BROKER,), (BROKER,), BROKER, 0, 0)
    wide = MetadataImage(
        offset=1,
        brokers=frozen({BROKER: BrokerRegistration(BROKER, INCARNATION, 1, (), "", False)}),
        topics_by_id=frozen(
            {topic_id: TopicImage("wide", topic_id, frozen(dict.fromkeys(range(partitions), state)))}
        ),
        topic_ids_by_name=frozen({"wide": topic_id}),
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    async def body() -> None:
        broker = Broker(tmp_path)
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 200, hard))
        try:
            with capture_logs():
                broker.adopt(wide)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))  # the flood is over
        refused = next(p for p in range(partitions) if ("wide", p) in broker.replicas.offline())
        for _ in range(200):
            if not broker.replicas.offline():
                break
            await asyncio.sleep(0.05)
        assert not broker.replicas.offline()
        assert broker.gauge("kafka_server_replicamanager_partitioncount") == partitions
        assert (await broker.produce_to("wide", refused, b"a")).error == E.NONE
        broker.replicas.close()
        broker.logs.close()

    run(body())
