"""``raftka quorum add-controller|remove-controller``: kafka-metadata-quorum's voter
changes (KIP-853).

``add-controller --controller HOST:PORT`` asks that controller (running, formatted
without being a voter, so fetching as an observer) for its node id and directory id,
then asks the quorum's leader to add it; ``--controller-id`` and
``--controller-directory-id`` name them instead. ``remove-controller`` needs both ids,
as Kafka's does: a voter is its node id and its storage. Each returns once the change
has committed, or with the leader's reason for refusing it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import grpc

from raftka.command import output
from raftka.command.addresses import bootstrap_addresses, parse_addresses
from raftka.command.errors import CliError
from raftka.command.quorum_client import QuorumClient
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.v1 import raft_pb2

CHANGE_TIMEOUT_S = 40.0  # the leader answers within 30 s (raftka.node.voter_changes)


def register_voter_changes(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = actions.add_parser("add-controller", help="add a controller (an observer) to the voters")
    add.add_argument(
        "--controller", required=True, metavar="HOST:PORT", help="the new controller's raft listener"
    )
    add.add_argument("--controller-id", type=int, help="its node id (default: asked from it)")
    add.add_argument("--controller-directory-id", help="its directory.id (default: asked from it)")
    remove = actions.add_parser("remove-controller", help="remove a voter from the controller quorum")
    remove.add_argument("--controller-id", type=int, required=True, help="the voter's node id")
    remove.add_argument(
        "--controller-directory-id",
        required=True,
        help="the voter's directory.id (quorum describe --replication)",
    )
    for parser, run in ((add, run_add), (remove, run_remove)):
        parser.add_argument(
            "--bootstrap-controller",
            metavar="HOST:PORT,...",
            help="controllers to ask (default: the local cluster from 'raftka cluster up')",
        )
        parser.add_argument("--dir", type=Path, help="local cluster directory (default: .raftka/local)")
        parser.add_argument("--timeout-s", type=float, default=10.0, help="how long to look for a leader")
        output.add_output_option(parser)
        add_tls_options(parser)
        parser.set_defaults(func=run)


def run_add(args: argparse.Namespace) -> int:

    (endpoint,) = parse_addresses(args.controller, "--controller")
    with QuorumClient(tls=client_tls(args)) as client:
        node_id, directory_id = args.controller_id, args.controller_directory_id
        if node_id is None or directory_id is None:
            itself = client.describe(endpoint)
            node_id = itself.node_id if node_id is None else node_id
            directory_id = directory_id or itself.directory_id
        if node_id < 0:
            raise CliError(f"--controller-id: {node_id} is negative")
        if not directory_id:
            raise CliError(
                f"--controller: {endpoint} reports no directory id; pass --controller-directory-id"
            )
        leader = client.describe_leader(
            bootstrap_addresses(args.bootstrap_controller, args.dir), args.timeout_s
        )
        request = raft_pb2.AddRaftVoterRequest(
            cluster_id=leader.cluster_id,
            voter_id=node_id,
            voter_directory_id=directory_id,
            endpoints=[endpoint],
        )
        resp = _send(client, leader, "AddRaftVoter", request, args.timeout_s)
    return _report(args, "added", node_id, directory_id, resp)


def run_remove(args: argparse.Namespace) -> int:

    with QuorumClient(tls=client_tls(args)) as client:
        leader = client.describe_leader(
            bootstrap_addresses(args.bootstrap_controller, args.dir), args.timeout_s
        )
        request = raft_pb2.RemoveRaftVoterRequest(
            cluster_id=leader.cluster_id,
            voter_id=args.controller_id,
            voter_directory_id=args.controller_directory_id,
        )
        resp = _send(client, leader, "RemoveRaftVoter", request, args.timeout_s)
    return _report(args, "removed", args.controller_id, args.controller_directory_id, resp)


def _send(
    client: QuorumClient, leader: raft_pb2.DescribeQuorumResponse, method: str, request: Any, timeout_s: float
) -> raft_pb2.RaftVoterChangeResponse:
    """Send to the leader; follow a NOT_LEADER to the leader it names until ``timeout_s``."""
    address = leader.leader_address
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            resp = getattr(client.stub(address), method)(request, timeout=CHANGE_TIMEOUT_S)
        except grpc.RpcError as e:
            raise CliError(f"{address}: {e.details() if isinstance(e, grpc.Call) else e}") from None
        if resp.error != raft_pb2.RAFT_ERROR_NOT_LEADER or time.monotonic() >= deadline:
            return resp
        if resp.leader_address:
            address = resp.leader_address
        time.sleep(0.1)


def _report(
    args: argparse.Namespace,
    done: str,
    node_id: int,
    directory_id: str,
    resp: raft_pb2.RaftVoterChangeResponse,
) -> int:
    if resp.error != raft_pb2.RAFT_ERROR_NONE:
        raise CliError(f"{raft_pb2.RaftError.Name(resp.error)}: {resp.message}")
    if resp.refusal:
        raise CliError(f"{resp.refusal}: {resp.message}")
    result = {"controller_id": node_id, "directory_id": directory_id, "offset": resp.offset, "result": done}
    if args.output == "json":
        print(output.to_json(result))
    else:
        print(
            f"Controller {node_id} (directory {directory_id}) {done}: the voter change committed at offset {resp.offset}."
        )
    return 0
