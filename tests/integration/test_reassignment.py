"""Partition reassignment (KIP-455) on real processes: ``raftka cluster up`` with 3
controllers and 4 brokers (101-104).

- A partition (RF 3, min.insync.replicas 2) moves off its leader onto broker 104, started
  late as a new broker would be, under an acks=all load, through ``raftka topics reassign
  --execute`` and ``--verify``; then ``raftka brokers drain`` empties another broker.
  Afterwards every acknowledged record is read back, once; the brokers that left hold no
  log of the partition; the replicas agree on disk.
- A reassignment onto a broker that stops (SIGSTOP) before it caught up stays in progress
  through a SIGKILL of the active controller (its state is in the partition records);
  another partition's is cancelled meanwhile and goes back to its replicas; the broker,
  killed and restarted, catches up and the reassignment completes, leadership with it,
  every record written before it still there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from raftka.client import Consumer, Producer
from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic, PartitionInfo, RecordMetadata, TopicPartition
from raftka.metadata.reassign_plan import to_json
from tests.integration.metadata_cluster import Controllers, MetadataCluster, partition_folders
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
SESSION_TIMEOUT_MS = 2_000
HEARTBEAT_MS = 300
NEW_BROKER = 104
MOVE_TIMEOUT_S = 90.0
SEND_INTERVAL_S = 0.002  # the load's pace: ~500 records/s at most


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(
            brokers=4,
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS},
        )
        yield cluster
    finally:
        cluster.close()


def admin_of(cluster: MetadataCluster) -> Admin:
    return Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30))


def bootstrap(cluster: MetadataCluster) -> list[str]:
    return [b.data_address for b in cluster.nodes("broker")]


def partition(admin: Admin, topic: str, index: int = 0) -> PartitionInfo:
    [described] = admin.describe_topics([topic])
    return described.partitions[index]


def fenced(admin: Admin, broker_id: int) -> bool:
    return next(b.fenced for b in admin.describe_cluster().brokers if b.broker_id == broker_id)


class Load:
    """An acks=all idempotent producer numbering its records, in a thread, until stopped."""

    def __init__(self, servers: list[str], topic: str) -> None:
        self._producer = Producer(servers, acks="all", linger_ms=2)
        self._topic = topic
        self._sent: list[tuple[int, Future[RecordMetadata]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            self._sent.append((number, self._producer.send(self._topic, b"%d" % number, partition=0)))
            number += 1
            self._stop.wait(SEND_INTERVAL_S)

    def acknowledged_so_far(self) -> int:
        return sum(1 for _, f in list(self._sent) if f.done() and f.exception() is None)

    def stop(self) -> set[int]:
        """The numbers of the acknowledged records."""
        self._stop.set()
        self._thread.join()
        self._producer.flush()
        self._producer.close()
        return {n for n, f in self._sent if f.exception() is None}


def read_all(servers: list[str], topic: str) -> list[int]:
    """Every record of partition 0, in order."""
    consumer = Consumer(servers, auto_offset_reset="earliest", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        values: list[int] = []

        def caught_up() -> bool:
            values.extend(int(r.value) for r in consumer.poll(500))  # type: ignore[arg-type]
            return consumer.position(tp) >= end

        wait_until(caught_up, timeout_s=60, what=f"reading {topic} to offset {end}")
        return values
    finally:
        consumer.close()


def test_a_partition_moves_onto_a_new_broker_under_load_then_a_broker_is_drained(
    cluster: MetadataCluster, tmp_path: Path
) -> None:
    cluster.kill(NEW_BROKER)  # it joins later, as a broker added to the cluster
    with admin_of(cluster) as admin:
        wait_until(lambda: fenced(admin, NEW_BROKER), timeout_s=30, what="broker 104 fenced")
        admin.create_topics([NewTopic("moving", 1, 3, {"min.insync.replicas": "2"})])[0].check()
        before = wait_until(
            lambda: (p := partition(admin, "moving")).leader >= 0 and p, timeout_s=30, what="a leader"
        )
        assert NEW_BROKER not in before.replicas
        load = Load(bootstrap(cluster), "moving")
        wait_until(lambda: load.acknowledged_so_far() >= 200, timeout_s=60, what="the load to get going")
        cluster.up()  # starts broker 104
        wait_until(lambda: not fenced(admin, NEW_BROKER), timeout_s=60, what="broker 104 unfenced")

        target = (NEW_BROKER, *(b for b in before.replicas if b != before.leader))
        plan = tmp_path / "plan.json"
        plan.write_text(to_json({("moving", 0): target}))
        started = cluster.raftka(
            "topics", "reassign", "--execute", "--reassignment-json-file", str(plan), timeout_s=60
        )
        assert "Successfully started partition reassignments for moving-0" in started
        wait_until(
            lambda: not admin.list_partition_reassignments(),
            timeout_s=MOVE_TIMEOUT_S,
            what="the reassignment to complete",
            detail=lambda: (partition(admin, "moving"), cluster.log_tails(10)),
        )
        verified = cluster.raftka(
            "topics", "reassign", "--verify", "--reassignment-json-file", str(plan), timeout_s=60
        )
        assert "Reassignment of partition moving-0 is completed." in verified
        moved = partition(admin, "moving")
        assert moved.replicas == target and set(moved.isr) == set(target)
        assert moved.leader == NEW_BROKER  # the old leader left: the first target replica leads
        acknowledged_at_move = load.acknowledged_so_far()
        wait_until(
            lambda: load.acknowledged_so_far() >= acknowledged_at_move + 200,
            timeout_s=60,
            what="records acknowledged after the move",
        )

        drained = target[1]
        report = json.loads(
            cluster.raftka(
                "brokers", "drain", str(drained), "--output", "json", timeout_s=MOVE_TIMEOUT_S + 30
            )
        )
        assert report == {"broker": drained, "moved": ["moving-0"], "completed": True}
        after_drain = partition(admin, "moving")
        assert drained not in after_drain.replicas and len(after_drain.replicas) == 3
        acknowledged = load.stop()

    values = read_all(bootstrap(cluster), "moving")
    assert len(values) == len(set(values)), "no record twice"
    assert acknowledged <= set(values), f"lost: {sorted(acknowledged - set(values))[:10]}"
    gone = {
        b.id: partition_folders(b, "moving")
        for b in cluster.nodes("broker")
        if b.id not in after_drain.replicas
    }
    wait_until(
        lambda: not any(partition_folders(cluster.node(b), "moving") for b in gone),
        timeout_s=30,
        what=f"the logs removed from {sorted(gone)}",
    )
    cluster.down()
    compared, divergent = cluster.compare_replicas("moving", after_drain.replicas)
    assert compared == 1 and divergent == {}, (
        f"replicas disagree on disk: {divergent}\n{cluster.replica_events()}"
    )


def test_a_reassignment_survives_the_controller_and_its_new_broker_dying(cluster: MetadataCluster) -> None:
    cluster.kill(NEW_BROKER)  # so the topic is placed on the others
    with admin_of(cluster) as admin:
        wait_until(lambda: fenced(admin, NEW_BROKER), timeout_s=30, what="broker 104 fenced")
        admin.create_topics([NewTopic("interrupted", 2, 2, {})])[0].check()
        for index in (0, 1):
            wait_until(
                lambda i=index: partition(admin, "interrupted", i).leader >= 0, timeout_s=30, what="leaders"
            )
        producer = Producer(bootstrap(cluster), acks="all")
        written = [producer.send("interrupted", b"%d" % n, partition=p) for p in (0, 1) for n in range(300)]
        producer.flush()
        producer.close()
        assert all(f.exception() is None for f in written)
        cluster.up()
        wait_until(lambda: not fenced(admin, NEW_BROKER), timeout_s=60, what="broker 104 unfenced")
        first, second = partition(admin, "interrupted", 0), partition(admin, "interrupted", 1)
        targets = {
            ("interrupted", p.partition): (
                NEW_BROKER,
                *(b for b in p.replicas if b not in (p.leader, NEW_BROKER)),
            )[:2]
            for p in (first, second)
        }
        os.kill(cluster.node(NEW_BROKER).pid, signal.SIGSTOP)  # unfenced for a session yet: accepted
        for result in admin.alter_partition_reassignments(targets):
            result.check()
        assert {(r.topic, r.partition) for r in admin.list_partition_reassignments()} == set(targets)

        async def active() -> str:
            controllers = Controllers(cluster.controller_addresses())
            try:
                return await controllers.active(timeout_s=30)
            finally:
                await controllers.close()

        killed = next(n.id for n in cluster.nodes("controller") if n.address == asyncio.run(active()))
        cluster.kill(killed)
        assert asyncio.run(active()) != cluster.node(killed).address
        ongoing = {(r.topic, r.partition): r for r in admin.list_partition_reassignments()}
        assert set(ongoing) == set(targets) and all(r.adding == (NEW_BROKER,) for r in ongoing.values())

        [cancelled] = admin.alter_partition_reassignments({("interrupted", 1): None})
        cancelled.check()
        reverted = partition(admin, "interrupted", 1)
        assert set(reverted.replicas) == set(second.replicas) and reverted.adding == reverted.removing == ()

        os.kill(cluster.node(NEW_BROKER).pid, signal.SIGKILL)
        wait_until(lambda: fenced(admin, NEW_BROKER), timeout_s=30, what="broker 104 fenced")
        cluster.up()  # the controller and broker 104 come back
        wait_until(
            lambda: not admin.list_partition_reassignments(),
            timeout_s=MOVE_TIMEOUT_S,
            what="the reassignment to complete once broker 104 caught up",
            detail=lambda: (partition(admin, "interrupted", 0), cluster.log_tails(10)),
        )
        done = partition(admin, "interrupted", 0)
        assert done.replicas == targets[("interrupted", 0)] and done.leader == NEW_BROKER
    assert sorted(read_all(bootstrap(cluster), "interrupted")) == list(range(300))
