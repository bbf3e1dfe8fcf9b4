"""Network namespaces for a local cluster: each node on its own address behind one switch,
so faults can cut traffic between real processes (Linux, root, ``ip`` and ``iptables``).

``Network(name).create(node_ids)`` makes a switch namespace ``NAME-sw`` holding bridge
``br0``, and per node a namespace ``NAME-nID`` whose ``eth0`` (one end of a veth pair, the
other a bridge port) has ``10.200.X.(10+i)/24``; the caller (clients, commands) gets a leg
on the switch, veth ``NAME-h`` at ``10.200.X.1``, X picked so that no other layout's leg
is on it. ``destroy`` deletes the namespaces and with them every veth, the bridge and
every rule. Faults act inside one node's namespace, both ways: iptables' DROP (a
partition), DROP at random (loss), or REDIRECT through a proxy that holds every byte
(delay: ``raftka.tools.chaos.delay_proxy``, as this kernel has no ``tc netem``); ``heal`` undoes them.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from raftka.command.errors import CliError

SUBNET_PREFIX = "10.200"
PREFIX_LENGTH = 24
FIRST_NODE_HOST = 10
INTERFACE = "eth0"  # a node's side of its veth pair
BRIDGE = "br0"
TOOLS = {"ip": "iproute2", "ss": "iproute2", "iptables": "iptables"}
DELAY_MARK = 0x52  # SO_MARK of the delay proxy's own connections, which its rules let by
DELAY_PROXY = "raftka.tools.chaos.delay_proxy"
PROXY_EXIT_TIMEOUT_S = 10.0  # from SIGKILL to gone, on a loaded machine


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
    """One layout; ``name`` prefixes its namespaces and its leg (15 characters at most)."""

    name: str
    subnet: str = ""  # "10.200.X": the first three bytes of every address, picked by create
    hosts: dict[int, str] = field(default_factory=dict)  # node id -> its address
    namespaces: dict[int, str] = field(default_factory=dict)  # node id -> its namespace

    @property
    def switch(self) -> str:
        return f"{self.name}-sw"

    @property
    def leg(self) -> str:
        """The caller's interface on the switch."""
        return f"{self.name}-h"

    @property
    def client_host(self) -> str:
        """The caller's address on the switch: where the clients and commands run."""
        return f"{self.subnet}.1"

    def create(self, node_ids: Sequence[int]) -> None:
        """The switch, the caller's leg and one namespace per node; on failure, whatever
        was made is removed again."""
        try:
            self.subnet = _unused_subnet()
            run("ip", "netns", "add", self.switch)
            in_namespace(self.switch, "ip", "link", "add", BRIDGE, "type", "bridge")
            in_namespace(self.switch, "ip", "link", "set", BRIDGE, "up")
            run("ip", "link", "add", self.leg, "type", "veth", "peer", "name", "leg", "netns", self.switch)
            in_namespace(self.switch, "ip", "link", "set", "leg", "master", BRIDGE, "up")
            run("ip", "addr", "add", f"{self.client_host}/{PREFIX_LENGTH}", "dev", self.leg)
            run("ip", "link", "set", self.leg, "up")
            for i, node_id in enumerate(node_ids, start=1):
                self.namespaces[node_id] = f"{self.name}-n{node_id}"
                self.hosts[node_id] = f"{self.subnet}.{FIRST_NODE_HOST + i}"
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
        """Delete every namespace of this layout and the leg (processes still inside a
        namespace keep it alive, unnamed, until they exit: stop the nodes first)."""
        subprocess.run(["ip", "link", "del", self.leg], capture_output=True)  # gone already is fine
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            namespace = line.split()[0] if line.strip() else ""
            if namespace == self.switch or namespace.startswith(f"{self.name}-n"):
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def _unused_subnet() -> str:
    """A 10.200.X.0/24 no interface of the caller's namespace is on (another layout's)."""
    taken = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    for third in random.sample(range(256), 256):
        if f" {SUBNET_PREFIX}.{third}." not in taken:
            return f"{SUBNET_PREFIX}.{third}"
    raise CliError(f"every {SUBNET_PREFIX}.X.0/{PREFIX_LENGTH} is taken by another layout")


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


def delay(namespace: str, delay_ms: float) -> None:
    """Hold every byte to or from anyone but the node itself ``delay_ms`` on its way: a
    proxy in the namespace, every TCP connection through it (iptables' nat REDIRECT, new
    connections only, so the node's open ones are reset and made again through it)."""
    proxy = subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-m", DELAY_PROXY,
         "--delay-ms", f"{delay_ms:g}", "--mark", hex(DELAY_MARK)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proxy.stdout is not None
    port = proxy.stdout.readline().strip()
    if not port.isdigit():
        proxy.kill()
        raise CliError(
            f"the delay proxy in {namespace} did not start: {proxy.communicate()[1].strip()[-500:]}"
        )
    nat = ("iptables", "-w", "-t", "nat", "-A")
    redirect = ("-p", "tcp", "-j", "REDIRECT", "--to-ports", port)
    in_namespace(namespace, *nat, "PREROUTING", "-i", INTERFACE, *redirect)
    in_namespace(
        namespace, *nat, "OUTPUT", "-o", INTERFACE, "-m", "mark", "!", "--mark", hex(DELAY_MARK), *redirect
    )
    in_namespace(namespace, "ss", "-K", "state", "established")


def heal(namespace: str) -> None:
    """Remove every fault of the node (idempotent)."""
    in_namespace(namespace, "iptables", "-w", "-F", "INPUT")
    in_namespace(namespace, "iptables", "-w", "-F", "OUTPUT")
    in_namespace(namespace, "iptables", "-w", "-t", "nat", "-F", "PREROUTING")
    in_namespace(namespace, "iptables", "-w", "-t", "nat", "-F", "OUTPUT")
    for pid in delay_proxies(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # SIGKILL is not death: on a loaded machine the proxy can still be there a while after.
    # Healed means gone, so whoever checks (or delays the node again) finds none.
    deadline = time.monotonic() + PROXY_EXIT_TIMEOUT_S
    while proxies := delay_proxies(namespace):
        if time.monotonic() >= deadline:
            raise CliError(
                f"delay proxies {proxies} in {namespace} still run {PROXY_EXIT_TIMEOUT_S:g} s after SIGKILL"
            )
        time.sleep(0.01)


def delay_proxies(namespace: str) -> list[int]:
    """The delay proxies running in ``namespace``."""
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    found = []
    for pid in (int(p) for p in listed.split()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone since the listing
        if DELAY_PROXY.encode() in command:
            found.append(pid)
    return found
