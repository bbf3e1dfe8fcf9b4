"""A broker at its open files limit (a live ``raftka cluster up`` cluster, one broker's limit
lowered with prlimit): with 1,024 descriptors, a 400-partition topic at RF 3 used to take
them all (three per partition), after which the broker could write no checkpoint, accept
no connection, and logged every failed accept with its traceback. Here the limit sits 200
above what the broker holds and the topic has 150 partitions: the replicas that fit are
served, the rest are offline on this broker alone (counted and answered
``KAFKA_STORAGE_ERROR``), the descriptors never run out, checkpoints keep being written,
and the node answers a new client, its health check and its scrapes."""

from __future__ import annotations

import asyncio
import os
import resource
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from raftka.command import local
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.test_metrics import scrape

pytestmark = pytest.mark.integration
PARTITIONS = 150
HEADROOM = 200  # descriptors above what the broker holds before the topic


async def data_metadata(address: str) -> int:
    """The brokers a new client of the data listener learns of."""
    client = BrokerClient(address)
    try:
        return len((await client.Metadata(broker_pb2.MetadataRequest(), timeout=5)).brokers)
    finally:
        client.close()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_broker_at_its_descriptor_limit_takes_the_replicas_that_fit_and_keeps_serving(
    tmp_path: Path,
) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))  # the nodes inherit it...
        try:
            cluster.up()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for node in cluster.nodes():  # ...and raise it to the hard limit as they start
            assert node.pid is not None
            assert resource.prlimit(node.pid, resource.RLIMIT_NOFILE) == (hard, hard), node.id
            assert '"event": "open files limit"' in cluster.log_text(node.id)
        broker = cluster.nodes("broker")[0]
        assert broker.pid is not None
        limit = open_fds(broker.pid) + HEADROOM
        resource.prlimit(broker.pid, resource.RLIMIT_NOFILE, (limit, limit))
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
            admin.create_topics([NewTopic("wide", PARTITIONS, 3)])[0].check()
        highest = 0

        def settled() -> dict[Any, float] | None:
            nonlocal highest
            highest = max(highest, open_fds(broker.pid))
            values = scrape(broker.metrics_address)
            offline = values["kafka_server_replicamanager_offlinereplicacount"]
            held = values["kafka_server_replicamanager_partitioncount"]
            return values if offline > 0 and offline + held == PARTITIONS else None

        values = wait_until(
            settled,
            timeout_s=60,
            what="every replica of the topic served or offline",
            detail=cluster.log_tails,
        )
        assert values["process_max_fds"] == limit
        assert values["process_open_fds"] < limit and highest < limit
        assert values["kafka_server_replicamanager_partitioncount"] > 0
        with grpc.insecure_channel(broker.address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        assert asyncio.run(data_metadata(broker.data_address)) == 3  # a new client: every broker listed
        text = cluster.log_text(broker.id)
        assert "file descriptors are free" in text  # why the rest are offline
        assert "Too many open files" not in text  # no checkpoint, accept or segment failed for want of one
        assert local.is_alive(cluster.node(broker.id))
    finally:
        cluster.close()
