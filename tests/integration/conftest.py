"""Fixtures for the integration tests: clusters that are always torn down, and whose
nodes' logs are attached to the report of a test that failed.

They run on two pytest-xdist workers (``make test``: ``-n 2 --dist loadfile``): each
module's tests on one worker, so a module-scoped cluster is started once. Nothing else is
global: ports are picked free per cluster, directories are per test, and Kafka's own
ports (9092...) are held by each session, so no test cluster takes them and two clusters
created at once never both pick them. (``--dist loadgroup`` would do nothing here: with
pytest 9 xdist 3.8's group suffix never reaches the node ids.)"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftka.cli import cluster as cluster_cmd
from tests.integration.harness import Cluster
from tests.integration.proxy import LOOPBACK

LOG_TAIL_LINES = 60
_CLUSTERS = pytest.StashKey[list[Cluster]]()

MakeCluster = Callable[..., Cluster]


@pytest.fixture(scope="session", autouse=True)
def _loopback_available() -> None:
    try:
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
    except OSError as e:
        pytest.skip(
            f"cannot bind a loopback port for nodes and proxies ({e}): integration tests need {LOOPBACK}"
        )


@pytest.fixture(scope="session", autouse=True)
def _kafka_ports_held() -> Iterator[None]:
    """Bind (never listen on) Kafka's own ports for the session: ``cluster up`` gives
    brokers 9092... only when all are free, and two workers creating clusters at once would
    both see them free and one cluster's brokers fail to bind. Held, every test cluster's
    brokers take ports the kernel picks (those held by the other worker fail to bind here)."""
    with contextlib.ExitStack() as held:
        for port in range(
            cluster_cmd.KAFKA_FIRST_PORT, cluster_cmd.KAFKA_FIRST_PORT + cluster_cmd.MAX_BROKERS
        ):
            sock = held.enter_context(socket.socket())
            with contextlib.suppress(OSError):  # held by the other worker, or by someone else
                sock.bind((LOOPBACK, port))
        yield


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeCluster]:
    """``make_cluster(**options)``: a new ``Cluster`` (not started), killed after the test."""
    clusters: list[Cluster] = []
    request.node.stash[_CLUSTERS] = clusters
    with contextlib.ExitStack() as cleanup:  # closes every cluster even if closing one fails

        def make(**options: Any) -> Cluster:
            cluster = Cluster(tmp_path / f"cluster-{len(clusters) + 1}", **options)
            clusters.append(cluster)
            cleanup.callback(cluster.close)
            return cluster

        yield make


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, add each node's log tail to the report, while the nodes still exist."""
    report: pytest.TestReport = yield
    if report.failed:
        for cluster in item.stash.get(_CLUSTERS, []):
            for node_id, tail in cluster.log_tails(LOG_TAIL_LINES).items():
                report.sections.append((f"node {node_id} log, last {LOG_TAIL_LINES} lines", tail))
    return report
