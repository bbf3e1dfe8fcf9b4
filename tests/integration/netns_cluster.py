"""A local cluster (3 controllers, 3 brokers) whose nodes each run in their own network
namespace, on their own address (``raftka.tools.chaos.netns``), for the network fault tests.

Made by the test itself and removed after it, on failure too: the nodes are killed and
every namespace deleted, and with them every veth, the bridge and every iptables rule.
The test and the commands it runs (``cluster up``, ``chaos``) reach the nodes through
the layout's leg in the test's namespace. It needs root, ``ip`` and ``iptables``, which
``tests.tools`` installs before any test; without them the tests say what is missing and
skip, and fail under CI=true.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raftka.cli import cluster as cluster_cmd
from raftka.command import local
from raftka.tools.chaos import netns
from tests import tools
from tests.integration.metadata_cluster import RAFTKA, MetadataCluster
from tests.integration.polling import wait_until
from tests.missing_tool import missing

CONTROLLERS = (1, 2, 3)
BROKERS = (cluster_cmd.FIRST_BROKER_ID, cluster_cmd.FIRST_BROKER_ID + 1, cluster_cmd.FIRST_BROKER_ID + 2)


class NetnsCluster(MetadataCluster):
    def __init__(self, cluster_dir: Path, network: netns.Network) -> None:
        super().__init__(cluster_dir)
        self.network = network

    def run(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        """``raftka ARGS --dir DIR``, from the test's leg on the switch."""
        return subprocess.run(
            [*RAFTKA, *args, "--dir", str(self.dir)], capture_output=True, text=True, timeout=timeout_s
        )


def require_network_tools() -> None:
    """Root, and ``ip`` and ``iptables`` (``tests.tools`` installs them before the tests)."""
    if os.geteuid() != 0:
        missing("network namespaces need root")
    tools.require("iproute2", "iptables")


@contextlib.contextmanager
def netns_cluster(cluster_dir: Path, **settings: dict[str, Any]) -> Iterator[NetnsCluster]:
    """Up and healthy; ``settings`` as ``MetadataCluster.up_configured`` takes them."""
    require_network_tools()
    network = netns.Network(f"rk{uuid.uuid4().hex[:6]}")
    network.create([*CONTROLLERS, *BROKERS])
    cluster = NetnsCluster(cluster_dir, network)
    try:
        cluster_cmd.create(
            cluster_dir, len(CONTROLLERS), brokers=len(BROKERS), hosts=network.hosts, netns=network.namespaces
        )
        for target, values in settings.items():
            role, _, section = target.partition("__")
            cluster.configure(role, section, **values)
        cluster.up()
        yield cluster
    finally:
        try:
            cluster.close()
            for node in cluster.nodes() if local.exists(cluster_dir) else []:
                wait_until(lambda n=node: not local.is_alive(n), timeout_s=10, what=f"node {node.id} to exit")
        finally:
            network.destroy()
