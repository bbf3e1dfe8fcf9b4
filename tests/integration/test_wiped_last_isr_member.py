"""KIP-966 with real processes: the last ISR member, killed and back on a wiped disk, is
not elected; the follower that left the ISR while it was below min.insync.replicas (an
eligible leader replica) and stopped cleanly is, and no acknowledged record is lost.

RF 3, min.insync.replicas 2. Follower x stops (SIGTERM: a clean shutdown), records are
acknowledged by the leader and y; y stops (cleanly, and so enters the ELR: the ISR was at
its minimum); the leader is SIGKILLed, its partition folder deleted, and it restarts. Its
log directory is the one it registered (a crash, which alone would keep it eligible), but
the partition's folder was gone at its start: the heartbeat that unfences it says so, and
the controller takes it out of the ELR: the partition stays offline rather than be led
by an empty log. y returns and leads; every record
acknowledged is read back, and once x and the wiped leader rejoin, all three hold them.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import grpc
import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.producer import Producer
from raftka.client.types import NewTopic
from raftka.command import local
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import controller_pb2_grpc
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.test_fast_restart_wiped_leader import partition_dir, read_all, stored_values

pytestmark = pytest.mark.integration

TOPIC = "kept"  # the name the helpers shared with test_fast_restart_wiped_leader read
BATCH = 50
TIMEOUT_S = 30.0
E = pb.ErrorCode


def test_a_wiped_last_isr_member_is_not_elected_and_the_elr_member_keeps_every_record(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])[0].check()
        scenario(cluster)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster) -> None:
    full = wait_until(
        lambda: partition_if(cluster, lambda p: len(p.isr) == 3), timeout_s=TIMEOUT_S, what="full ISR"
    )
    leader = full.leader
    x, y = (b for b in full.replicas if b != leader)
    bootstrap = [n.data_address for n in cluster.nodes("broker")]
    sent = [b"record-%03d" % i for i in range(2 * BATCH)]

    produce(bootstrap, sent[:BATCH])
    stop(cluster, x)
    wait_until(lambda: partition_if(cluster, lambda p: x not in p.isr), timeout_s=TIMEOUT_S, what=f"{x} out")
    produce(bootstrap, sent[BATCH:])  # acknowledged by the leader and y only
    stop(cluster, y)
    alone = wait_until(
        lambda: partition_if(cluster, lambda p: list(p.isr) == [leader]),
        timeout_s=TIMEOUT_S,
        what="ISR [leader]",
    )
    assert list(alone.elr) == [y], alone

    old_epoch = registration(cluster, leader).epoch
    cluster.kill(leader)
    shutil.rmtree(partition_dir(cluster, leader))
    start(cluster, leader)
    wait_until(
        lambda: unfenced_again(cluster, leader, old_epoch), timeout_s=TIMEOUT_S, what=f"broker {leader} back"
    )
    offline = partition(cluster)
    assert offline is not None and offline.leader == -1, f"the wiped broker must not lead: {offline}"
    assert (list(offline.isr), list(offline.elr)) == ([], [y]), offline
    assert leader in offline.last_known_elr, offline

    start(cluster, y)
    wait_until(lambda: partition_if(cluster, lambda p: p.leader == y), timeout_s=TIMEOUT_S, what=f"{y} leads")
    assert read_all(bootstrap) == sent, "an acknowledged record was lost"
    start(cluster, x)
    wait_until(
        lambda: partition_if(cluster, lambda p: len(p.isr) == 3),
        timeout_s=TIMEOUT_S,
        what="every replica back in the ISR",
        detail=lambda: partition(cluster),
    )
    cluster.down()
    for broker in cluster.nodes("broker"):
        assert stored_values(cluster, broker.id) == sent, f"broker {broker.id} holds other records"


def produce(bootstrap: list[str], values: list[bytes]) -> None:
    producer = Producer(bootstrap, acks=-1)
    try:
        futures = [producer.send(TOPIC, value, partition=0) for value in values]
        producer.flush()
        for future in futures:
            future.result()  # raises unless acknowledged
    finally:
        producer.close()


def stop(cluster: MetadataCluster, node_id: int) -> None:
    """SIGTERM: a controlled shutdown, which ends with the clean-shutdown marker."""
    node = cluster.node(node_id)
    assert node.pid is not None
    os.kill(node.pid, signal.SIGTERM)
    wait_until(lambda: not local.is_alive(node), timeout_s=TIMEOUT_S, what=f"node {node_id} to stop")


def start(cluster: MetadataCluster, node_id: int) -> None:
    state = local.load(cluster.dir)
    local.start_node(state.node(node_id))
    local.save(state)


def controller_call(cluster: MetadataCluster, call: str, request: object) -> object | None:
    """The active controller's answer, or None while none answers."""
    for address in cluster.controller_addresses():
        with grpc.insecure_channel(address) as channel:
            try:
                response = getattr(controller_pb2_grpc.ControllerStub(channel), call)(request, timeout=2)
            except grpc.RpcError:
                continue
        if response.status.error == E.NONE:
            return response
    return None


def partition(cluster: MetadataCluster) -> pb.PartitionDescription | None:
    response = controller_call(cluster, "DescribeTopics", pb.DescribeTopicsRequest(names=[TOPIC]))
    return None if response is None else response.topics[0].partitions[0]  # type: ignore[attr-defined]


def partition_if(cluster: MetadataCluster, condition) -> pb.PartitionDescription | None:  # noqa: ANN001
    found = partition(cluster)
    return found if found is not None and condition(found) else None


def registration(cluster: MetadataCluster, broker_id: int) -> pb.BrokerDescription:
    response = wait_until(
        lambda: controller_call(cluster, "DescribeCluster", pb.DescribeClusterRequest()),
        timeout_s=TIMEOUT_S,
        what="an active controller",
    )
    return next(b for b in response.brokers if b.broker_id == broker_id)  # type: ignore[attr-defined]


def unfenced_again(cluster: MetadataCluster, broker_id: int, old_epoch: int) -> bool:
    """The restarted broker's new registration is unfenced (had it been eligible, its
    election would have been made in the batch that unfenced it)."""
    broker = registration(cluster, broker_id)
    return broker.epoch > old_epoch and not broker.fenced
