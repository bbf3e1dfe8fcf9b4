"""Two xdist workers create clusters at once: neither may give its brokers Kafka's own
ports (9092...), which ``cluster up`` takes whenever they are free, or both would and one
cluster's brokers could not listen (``conftest._kafka_ports_held``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.cli import cluster
from raftka.command import local

pytestmark = pytest.mark.integration
KAFKAS_OWN = range(cluster.KAFKA_FIRST_PORT, cluster.KAFKA_FIRST_PORT + cluster.MAX_BROKERS)


def test_a_test_cluster_never_takes_kafkas_own_ports(tmp_path: Path) -> None:
    cluster.create(tmp_path / "cluster", 1, brokers=cluster.MAX_BROKERS)
    ports = [int(b.kafka_address.rpartition(":")[2]) for b in local.load(tmp_path / "cluster").brokers()]
    assert len(ports) == cluster.MAX_BROKERS and not set(ports) & set(KAFKAS_OWN), ports
