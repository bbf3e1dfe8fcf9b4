"""A live broker's listener bounds come from its config and show in its metrics: one
address's (127.0.0.2's) sockets beyond ``broker.max_connections_per_ip`` are closed at once, the rest
once idle for ``broker.connections_max_idle_ms``, on the Kafka listener as on the data
listener, and a new client is answered throughout."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
PER_IP = 8
HELD = 20


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def closings(address: str) -> dict[tuple[str, str], float]:
    """(listener, reason) -> connections closed, from the broker's metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.labels["listener"], sample.labels["reason"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "raftka_listener_connections_closed"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def brokers_listed(address: str) -> int:
    client = BrokerClient(address)
    try:
        return len((await client.Metadata(broker_pb2.MetadataRequest(), timeout=5)).brokers)
    finally:
        client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    """One cluster for both listeners: each test reads only its own listener's counters."""
    cluster = MetadataCluster(tmp_path_factory.mktemp("listener-bounds") / "cluster")
    try:
        cluster.up_configured(
            broker__broker={"max_connections_per_ip": PER_IP, "connections_max_idle_ms": 1_000}
        )
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("listener", ["kafka", "data"])
def test_a_brokers_listeners_close_what_one_address_holds_beyond_its_bounds(
    cluster: MetadataCluster, listener: str
) -> None:
    held: list[socket.socket] = []
    try:
        broker = cluster.nodes("broker")[0]
        host, _, port = (broker.kafka_address if listener == "kafka" else broker.data_address).rpartition(":")
        for _ in range(HELD):
            sock = socket.create_connection((host, int(port)), timeout=5, source_address=("127.0.0.2", 0))
            sock.setblocking(False)
            held.append(sock)

        def closed(reason: str) -> float:
            return closings(broker.metrics_address)[(listener, reason)]

        wait_until(
            lambda: sum(map(closed_by_server, held)) == HELD,
            timeout_s=15,
            what="every held socket closed: the surplus at once, the rest once idle",
        )
        assert asyncio.run(brokers_listed(broker.data_address)) == 3
        assert closed("connections_per_ip_max") == HELD - PER_IP
        assert closed("idle") >= PER_IP
    finally:
        for sock in held:
            sock.close()
