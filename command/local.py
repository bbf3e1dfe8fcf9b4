"""The local cluster's state: ``DIR/cluster.json`` and the node processes it records.

``cluster up`` writes it; every other command reads it, so after ``raftka cluster up``
no command needs an address. Liveness checks the pid *and* that the process is our
server for that node's config, because pids are reused after a crash or a reboot.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from raftka.command.errors import CliError
from raftka.security.tls import TlsFiles

LOOPBACK = "127.0.0.1"
DEFAULT_DIR = Path(".raftka") / "local"
STATE_FILE = "cluster.json"
CONTROLLER = "controller"
BROKER = "broker"
CERTS_DIR = "certs"  # `cluster up --tls`: the CA and every certificate (raftka.security.certs)
CLIENT_CERT = "admin"  # the certificate every command presents to a TLS cluster


@dataclass(slots=True)
class NodeRecord:
    id: int
    role: str  # process role: CONTROLLER or BROKER
    address: str
    data_dir: str
    config: str  # absolute path of the node's server.toml
    log: str  # absolute path of the node's stdout/stderr
    pid: int | None = None  # None: never started or stopped by `cluster down`
    data_address: str = ""  # a broker's data listener (broker.data_listener); "" for controllers
    kafka_address: str = ""  # a broker's Kafka listener (kafka.listener); "" for controllers
    metrics_address: str = ""  # host:port of its Prometheus endpoint (metrics.port); "": off
    netns: str = ""  # the network namespace it runs in (``ip netns``); "": the caller's


@dataclass(slots=True)
class LocalCluster:
    dir: Path
    cluster_id: str
    nodes: list[NodeRecord]
    tls: bool = False  # made with `cluster up --tls`: certificates in CERTS_DIR

    def certs_dir(self) -> Path:
        return (self.dir / CERTS_DIR).absolute()

    def client_tls(self) -> TlsFiles | None:
        """The certificate commands present to this cluster; None if it runs plaintext."""
        if not self.tls:
            return None
        certs = self.certs_dir()
        return TlsFiles(certs / "ca.crt", certs / f"{CLIENT_CERT}.crt", certs / f"{CLIENT_CERT}.key")

    def node(self, node_id: int) -> NodeRecord:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise CliError(f"node {node_id} is not in the local cluster at {self.dir}")

    def controllers(self) -> list[NodeRecord]:
        return [node for node in self.nodes if node.role == CONTROLLER]

    def brokers(self) -> list[NodeRecord]:
        return [node for node in self.nodes if node.role == BROKER]

    def addresses(self) -> list[str]:
        """The controllers' addresses: where admin clients and quorum tools bootstrap."""
        return [node.address for node in self.controllers()]

    def broker_addresses(self) -> list[str]:
        """The brokers' data listeners: where producers and consumers bootstrap."""
        if any(not node.data_address for node in self.brokers()):
            raise CliError(
                f"the cluster in {self.dir} predates the brokers' data listeners: "
                f"raftka cluster down, then remove {self.dir} to start over"
            )
        return [node.data_address for node in self.brokers()]

    def kafka_addresses(self) -> list[str]:
        """The brokers' Kafka listeners: where Kafka's own clients bootstrap."""
        if any(not node.kafka_address for node in self.brokers()):
            raise CliError(
                f"a broker of the cluster in {self.dir} has no Kafka listener (kafka.listener; the "
                f"cluster may predate them): pass --bootstrap-server, or start over after "
                f"raftka cluster down and removing {self.dir}"
            )
        return [node.kafka_address for node in self.brokers()]


def resolve_dir(explicit: Path | None) -> Path:
    """``--dir`` if given; else the nearest ``.raftka/local`` holding a cluster from the
    working directory upward (like git finds ``.git``); else ``./.raftka/local``."""
    if explicit is not None:
        return explicit
    cwd = Path.cwd()
    for parent in (cwd, *cwd.parents):
        if (parent / DEFAULT_DIR / STATE_FILE).is_file():
            return parent / DEFAULT_DIR
    return DEFAULT_DIR


def exists(cluster_dir: Path) -> bool:
    return (cluster_dir / STATE_FILE).is_file()


def load(cluster_dir: Path) -> LocalCluster:
    path = cluster_dir / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"no local cluster in {cluster_dir} (start one with 'raftka cluster up')") from None
    except (OSError, ValueError) as e:
        raise CliError(f"cannot read {path}: {e}") from None
    try:
        nodes = [NodeRecord(**node) for node in data["nodes"]]
        return LocalCluster(cluster_dir, data["cluster_id"], nodes, bool(data.get("tls", False)))
    except (KeyError, TypeError) as e:
        raise CliError(
            f"{path} is not a raftka cluster file ({e}); remove {cluster_dir} to start over"
        ) from None


def save(cluster: LocalCluster) -> None:
    """Write atomically, so a crash mid-write never leaves a cluster nobody can read."""
    path = cluster.dir / STATE_FILE
    data = {
        "cluster_id": cluster.cluster_id,
        "tls": cluster.tls,
        "nodes": [dataclasses.asdict(n) for n in cluster.nodes],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def is_alive(node: NodeRecord) -> bool:
    """True while ``node.pid`` runs our server for ``node.config`` (stopped counts as alive)."""
    if node.pid is None:
        return False
    try:
        os.kill(node.pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the pid now belongs to someone else
        return False
    if not Path("/proc/self").exists():  # no procfs (macOS): the signal check is all we have
        return True
    try:
        argv = Path(f"/proc/{node.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.fsencode(node.config) in argv  # a zombie's cmdline is empty


def server_command(config: str) -> list[str]:
    """The command line that runs one node: this Python, so the venv carries over."""
    return [sys.executable, "-m", "raftka.cli.main", "server", "--config", config]


def node_command(node: NodeRecord) -> list[str]:
    """``server_command``, in the node's network namespace if it has one (``ip netns exec``
    execs it, so the pid stays the server's)."""
    command = server_command(node.config)
    return ["ip", "netns", "exec", node.netns, *command] if node.netns else command


def start_node(node: NodeRecord) -> subprocess.Popen[bytes]:
    """Start the node detached (own session, so the shell's Ctrl-C does not reach it).

    The working directory is the node's own, so ``python -m`` cannot pick up a stray
    ``cli`` package from wherever the operator happens to be.
    """
    with open(node.log, "ab") as log:
        proc = subprocess.Popen(
            node_command(node),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(node.config).parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # a SIGKILLed node still leaves its log
            start_new_session=True,
        )
    node.pid = proc.pid
    return proc


def last_log_line(node: NodeRecord) -> str:
    """The node's last non-empty log line, for error messages about a node that died."""
    try:
        with open(node.log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_LOW = 10_000
PORT_LEASES = Path(tempfile.gettempdir()) / f"raftka-port-leases-{os.getuid()}"
PORT_LEASE_S = 3600.0


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports nobody listens on, below the kernel's ephemeral range, each
    leased to the caller for ``PORT_LEASE_S``.

    A node's port is free while the node is down, and an outbound connection's source port
    (a peer, a client or another cluster's) comes from the ephemeral range: picking below
    that range means a restarted node never finds its own port taken by such a connection.
    The lease (a file per port under ``PORT_LEASES``) keeps two pickers on this machine
    (two test workers, two ``cluster up``) from choosing the same port while its first
    owner is down or not yet listening: the bind probe alone saw neither.
    """
    high = 32_768
    if EPHEMERAL_RANGE.exists():
        high = int(EPHEMERAL_RANGE.read_text().split()[0])
    PORT_LEASES.mkdir(mode=0o700, exist_ok=True)
    held: list[socket.socket] = []
    try:
        for _ in range(100 * count):
            if len(held) == count:
                break
            port = random.randrange(PORT_LOW, high)
            sock = socket.socket()
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                sock.close()
                continue
            if not _lease(port):
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise OSError(f"found only {len(held)} of {count} free loopback ports in {PORT_LOW}-{high}")
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _lease(port: int) -> bool:
    """Take the port's lease: create its file, or take over one older than PORT_LEASE_S
    (renaming it away first, which only one of two racing pickers can do)."""
    path = PORT_LEASES / str(port)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    try:
        if time.time() - path.stat().st_mtime < PORT_LEASE_S:
            return False
        stale = path.with_name(f"{port}.stale.{os.getpid()}")
        path.rename(stale)
        stale.unlink()
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:  # another picker took it over first
        return False
    return True
