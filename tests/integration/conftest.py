"""Fixtures for the integration tests: clusters that are always torn down, and whose
nodes' logs are attached to the report of a test that failed."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

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
