"""Network namespaces for a local cluster: each node on its own address behind one switch,
so faults can cut traffic between real processes (Linux, root, ``ip`` and ``iptables``).

``Network(name).create(node_ids)`` makes a switch namespace ``NAME-sw`` holding bridge
``br0``, and per node a namespace ``NAME-nID`` whose ``eth0`` (one end of a veth pair, the
other a bridge port) has ``10.200.0.(10+i)/24``; the clients get ``NAME-client`` at
``10.200.0.2``. Nothing is added to the caller's namespace: layouts made in parallel do
not meet, and ``destroy`` (deleting the namespaces) removes every veth, the bridge and
every rule with them. Faults act inside one node's namespace, with ``iptables``, both
ways: DROP (a partition) or DROP at random (loss); ``heal`` flushes them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from raftka.cli.errors import CliError

SUBNET = "10.200.0"
PREFIX_LENGTH = 24
CLIENT_HOST = f"{SUBNET}.2"
FIRST_NODE_HOST = 10
INTERFACE = "eth0"  # a node's (and the clients') side of its veth pair
BRIDGE = "br0"
TOOLS = {"ip": "iproute2", "iptables": "iptables"}


def missing_tools() -> list[str]:
    """The Debian packages to install for what is not on PATH."""
    return sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise CliError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def in_namespace(namespace: str, *argv: str) -> None:
    run("ip", "netns", "exec", namespace, *argv)


@dataclass
class Network:
    """One layout; ``name`` prefixes its namespaces (15 characters at most in all)."""

    name: str
    hosts: dict[int, str] = field(default_factory=dict)  # node id -> its address
    namespaces: dict[int, str] = field(default_factory=dict)  # node id -> its namespace

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    @property
    def client(self) -> str:
        return f"{self.name}-client"

    def create(self, node_ids: Sequence[int]) -> None:
        """The switch, the clients' namespace and one namespace per node; on failure,
        whatever was made is removed again."""
        try:
            run("ip", "netns", "add", self.switch)
            in_namespace(self.switch, "ip", "link", "add", BRIDGE, "type", "bridge")
            in_namespace(self.switch, "ip", "link", "set", BRIDGE, "up")
            self._attach(self.client, "client", CLIENT_HOST)
            for i, node_id in enumerate(node_ids, start=1):
                self.namespaces[node_id] = f"{self.name}-n{node_id}"
                self.hosts[node_id] = f"{SUBNET}.{FIRST_NODE_HOST + i}"
                self._attach(self.namespaces[node_id], f"n{node_id}", self.hosts[node_id])
        except BaseException:
            self.destroy()
            raise

    def _attach(self, namespace: str, port: str, host: str) -> None:
        run("ip", "netns", "add", namespace)
        run(
            "ip", "link", "add", INTERFACE, "netns", namespace, "type", "veth", "peer", port, "netns", self.switch
        )  # fmt: skip
        in_namespace(self.switch, "ip", "link", "set", port, "master", BRIDGE, "up")
        in_namespace(namespace, "ip", "link", "set", "lo", "up")
        in_namespace(namespace, "ip", "addr", "add", f"{host}/{PREFIX_LENGTH}", "dev", INTERFACE)
        in_namespace(namespace, "ip", "link", "set", INTERFACE, "up")

    def destroy(self) -> None:
        """Delete every namespace of this layout (processes still inside keep theirs
        alive, unnamed, until they exit: stop the nodes first)."""
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            namespace = line.split()[0] if line.strip() else ""
            if namespace == self.switch or namespace == self.client or namespace.startswith(f"{self.name}-n"):
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


# faults: each acts in one node's namespace ----------------------------------------------


def partition(namespace: str, peers: Iterable[str]) -> None:
    """Drop every packet between the node and each of ``peers`` (addresses), both ways."""
    for peer in peers:
        in_namespace(namespace, "iptables", "-w", "-A", "INPUT", "-s", peer, "-j", "DROP")
        in_namespace(namespace, "iptables", "-w", "-A", "OUTPUT", "-d", peer, "-j", "DROP")


def partition_all_but(namespace: str, peers: Iterable[str]) -> None:
    """Drop every packet between the node and anyone but itself and ``peers``."""
    for chain, direction in (("INPUT", "-s"), ("OUTPUT", "-d")):
        in_namespace(
            namespace, "iptables", "-w", "-A", chain, "-i" if chain == "INPUT" else "-o", "lo", "-j", "ACCEPT"
        )
        for peer in peers:
            in_namespace(namespace, "iptables", "-w", "-A", chain, direction, peer, "-j", "ACCEPT")
        in_namespace(namespace, "iptables", "-w", "-A", chain, "-j", "DROP")


def lose(namespace: str, percent: float) -> None:
    """Drop each packet to or from anyone but the node itself with probability ``percent``/100."""
    for chain, interface in (("INPUT", "-i"), ("OUTPUT", "-o")):
        in_namespace(
            namespace, "iptables", "-w", "-A", chain, "!", interface, "lo",
            "-m", "statistic", "--mode", "random", "--probability", f"{percent / 100:g}", "-j", "DROP",
        )  # fmt: skip


def heal(namespace: str) -> None:
    """Remove every partition of the node (idempotent)."""
    in_namespace(namespace, "iptables", "-w", "-F", "INPUT")
    in_namespace(namespace, "iptables", "-w", "-F", "OUTPUT")
