"""cluster up/down/status: what `up` writes on first run, how start-up failures are
reported, and (marked integration) a real three-node cluster driven end to end."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.cli import cluster
from raftka.cli.main import main
from raftka.command import local
from raftka.command.errors import CliError
from raftka.command.quorum_client import QuorumClient
from raftka.node.config import load_config
from raftka.raft.storage import meta


def test_create_writes_configs_and_formats_every_node(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    created = cluster.create(cluster_dir, 3)
    assert local.load(cluster_dir) == created
    configs = {node.id: load_config(node.config) for node in created.nodes}
    assert list(configs) == [1, 2, 3, 101, 102, 103]
    assert [n.role for n in created.nodes] == ["controller"] * 3 + ["broker"] * 3
    assert len({c.voters for c in configs.values()}) == 1  # every node has the same voter set
    voters = configs[1].voters
    assert [v.node_id for v in voters] == [1, 2, 3]
    listeners = [n.address for n in created.nodes] + [n.data_address for n in created.brokers()]
    listeners += [n.metrics_address for n in created.nodes]
    assert len(set(listeners)) == 15  # every listener has its own port, every node a metrics endpoint
    for node in created.nodes:
        config = configs[node.id]
        assert node.address == config.listener
        assert node.data_address == config.broker.data_listener
        assert node.metrics_address == f"127.0.0.1:{config.metrics.port}"
        assert config.process_roles == (node.role,)
        if node.role == "controller":
            assert node.address == config.voter_addresses[node.id]
        else:
            assert node.id not in config.voter_ids  # a broker is an observer
            assert node.data_address in created.broker_addresses()
        assert str(config.data_dir) == node.data_dir
        assert meta.check_meta(config.data_dir, node.id, created.cluster_id).node_id == node.id
        assert node.pid is None
    assert created.addresses() == [n.address for n in created.controllers()]


def test_create_puts_each_node_on_its_host_and_in_its_namespace(tmp_path: Path) -> None:
    hosts = {1: "10.200.0.11", 101: "10.200.0.12"}
    namespaces = {1: "rk-n1", 101: "rk-n101"}
    created = cluster.create(tmp_path / "c", 1, brokers=1, hosts=hosts, netns=namespaces)
    assert local.load(tmp_path / "c") == created
    for node in created.nodes:
        config = load_config(node.config)
        host = hosts[node.id]
        assert node.netns == namespaces[node.id]
        assert config.listener == node.address and node.address.startswith(f"{host}:")
        assert node.metrics_address == f"{host}:{config.metrics.port}"
    broker = created.node(101)
    assert broker.data_address.startswith("10.200.0.12:") and broker.kafka_address.startswith("10.200.0.12:")
    assert load_config(broker.config).voter_addresses[1] == created.node(1).address


def test_create_without_brokers(tmp_path: Path) -> None:
    created = cluster.create(tmp_path / "c", 1, brokers=0)
    assert [n.id for n in created.nodes] == [1] and created.brokers() == []


def test_create_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("")
    with pytest.raises(CliError, match="not empty but holds no cluster.json"):
        cluster.create(tmp_path, 3)


def test_create_checks_the_node_counts(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="--controllers: expected 1 to 9, got 0"):
        cluster.create(tmp_path / "c", 0)
    with pytest.raises(CliError, match="--brokers: expected 0 to 9, got 10"):
        cluster.create(tmp_path / "c", 3, brokers=10)


def test_up_refuses_to_resize(tmp_path: Path) -> None:
    cluster.create(tmp_path, 3)
    with pytest.raises(CliError, match="has 3 controllers, not 5"):
        cluster.up(tmp_path, 5, timeout_s=1)
    with pytest.raises(CliError, match="has 3 brokers, not 1"):
        cluster.up(tmp_path, None, timeout_s=1, brokers=1)


def test_free_ports_differ_and_lie_below_the_ephemeral_range() -> None:
    """A restarted node's port is never taken by an outbound connection's source port,
    which the kernel picks from its ephemeral range (a fast restart under -n 2 once found
    its Kafka port taken)."""
    ports = local.free_ports(5)
    ephemeral_low = int(local.EPHEMERAL_RANGE.read_text().split()[0])
    assert len(set(ports)) == 5 and all(local.PORT_LOW <= p < ephemeral_low for p in ports), ports


def test_a_leased_port_is_not_picked_again_until_its_lease_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pickers (test workers, `cluster up`s) never share a port, even while its first
    owner is down: the bind probe alone let another worker's cluster take a node's metrics
    port before the node started."""
    monkeypatch.setattr(local, "PORT_LEASES", tmp_path / "leases")

    def picks_from_20000() -> None:  # each picker tries the same ports in the same order
        ports = iter(range(20_000, 30_000))
        monkeypatch.setattr(local.random, "randrange", lambda *_: next(ports))

    picks_from_20000()
    first = local.free_ports(10)
    picks_from_20000()
    second = local.free_ports(10)
    assert not set(first) & set(second), (first, second)
    os.utime(local.PORT_LEASES / str(first[0]), (0, 0))  # an hour-old lease, left by a run long gone
    picks_from_20000()
    assert local.free_ports(1) == [first[0]]


def test_down_and_status_of_a_stopped_cluster(tmp_path: Path) -> None:
    created = cluster.create(tmp_path, 3)
    created.nodes[0].pid = 999_999_999  # recorded but long gone
    local.save(created)
    assert cluster.status(tmp_path) == {
        "nodes": [
            {
                "id": n.id,
                "role": "down",
                "address": n.address,
                "data_address": n.data_address or None,
                "kafka_address": n.kafka_address or None,
                "metrics_address": n.metrics_address,
                "pid": None,
                "alive": False,
            }
            for n in created.nodes
        ],
        "leader_id": None,
        "leader_epoch": None,
    }
    result = cluster.down(tmp_path, timeout_s=1)
    assert [n["result"] for n in result["nodes"]] == ["not running"] * 6
    assert all(n.pid is None for n in local.load(tmp_path).nodes)


def test_a_node_that_dies_while_starting_is_reported_with_its_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = cluster.create(tmp_path, 3)
    script = "import sys; print('raftka: error: port taken', file=sys.stderr); sys.exit(3)"
    monkeypatch.setattr(local, "server_command", lambda config: [sys.executable, "-c", script, config])
    started = {1: local.start_node(created.node(1))}
    with QuorumClient(call_timeout_s=0.1) as client, pytest.raises(CliError) as err:
        cluster.wait_for_leader(created, started, client, timeout_s=30)
    assert str(err.value) == (
        f"node 1 exited with status 3 while starting; see {created.node(1).log} "
        "(last line: raftka: error: port taken)"
    )


def test_no_leader_in_time_points_at_the_logs(tmp_path: Path) -> None:
    created = cluster.create(tmp_path, 3)
    with QuorumClient(call_timeout_s=0.1) as client, pytest.raises(CliError) as err:
        cluster.wait_for_leader(created, {}, client, timeout_s=0.2)
    assert str(err.value).startswith("no leader elected within 0.2 s; see the node logs: ")
    assert created.node(3).log in str(err.value)


# A real cluster ------------------------------------------------------------------------


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "local"
    yield path
    if local.exists(path):
        cluster.down(path, timeout_s=10)


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*argv, "--output", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.integration
def test_local_cluster_end_to_end(cluster_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--dir", str(cluster_dir)]
    up = run_json(["cluster", "up", *d], capsys)
    assert up["created"] and up["started"] == [1, 2, 3, 101, 102, 103]

    status = run_json(["cluster", "status", *d], capsys)
    roles = {n["id"]: n["role"] for n in status["nodes"]}
    assert roles[status["leader_id"]] == "leader"
    assert sorted(roles.values()) == ["broker"] * 3 + ["follower", "follower", "leader"]
    brokers = run_json(["brokers", "list", *d], capsys)
    assert [(b["id"], b["fenced"]) for b in brokers] == [(101, False), (102, False), (103, False)]

    quorum = run_json(["quorum", "describe", "--status", *d], capsys)
    assert quorum["cluster_id"] == up["cluster_id"]
    assert quorum["high_watermark"] >= 0
    rows = run_json(["quorum", "describe", "--replication", *d], capsys)
    assert [r["status"] for r in rows] == ["Leader", "Follower", "Follower"] + ["Observer"] * 3  # the brokers

    chaos_run = run_json(["chaos", "kill-leader", "--rounds", "2", *d], capsys)
    assert [r["new_epoch"] > r["old_epoch"] for r in chaos_run["rounds"]] == [True, True]
    assert chaos_run["summary"]["rounds"] == 2
    stop_run = run_json(["chaos", "kill-leader", "--signal", "STOP", *d], capsys)
    assert stop_run["rounds"][0]["signal"] == "STOP"

    down = run_json(["cluster", "down", *d], capsys)
    assert [n["result"] for n in down["nodes"]] == ["stopped"] * 6
    again = run_json(["cluster", "up", *d], capsys)
    assert not again["created"] and again["cluster_id"] == up["cluster_id"]
    assert again["leader_epoch"] > stop_run["rounds"][0]["new_epoch"]


def test_up_prints_every_nodes_metrics_endpoint() -> None:
    node = {"role": "controller", "address": "127.0.0.1:1", "data_address": None, "pid": 7, "log": "l"}
    result = {
        "created": True,
        "cluster_id": "c",
        "dir": "d",
        "started": [1, 2],
        "leader_id": 1,
        "leader_epoch": 1,
        "nodes": [
            {**node, "id": 1, "metrics_address": "127.0.0.1:9101"},
            {**node, "id": 2, "metrics_address": "127.0.0.1:9102"},
            {**node, "id": 3, "metrics_address": None},  # a cluster made before metrics existed
        ],
    }
    printed = cluster.format_up(result, None)
    assert "Metrics:     127.0.0.1:9101,127.0.0.1:9102  (Prometheus targets: GET /metrics)" in printed
