"""``raftka quorum describe --status|--replication``: kafka-metadata-quorum.sh for raftka.

Field names and their meaning follow Kafka's tool, so an operator's habits (and
scripts, through ``--output json`` with snake_case keys) carry over.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from raftka.cli.quorum_voters import register_voter_changes
from raftka.command import output
from raftka.command.addresses import bootstrap_addresses
from raftka.command.quorum_client import DescribeQuorumResponse, QuorumClient
from raftka.command.tls_args import add_tls_options, client_tls


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quorum = commands.add_parser("quorum", help="inspect the controller quorum")
    actions = quorum.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="describe the quorum, like kafka-metadata-quorum.sh")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark and lag")
    what.add_argument("--replication", action="store_true", help="one row per replica")
    describe.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT,...",
        help="controllers to ask (default: the local cluster from 'raftka cluster up')",
    )
    describe.add_argument("--dir", type=Path, help="local cluster directory (default: .raftka/local)")
    describe.add_argument(
        "--human-readable", action="store_true", help="timestamps as 'N ms ago' (table output)"
    )
    describe.add_argument("--timeout-s", type=float, default=10.0, help="how long to look for a leader")
    output.add_output_option(describe)
    add_tls_options(describe)
    describe.set_defaults(func=run_describe)
    register_voter_changes(actions)


def run_describe(args: argparse.Namespace) -> int:
    addresses = bootstrap_addresses(args.bootstrap_controller, args.dir)
    with QuorumClient(tls=client_tls(args)) as client:
        resp = client.describe_leader(addresses, args.timeout_s)
    if args.status:
        status = status_view(resp)
        print(output.to_json(status) if args.output == "json" else format_status(status))
    else:
        rows = replication_view(resp)
        if args.output == "json":
            print(output.to_json(rows))
        else:
            print(format_replication(rows, now_ms=int(time.time() * 1000) if args.human_readable else None))
    return 0


def status_view(resp: DescribeQuorumResponse) -> dict[str, Any]:
    """The leader's view, with lag computed as Kafka does: over voters only."""
    leader = next((v for v in resp.voters if v.node_id == resp.leader_id), None)
    lag_max = -1
    lag_time_ms = -1
    if leader is not None and resp.voters:
        laggard = min(resp.voters, key=lambda v: v.log_end_offset)
        lag_max = leader.log_end_offset - laggard.log_end_offset
        if laggard.node_id == leader.node_id or lag_max == 0:
            lag_time_ms = 0
        elif leader.last_caught_up_timestamp_ms >= 0 and laggard.last_caught_up_timestamp_ms >= 0:
            lag_time_ms = leader.last_caught_up_timestamp_ms - laggard.last_caught_up_timestamp_ms
    return {
        "cluster_id": resp.cluster_id,
        "leader_id": resp.leader_id,
        "leader_epoch": resp.leader_epoch,
        "high_watermark": resp.high_watermark,
        "max_follower_lag": lag_max,
        "max_follower_lag_time_ms": lag_time_ms,
        "voters": [{"id": v.node_id, "address": v.address} for v in resp.voters],
        "observers": [{"id": o.node_id, "address": o.address} for o in resp.observers],
    }


def format_status(status: dict[str, Any]) -> str:
    return output.fields(
        [
            ("ClusterId", status["cluster_id"]),
            ("LeaderId", status["leader_id"]),
            ("LeaderEpoch", status["leader_epoch"]),
            ("HighWatermark", status["high_watermark"]),
            ("MaxFollowerLag", status["max_follower_lag"]),
            ("MaxFollowerLagTimeMs", status["max_follower_lag_time_ms"]),
            ("CurrentVoters", _replica_list(status["voters"])),
            ("CurrentObservers", _replica_list(status["observers"])),
        ]
    )


def replication_view(resp: DescribeQuorumResponse) -> list[dict[str, Any]]:
    """One row per replica: the leader first, then voters, then observers (Kafka's order)."""
    leader_end = next((v.log_end_offset for v in resp.voters if v.node_id == resp.leader_id), -1)
    replicas = [(v, "Leader" if v.node_id == resp.leader_id else "Follower") for v in resp.voters]
    replicas += [(o, "Observer") for o in resp.observers]
    replicas.sort(key=lambda r: (r[1] != "Leader", r[1] == "Observer", r[0].node_id))
    return [
        {
            "node_id": r.node_id,
            "log_end_offset": r.log_end_offset,
            "lag": leader_end - r.log_end_offset if r.log_end_offset >= 0 else -1,
            "last_fetch_timestamp": r.last_fetch_timestamp_ms,
            "last_caught_up_timestamp": r.last_caught_up_timestamp_ms,
            "status": status,
            "directory_id": r.directory_id,
        }
        for r, status in replicas
    ]


def format_replication(rows: list[dict[str, Any]], now_ms: int | None = None) -> str:
    """The table; with ``now_ms`` timestamps read "N ms ago" (Kafka's --human-readable)."""

    def when(ts: int) -> str | int:
        if now_ms is None:
            return ts
        return "never" if ts < 0 else f"{max(0, now_ms - ts)} ms ago"

    headers = ("NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status")
    return output.table(
        headers,
        [
            (
                r["node_id"],
                r["log_end_offset"],
                r["lag"],
                when(r["last_fetch_timestamp"]),
                when(r["last_caught_up_timestamp"]),
                r["status"],
            )
            for r in rows
        ],
    )


def _replica_list(replicas: list[dict[str, Any]]) -> str:
    return (
        "[" + ", ".join(f"{r['id']}@{r['address']}" if r["address"] else str(r["id"]) for r in replicas) + "]"
    )
