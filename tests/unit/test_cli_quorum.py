"""quorum describe: Kafka's fields and lag arithmetic, NOT_LEADER redirects followed over
real gRPC (fake servicers on loopback), and clear errors when nobody answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from raftka.cli import quorum
from raftka.command import local
from raftka.command.addresses import bootstrap_addresses
from raftka.command.errors import CliError
from raftka.command.quorum_client import QuorumClient, QuorumError
from raftka.v1 import raft_pb2, raft_pb2_grpc

NOW_MS = 1_700_000_000_000


def replica(
    node_id: int, end: int, caught_up_ms: int = NOW_MS, fetch_ms: int = NOW_MS
) -> raft_pb2.ReplicaDescription:
    return raft_pb2.ReplicaDescription(
        node_id=node_id,
        log_end_offset=end,
        last_fetch_timestamp_ms=fetch_ms,
        last_caught_up_timestamp_ms=caught_up_ms,
        address=f"127.0.0.1:1909{node_id}",
    )


def leader_answer(node_id: int = 2, **kw: object) -> raft_pb2.DescribeQuorumResponse:
    fields: dict[str, object] = {
        "cluster_id": "c1",
        "node_id": node_id,
        "leader_id": node_id,
        "leader_epoch": 7,
        "high_watermark": 100,
        "role": "leader",
        "voters": [replica(1, 90, NOW_MS - 250), replica(2, 110), replica(3, 110)],
        "observers": [replica(4, 50, -1, -1)],
    }
    fields.update(kw)
    return raft_pb2.DescribeQuorumResponse(**fields)


def test_status_view_computes_kafka_lag() -> None:
    status = quorum.status_view(leader_answer())
    assert status == {
        "cluster_id": "c1",
        "leader_id": 2,
        "leader_epoch": 7,
        "high_watermark": 100,
        "max_follower_lag": 20,
        "max_follower_lag_time_ms": 250,
        "voters": [
            {"id": 1, "address": "127.0.0.1:19091"},
            {"id": 2, "address": "127.0.0.1:19092"},
            {"id": 3, "address": "127.0.0.1:19093"},
        ],
        "observers": [{"id": 4, "address": "127.0.0.1:19094"}],
    }
    text = quorum.format_status(status)
    assert text.splitlines()[:2] == ["ClusterId:            c1", "LeaderId:             2"]
    assert "CurrentVoters:        [1@127.0.0.1:19091, 2@127.0.0.1:19092, 3@127.0.0.1:19093]" in text
    assert "MaxFollowerLagTimeMs: 250" in text


def test_status_view_of_a_caught_up_quorum_has_no_lag() -> None:
    resp = leader_answer(voters=[replica(1, 110, NOW_MS - 5), replica(2, 110), replica(3, 110)])
    status = quorum.status_view(resp)
    assert (status["max_follower_lag"], status["max_follower_lag_time_ms"]) == (0, 0)


def test_replication_view_puts_the_leader_first() -> None:
    rows = quorum.replication_view(leader_answer())
    assert [(r["node_id"], r["status"], r["lag"]) for r in rows] == [
        (2, "Leader", 0),
        (1, "Follower", 20),
        (3, "Follower", 0),
        (4, "Observer", 60),
    ]
    assert set(rows[0]) == {
        "node_id",
        "log_end_offset",
        "lag",
        "last_fetch_timestamp",
        "last_caught_up_timestamp",
        "status",
        "directory_id",  # KIP-853, as Kafka 3.9's --replication shows it
    }


def test_replication_table_human_readable() -> None:
    rows = quorum.replication_view(leader_answer())
    lines = quorum.format_replication(rows, now_ms=NOW_MS + 10).splitlines()
    assert lines[0].split() == [
        "NodeId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    assert lines[2].split() == ["1", "90", "20", "10", "ms", "ago", "260", "ms", "ago", "Follower"]
    assert lines[4].split() == ["4", "50", "60", "never", "never", "Observer"]
    assert str(NOW_MS) in quorum.format_replication(rows)


def test_bootstrap_addresses(tmp_path: Path) -> None:
    assert bootstrap_addresses("a:1, b:2", None) == ["a:1", "b:2"]
    with pytest.raises(CliError, match="--bootstrap-controller: expected HOST:PORT"):
        bootstrap_addresses("a", None)
    with pytest.raises(CliError, match="no local cluster"):
        bootstrap_addresses(None, tmp_path)
    node = local.NodeRecord(1, "controller", "127.0.0.1:5", "d", "c", "l")
    local.save(local.LocalCluster(tmp_path, "c1", [node]))
    assert bootstrap_addresses(None, tmp_path) == ["127.0.0.1:5"]


class FakeRaft(raft_pb2_grpc.RaftServicer):
    def __init__(self, answer: raft_pb2.DescribeQuorumResponse) -> None:
        self.answer = answer
        self.calls = 0

    def DescribeQuorum(self, request: object, context: object) -> raft_pb2.DescribeQuorumResponse:  # noqa: N802
        self.calls += 1
        return self.answer


@pytest.fixture
def serve() -> Iterator:
    servers: list[grpc.Server] = []

    def start(servicer: FakeRaft) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        raft_pb2_grpc.add_RaftServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(None)


def test_describe_leader_follows_not_leader(serve) -> None:  # type: ignore[no-untyped-def]
    leader = FakeRaft(leader_answer())
    leader_address = serve(leader)
    follower = FakeRaft(
        raft_pb2.DescribeQuorumResponse(
            error=raft_pb2.RAFT_ERROR_NOT_LEADER,
            node_id=1,
            leader_id=2,
            leader_epoch=7,
            leader_address=leader_address,
            role="follower",
        )
    )
    follower_address = serve(follower)
    with QuorumClient() as client:
        resp = client.describe_leader([follower_address], timeout_s=2)
    assert resp.leader_id == 2
    assert (follower.calls, leader.calls) == (1, 1)


def test_describe_leader_without_leader_names_the_problem(serve) -> None:  # type: ignore[no-untyped-def]
    no_leader = serve(
        FakeRaft(
            raft_pb2.DescribeQuorumResponse(
                error=raft_pb2.RAFT_ERROR_NOT_LEADER, leader_id=-1, leader_epoch=3
            )
        )
    )
    with QuorumClient(call_timeout_s=0.5) as client, pytest.raises(QuorumError) as err:
        client.describe_leader([no_leader, "127.0.0.1:1"], timeout_s=0.2)
    message = str(err.value)
    assert "no leader found within 0.2 s" in message
    assert f"{no_leader}: no leader known in epoch 3" in message
    assert "127.0.0.1:1: not reachable" in message


def test_describe_command_prints_json(serve, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    address = serve(FakeRaft(leader_answer()))
    args = ["--bootstrap-controller", address, "--output", "json"]
    assert run_describe(["--status", *args]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["leader_id"] == 2 and status["high_watermark"] == 100
    assert run_describe(["--replication", *args]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["node_id"] for r in rows] == [2, 1, 3, 4]


def run_describe(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    quorum.register(commands)
    args = parser.parse_args(["quorum", "describe", *argv])
    return args.func(args)
