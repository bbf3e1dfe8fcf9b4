"""``raftka cluster up|down|status``: a local cluster on loopback, for development and chaos.

Three controllers (ids 1..3, the Raft voters) and three brokers (ids 101..103, Raft
observers of the metadata log). ``up`` is idempotent: the first run creates configs and
formatted storage, later runs start only the nodes that are down. It returns once a
leader has committed and every broker is registered and unfenced, because a cluster
short of that is not usable yet and the operator would only have to poll. ``down``
stops the brokers first, so their controlled shutdown still has a controller to ask.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.errors import AdminError
from raftka.command import local, output
from raftka.command.errors import CliError
from raftka.command.local import LOOPBACK, free_ports
from raftka.command.quorum_client import DescribeQuorumResponse, QuorumClient
from raftka.node.config import (
    BROKER,
    AuthorizerConfig,
    BrokerConfig,
    KafkaConfig,
    LogConfig,
    MetricsConfig,
    NodeConfig,
    Voter,
    render_toml,
)
from raftka.raft.storage import meta
from raftka.security.certs import CLIENT_UNIT, init_certs, subject
from raftka.security.tls import TlsFiles
from raftka.v1 import raft_pb2

MAX_CONTROLLERS = 9
MAX_BROKERS = 9
DEFAULT_CONTROLLERS = DEFAULT_BROKERS = 3  # what `cluster up` makes when not told
FIRST_BROKER_ID = 101
KAFKA_FIRST_PORT = 9092  # the first broker's Kafka listener, when free
POLL_INTERVAL_S = 0.1
# Local clusters keep their history for `raftka audit`: retired segments and snapshots go
# to archive/, bounded so a long-lived dev cluster cannot fill the disk.
LOCAL_LOG = LogConfig(archive_segments=True, archive_max_bytes=256 << 20)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = commands.add_parser("cluster", help="run a local quorum on 127.0.0.1")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    up_cmd = actions.add_parser(
        "up", help="create or restart the local cluster; wait for a leader and unfenced brokers"
    )
    up_cmd.add_argument("--controllers", type=int, help="number of controllers when creating (default 3)")
    up_cmd.add_argument("--brokers", type=int, help="number of brokers when creating (default 3)")
    up_cmd.add_argument(
        "--tls",
        action="store_true",
        help="when creating: a development CA and certificates in DIR/certs, mutual TLS on every listener",
    )
    up_cmd.add_argument(
        "--timeout-s", type=float, default=30.0, help="how long to wait for a leader, then for the brokers"
    )
    _add_dir_option(up_cmd)
    output.add_output_option(up_cmd)
    up_cmd.set_defaults(func=run_up)

    down_cmd = actions.add_parser(
        "down", help="stop every node, brokers first (SIGTERM, then SIGKILL); keep the data"
    )
    down_cmd.add_argument("--timeout-s", type=float, default=10.0, help="grace period before SIGKILL")
    _add_dir_option(down_cmd)
    output.add_output_option(down_cmd)
    down_cmd.set_defaults(func=run_down)

    status_cmd = actions.add_parser("status", help="each node's role, address and process")
    _add_dir_option(status_cmd)
    output.add_output_option(status_cmd)
    status_cmd.set_defaults(func=run_status)


def _add_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, help="cluster directory (default: .raftka/local)")


# up -----------------------------------------------------------------------------------


def run_up(args: argparse.Namespace) -> int:
    result = up(
        local.resolve_dir(args.dir), args.controllers, args.timeout_s, brokers=args.brokers, tls=args.tls
    )
    print(output.to_json(result) if args.output == "json" else format_up(result, args.dir))
    return 0


def up(
    cluster_dir: Path,
    controllers: int | None,
    timeout_s: float,
    *,
    brokers: int | None = None,
    tls: bool = False,
) -> dict[str, Any]:
    """Create the cluster if needed, start the nodes that are down, wait for a leader and
    then for every broker to be registered and unfenced."""
    created = not local.exists(cluster_dir)
    if created:
        cluster = create(
            cluster_dir,
            DEFAULT_CONTROLLERS if controllers is None else controllers,
            brokers=DEFAULT_BROKERS if brokers is None else brokers,
            tls=tls,
        )
    else:
        cluster = local.load(cluster_dir)
        for flag, wanted, have in (
            ("controllers", controllers, cluster.controllers()),
            ("brokers", brokers, cluster.brokers()),
        ):
            if wanted is not None and wanted != len(have):
                raise CliError(
                    f"the cluster in {cluster_dir} has {len(have)} {flag}, not {wanted}; "
                    f"to make a new one: raftka cluster down, then remove {cluster_dir}"
                )
        if tls and not cluster.tls:
            raise CliError(
                f"the cluster in {cluster_dir} runs without TLS; to make a new one with it: "
                f"raftka cluster down, then remove {cluster_dir}"
            )
    started = {node.id: local.start_node(node) for node in cluster.controllers() if not local.is_alive(node)}
    local.save(cluster)
    with QuorumClient(call_timeout_s=0.5, tls=cluster.client_tls()) as client:
        leader = wait_for_leader(cluster, started, client, timeout_s)
    started_brokers = {
        node.id: local.start_node(node) for node in cluster.brokers() if not local.is_alive(node)
    }
    local.save(cluster)
    if cluster.brokers():
        wait_for_brokers(cluster, started_brokers, timeout_s)
    return {
        "dir": str(cluster_dir),
        "cluster_id": cluster.cluster_id,
        "created": created,
        "tls": cluster.tls,
        "started": sorted(started) + sorted(started_brokers),
        "leader_id": leader.leader_id,
        "leader_epoch": leader.leader_epoch,
        "nodes": [
            {
                "id": n.id,
                "role": n.role,
                "address": n.address,
                "data_address": n.data_address or None,
                "kafka_address": n.kafka_address or None,
                "metrics_address": n.metrics_address or None,
                "pid": n.pid,
                "config": n.config,
                "log": n.log,
            }
            for n in cluster.nodes
        ],
    }


def create(
    cluster_dir: Path,
    controllers: int,
    *,
    brokers: int = 3,
    tls: bool = False,
    hosts: Mapping[int, str] | None = None,
    netns: Mapping[int, str] | None = None,
) -> local.LocalCluster:
    """Pick ports, write one config per node, format every node with one new cluster id;
    with ``tls``, first a CA and a certificate per node and for the commands.

    ``hosts``: the address each node id listens on and advertises (default loopback);
    ``netns``: the network namespace each node id runs in (``raftka.tools.chaos.netns``)."""
    if not 1 <= controllers <= MAX_CONTROLLERS:
        raise CliError(f"--controllers: expected 1 to {MAX_CONTROLLERS}, got {controllers}")
    if not 0 <= brokers <= MAX_BROKERS:
        raise CliError(f"--brokers: expected 0 to {MAX_BROKERS}, got {brokers}")
    if cluster_dir.exists() and any(cluster_dir.iterdir()):
        raise CliError(f"{cluster_dir} is not empty but holds no {local.STATE_FILE}; remove it or use --dir")
    # A broker has a gRPC and a data listener; every node has a metrics endpoint (the last ports).
    ports = free_ports(2 * controllers + 3 * brokers)
    metrics_ports = ports[controllers + 2 * brokers :]
    kafka_ports = kafka_listener_ports(brokers)
    hosts = hosts or {}
    netns = netns or {}
    voters = tuple(
        Voter(i, hosts.get(i, LOOPBACK), port) for i, port in enumerate(ports[:controllers], start=1)
    )
    cluster_id = meta.new_cluster_id()
    broker_ids = range(FIRST_BROKER_ID, FIRST_BROKER_ID + brokers)
    certs = cluster_dir.absolute() / local.CERTS_DIR
    if tls:
        init_certs(
            certs, controllers=[v.node_id for v in voters], brokers=broker_ids, clients=[local.CLIENT_CERT]
        )

    def node_tls(name: str) -> TlsFiles | None:
        return TlsFiles(certs / "ca.crt", certs / f"{name}.crt", certs / f"{name}.key") if tls else None

    nodes = []
    for voter in voters:
        config = NodeConfig(
            node_id=voter.node_id,
            data_dir=_node_dir(cluster_dir, voter.node_id) / "data",
            voters=voters,
            listener=voter.address,
            log=LOCAL_LOG,
            metrics=MetricsConfig(port=metrics_ports[voter.node_id - 1]),
            tls=node_tls(f"controller-{voter.node_id}"),
            # the certificate every command presents may do everything; others need ACLs
            authorizer=AuthorizerConfig(super_users=(_client_principal(),) if tls else ()),
        )
        # A brand-new cluster: every voter may vote before it has heard its peers.
        nodes.append(
            _write_node(
                config, local.CONTROLLER, cluster_id, initial_cluster=True, netns=netns.get(voter.node_id, "")
            )
        )
    broker_ports = ports[controllers:]
    for i, broker_id in enumerate(broker_ids):
        host = hosts.get(broker_id, LOOPBACK)
        config = NodeConfig(
            node_id=broker_id,
            data_dir=_node_dir(cluster_dir, broker_id) / "data",
            voters=voters,
            listener=f"{host}:{broker_ports[2 * i]}",
            process_roles=(BROKER,),
            broker=BrokerConfig(data_listener=f"{host}:{broker_ports[2 * i + 1]}"),
            kafka=KafkaConfig(
                listener=f"{host}:{kafka_ports[i]}",
                default_replication_factor=min(KafkaConfig().default_replication_factor, brokers),
            ),
            log=LOCAL_LOG,
            metrics=MetricsConfig(port=metrics_ports[controllers + i]),
            tls=node_tls(f"broker-{broker_id}"),
            authorizer=AuthorizerConfig(super_users=(_client_principal(),) if tls else ()),
        )
        nodes.append(
            _write_node(
                config, local.BROKER, cluster_id, initial_cluster=False, netns=netns.get(broker_id, "")
            )
        )
    cluster = local.LocalCluster(cluster_dir, cluster_id, nodes, tls)
    local.save(cluster)
    return cluster


def _client_principal() -> str:
    return "User:" + subject(local.CLIENT_CERT, CLIENT_UNIT).rfc4514_string()


def _node_dir(cluster_dir: Path, node_id: int) -> Path:
    return (cluster_dir / f"node-{node_id}").absolute()


def _write_node(
    config: NodeConfig, role: str, cluster_id: str, *, initial_cluster: bool, netns: str = ""
) -> local.NodeRecord:
    node_dir = config.data_dir.parent
    node_dir.mkdir(parents=True)
    config_path = node_dir / "server.toml"
    config_path.write_text(render_toml(config), encoding="utf-8")
    meta.format_storage(config.data_dir, cluster_id, config.node_id, initial_cluster=initial_cluster)
    return local.NodeRecord(
        id=config.node_id,
        role=role,
        address=config.listener,
        data_address=config.broker.data_listener,
        kafka_address=config.kafka.listener,
        metrics_address=f"{config.listener.rpartition(':')[0]}:{config.metrics.port}"
        if config.metrics.port
        else "",
        data_dir=str(config.data_dir),
        config=str(config_path),
        log=str(node_dir / "server.log"),
        netns=netns,
    )


def kafka_listener_ports(count: int) -> list[int]:
    """Kafka's own ports from 9092 when they are all free (what Kafka users type), else
    ports the kernel picks (another cluster, or a Kafka, holds them)."""
    wanted = list(range(KAFKA_FIRST_PORT, KAFKA_FIRST_PORT + count))
    sockets = [socket.socket() for _ in wanted]
    try:
        for s, port in zip(sockets, wanted, strict=True):
            s.bind((LOOPBACK, port))
    except OSError:
        return free_ports(count)
    finally:
        for s in sockets:
            s.close()
    return wanted


def wait_for_leader(
    cluster: local.LocalCluster,
    started: dict[int, subprocess.Popen[bytes]],
    client: QuorumClient,
    timeout_s: float,
) -> DescribeQuorumResponse:
    """Poll until a leader answers with a high watermark (its epoch has committed) and
    every controller we started has answered once.

    A node we started that exits meanwhile fails the wait at once, with its last log
    line: a bad config or a taken port is then reported in seconds, not after the timeout.
    """
    deadline = time.monotonic() + timeout_s
    silent = set(started)
    leader = None
    while True:
        _check_started(cluster, started)
        for node in cluster.controllers():
            resp = client.try_describe(node.address)
            if resp is None:
                continue
            silent.discard(node.id)
            if resp.error == raft_pb2.RAFT_ERROR_NONE and resp.high_watermark >= 0:
                leader = resp
        if leader is not None and not silent:
            return leader
        if time.monotonic() >= deadline:
            logs = ", ".join(node.log for node in cluster.controllers())
            problem = "no leader elected" if leader is None else f"node(s) {sorted(silent)} not answering"
            raise CliError(f"{problem} within {timeout_s:g} s; see the node logs: {logs}")
        time.sleep(POLL_INTERVAL_S)


def wait_for_brokers(
    cluster: local.LocalCluster, started: dict[int, subprocess.Popen[bytes]], timeout_s: float
) -> None:
    """Poll DescribeCluster until every broker of the cluster is registered and unfenced."""
    deadline = time.monotonic() + timeout_s
    wanted = {node.id for node in cluster.brokers()}
    seen = "no answer from the controller"
    policy = RetryPolicy(request_timeout_s=1.0, total_timeout_s=1.0)
    with Admin(cluster.addresses(), policy, cluster.client_tls()) as admin:
        while True:
            _check_started(cluster, started)
            try:
                brokers = {b.broker_id: b for b in admin.describe_cluster().brokers}
            except AdminError as e:
                seen = str(e)
            else:
                waiting = sorted(i for i in wanted if i not in brokers or brokers[i].fenced)
                if not waiting:
                    return
                seen = f"broker(s) {waiting} not registered or still fenced"
            if time.monotonic() >= deadline:
                logs = ", ".join(node.log for node in cluster.brokers())
                raise CliError(
                    f"brokers not ready within {timeout_s:g} s ({seen}); see the broker logs: {logs}"
                )
            time.sleep(POLL_INTERVAL_S)


def _check_started(cluster: local.LocalCluster, started: dict[int, subprocess.Popen[bytes]]) -> None:
    """Fail at once, with its last log line, if a node we started has exited."""
    for node_id, proc in started.items():
        code = proc.poll()
        if code is not None:
            node = cluster.node(node_id)
            last = local.last_log_line(node)
            raise CliError(
                f"node {node_id} exited with status {code} while starting; see {node.log}"
                + (f" (last line: {last})" if last else "")
            )


def format_up(result: dict[str, Any], dir_flag: Path | None) -> str:
    suffix = f" --dir {dir_flag}" if dir_flag is not None else ""
    started = ", ".join(str(i) for i in result["started"]) or "none (all were running)"
    rows = [
        (n["id"], n["role"], n["address"], n["data_address"], n["pid"], n["log"]) for n in result["nodes"]
    ]
    bootstrap = ",".join(n["data_address"] for n in result["nodes"] if n["data_address"])
    kafka = ",".join(n["kafka_address"] for n in result["nodes"] if n.get("kafka_address"))
    metrics = ",".join(n["metrics_address"] for n in result["nodes"] if n.get("metrics_address"))
    scrape = ", HTTPS with a client certificate" if result.get("tls") else ""
    return "\n".join(
        [
            f"{'Created' if result['created'] else 'Local'} cluster {result['cluster_id']} in {result['dir']}; "
            f"started: {started}",
            output.table(("ID", "ROLE", "ADDRESS", "DATA LISTENER", "PID", "LOG"), rows),
            f"Leader: node {result['leader_id']} (epoch {result['leader_epoch']})",
            *(
                [f"Bootstrap:   {bootstrap}  (producers and consumers: --bootstrap-server)"]
                if bootstrap
                else []
            ),
            *([f"Kafka:       {kafka}  (Kafka clients: bootstrap.servers)"] if kafka else []),
            *([f"Metrics:     {metrics}  (Prometheus targets: GET /metrics{scrape})"] if metrics else []),
            *(
                [
                    f"TLS:         mutual, certificates in {Path(result['dir']) / local.CERTS_DIR} (commands present {local.CLIENT_CERT}.crt)"
                ]
                if result.get("tls")
                else []
            ),
            f"Describe it: raftka quorum describe --status{suffix}",
            f"Brokers:     raftka brokers list{suffix}",
            f"Stop it:     raftka cluster down{suffix}",
        ]
    )


# down ---------------------------------------------------------------------------------


def run_down(args: argparse.Namespace) -> int:
    result = down(local.resolve_dir(args.dir), args.timeout_s)
    if args.output == "json":
        print(output.to_json(result))
    else:
        print(
            output.table(("ID", "PID", "RESULT"), [(n["id"], n["pid"], n["result"]) for n in result["nodes"]])
        )
        print(f"Data kept in {result['dir']}; 'raftka cluster up' starts the cluster again.")
    return 0


def down(cluster_dir: Path, timeout_s: float) -> dict[str, Any]:
    """SIGTERM the brokers (controlled shutdown, while the controllers still run), then
    the controllers (a leader then hands over gracefully); SIGKILL stragglers."""
    cluster = local.load(cluster_dir)
    results = {node.id: "not running" for node in cluster.nodes}
    pids = {node.id: node.pid for node in cluster.nodes}
    for group in (cluster.brokers(), cluster.controllers()):
        running = [node for node in group if local.is_alive(node)]
        for node in running:
            _signal(node, signal.SIGTERM)
            _signal(node, signal.SIGCONT)  # a node paused by chaos must run to handle SIGTERM
            results[node.id] = "stopped"
        running = _wait_until_gone(running, timeout_s)
        for node in running:
            _signal(node, signal.SIGKILL)
            results[node.id] = "killed"
        _wait_until_gone(running, 5.0)
    for node in cluster.nodes:
        node.pid = None
    local.save(cluster)
    return {
        "dir": str(cluster_dir),
        "nodes": [{"id": n.id, "pid": pids[n.id], "result": results[n.id]} for n in cluster.nodes],
    }


def _signal(node: local.NodeRecord, sig: signal.Signals) -> None:
    assert node.pid is not None
    with contextlib.suppress(ProcessLookupError):  # it exited on its own meanwhile
        os.kill(node.pid, sig)


def _wait_until_gone(nodes: list[local.NodeRecord], timeout_s: float) -> list[local.NodeRecord]:
    """The nodes still alive after at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while nodes and time.monotonic() < deadline:
        time.sleep(0.05)
        nodes = [node for node in nodes if local.is_alive(node)]
    return nodes


# status -------------------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    result = status(local.resolve_dir(args.dir))
    if args.output == "json":
        print(output.to_json(result))
    else:
        rows = [
            (n["id"], n["role"], n["address"], n["data_address"], n["pid"], n["alive"])
            for n in result["nodes"]
        ]
        print(output.table(("ID", "ROLE", "ADDRESS", "DATA LISTENER", "PID", "ALIVE"), rows))
        leader = result["leader_id"]
        print(
            f"Leader: node {leader} (epoch {result['leader_epoch']})"
            if leader is not None
            else "Leader: none"
        )
    return 0


def status(cluster_dir: Path) -> dict[str, Any]:
    """Each node's own view of its role (a broker that answers is a "broker"); the leader
    is the one the newest epoch names among the controllers."""
    cluster = local.load(cluster_dir)
    nodes = []
    answers: list[DescribeQuorumResponse] = []
    with QuorumClient(call_timeout_s=1.0, tls=cluster.client_tls()) as client:
        for node in cluster.nodes:
            alive = local.is_alive(node)
            resp = client.try_describe(node.address) if alive else None
            if resp is not None and node.role == local.CONTROLLER:
                answers.append(resp)
            if resp is None:
                role = "unreachable" if alive else "down"
            else:
                role = local.BROKER if node.role == local.BROKER else (resp.role or "unknown")
            nodes.append(
                {
                    "id": node.id,
                    "role": role,
                    "address": node.address,
                    "data_address": node.data_address or None,
                    "kafka_address": node.kafka_address or None,
                    "metrics_address": node.metrics_address or None,
                    "pid": node.pid if alive else None,
                    "alive": alive,
                }
            )
    known = [r for r in answers if r.leader_id >= 0]
    newest = max(known, key=lambda r: r.leader_epoch, default=None)
    return {
        "nodes": nodes,
        "leader_id": newest.leader_id if newest else None,
        "leader_epoch": newest.leader_epoch if newest else None,
    }
