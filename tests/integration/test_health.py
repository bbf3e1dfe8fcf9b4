"""Health and reflection on real controller and broker processes (``raftka server``).

A controller alone cannot be in a quorum, and a broker without a controller cannot
register: both answer NOT_SERVING (``raftka health`` exits 1 and says so). Once the
other controllers start, both turn SERVING (exit 0). On SIGTERM each says NOT_SERVING
to a watcher before it goes. Reflection lists every service of each node.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from raftka.cli import cluster
from raftka.command import local
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

WAIT_S = 30.0
CALL_TIMEOUT_S = 5.0
Status = health_pb2.HealthCheckResponse


@pytest.fixture
def stopped_cluster(tmp_path: Path) -> Iterator[local.LocalCluster]:
    """A formatted cluster of 3 controllers and 1 broker, never started; the nodes a
    test starts are killed after it."""
    path = tmp_path / "local"
    cluster.create(path, 3, brokers=1)
    nodes = local.load(path)
    try:
        yield nodes
    finally:
        for node in nodes.nodes:
            if local.is_alive(node) and node.pid is not None:
                subprocess.run(["kill", "-9", str(node.pid)], check=False)


def health(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raftka.cli.main", "health", address, "--timeout", str(CALL_TIMEOUT_S)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def status(address: str) -> int | None:
    """The node's overall status, or None while it does not answer yet."""
    with grpc.insecure_channel(address) as channel:
        try:
            return (
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1).status
            )
        except grpc.RpcError:
            return None


def test_nodes_serve_once_in_the_quorum_and_stop_serving_when_told_to_stop(
    stopped_cluster: local.LocalCluster,
) -> None:
    controller, broker = stopped_cluster.node(1), stopped_cluster.node(101)
    processes = {node.id: local.start_node(node) for node in (controller, broker)}
    for node in (controller, broker):
        wait_until(
            lambda n=node: status(n.address) is not None, timeout_s=WAIT_S, what=f"node {node.id} to answer"
        )
        answer = health(node.address)
        assert answer.returncode == 1, answer
        assert answer.stdout.strip() == f"{node.address}: NOT_SERVING", answer

    with grpc.insecure_channel(controller.address) as channel:
        assert set(ProtoReflectionDescriptorDatabase(channel).get_services()) == {
            "raftka.v1.Raft",
            "raftka.v1.Controller",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }
    with grpc.insecure_channel(broker.address) as channel:
        assert "raftka.broker.v1.Broker" in ProtoReflectionDescriptorDatabase(channel).get_services()

    for other in (2, 3):
        processes[other] = local.start_node(stopped_cluster.node(other))
    for node in (controller, broker):
        wait_until(
            lambda n=node: status(n.address) == Status.SERVING,
            timeout_s=WAIT_S,
            what=f"node {node.id} to serve",
        )
        answer = health(node.address)
        assert answer.returncode == 0 and answer.stdout.strip() == f"{node.address}: SERVING", answer

    for node in (broker, controller):  # the broker first: its controlled shutdown needs a controller
        with grpc.insecure_channel(node.address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
            assert next(watch).status == Status.SERVING
            processes[node.id].send_signal(signal.SIGTERM)
            assert next(watch).status == Status.NOT_SERVING, f"node {node.id} said nothing before it went"
        assert processes[node.id].wait(WAIT_S) == 0
