"""A node process's assembly: recovered storage, core, gRPC transport and driver around
the layer above (the journal, the metadata controller or the broker), and how the process
runs until it is told to stop.

SIGTERM or SIGINT stops a node gracefully: a leader resigns with EndQuorumEpoch, so its
successor takes over in one round trip instead of an election timeout.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable, Sequence

from raftka.metadata.acls import Authorizer
from raftka.metadata.quorum_authorization import quorum_rules
from raftka.node.config import NodeConfig
from raftka.node.descriptors import grpc_connections_max
from raftka.node.health import HEALTH_RULES
from raftka.node.voter_changes import change_voters
from raftka.raft.core import RaftCore
from raftka.raft.driver import RaftNode, StateMachine, monotonic_ms
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import check_meta, read_bootstrap_voters
from raftka.raft.transport.grpc_transport import AddServicer, GrpcTransport
from raftka.security.grpc_gate import PrincipalGate, Rules
from raftka.security.quorum_gate import QuorumGate
from raftka.v1 import raft_pb2


class ServerError(Exception):
    """The node stopped for a reason the operator must act on."""


async def open_node(
    config: NodeConfig,
    state_machine: StateMachine,
    servicers: Sequence[AddServicer] = (),
    rules: Rules | None = None,
    authorizer: Authorizer | None = None,
    is_broker: Callable[[int], bool] = lambda node_id: False,
) -> RaftNode:
    """Recover storage and wire core, gRPC transport and driver around the layer above.

    Every node type (journal node, controller, broker) is assembled here, so they cannot
    drift apart. The node is returned unstarted: servicers may refer to services built
    from it, which must exist before ``await node.start()``. With TLS on, every call is
    judged (``raftka.security.grpc_gate``): the Raft service's by ``authorizer``
    (``raftka.metadata.quorum_authorization``; ``is_broker``: the ids the node knows as
    brokers', which can never be voters), health and reflection are open, the servicers'
    by ``rules``, and any method without a rule is refused; the quorum's streams are
    judged by the roles of their callers' certificates (``raftka.security.quorum_gate``).
    Without an ``authorizer`` only ``authorizer.super_users`` may use the cluster rights.
    """
    meta = check_meta(config.data_dir, config.node_id)
    # a dynamic quorum's first voters, from format (KIP-853); else the configured static set
    bootstrap = read_bootstrap_voters(config.data_dir)
    storage = FileStorage(
        config.data_dir,
        segment_bytes=config.log.segment_bytes,
        archive=config.log.archive_segments,
        archive_max_bytes=config.log.archive_max_bytes,
    )
    loaded = await asyncio.to_thread(storage.load)
    now = monotonic_ms()
    core = RaftCore(
        config.node_id,
        bootstrap if bootstrap is not None else config.voter_ids,
        meta.cluster_id,
        config.raft,
        loaded,
        random.Random(),
        now,
        wall_offset_ms=time.time_ns() // 1_000_000 - now,
        directory_id=meta.directory_id,
    )
    endpoints = VoterEndpoints(config.voter_addresses, lambda: core.voter_set)
    address_of = endpoints.address
    # the log's voters may be others than the configured, or elsewhere (KIP-853)
    addresses = {**config.voter_addresses, **endpoints.voters()}
    node: RaftNode
    configured_voters = frozenset(config.voter_ids)
    gate = QuorumGate(lambda n: n in configured_voters or n in node.core.voters)
    if authorizer is None:
        authorizer = Authorizer(config.authorizer.super_users, dict)
    every_rule = node_rules(authorizer, lambda n: gate.is_broker(n) or is_broker(n), rules or {})
    transport = GrpcTransport(
        config.node_id,
        config.listener,
        addresses,
        meta.cluster_id,
        describe=lambda: describe_quorum(node, meta.cluster_id, address_of),
        voter_changes=lambda request: change_voters(node, meta.cluster_id, address_of, request),
        servicers=servicers,
        server_credentials=config.tls.server_credentials if config.tls else None,
        channel_credentials=config.tls.channel_credentials if config.tls else None,
        exchange_gate=gate if config.tls else None,
        interceptors=[PrincipalGate(every_rule)] if config.tls else [],
        connections_max=grpc_connections_max(),
    )
    node = RaftNode(core, storage, transport, state_machine, endpoints=endpoints)
    return node


def node_rules(authorizer: Authorizer, is_broker: Callable[[int], bool], service_rules: Rules) -> Rules:
    """Every rule of a node's gRPC server: the quorum's, health's and reflection's, and
    those of the services the node adds (the controller's, the broker's, the journal's)."""
    return {**quorum_rules(authorizer, is_broker), **HEALTH_RULES, **service_rules}


async def serve_until_signalled(node: RaftNode) -> None:
    """Run until SIGTERM, SIGINT or a fatal node error, then shut the node down (a
    leader resigns first); a fatal error is raised as ServerError."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopped = asyncio.create_task(node.wait_stopped())
    asked = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped, asked}, return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, asked):
        task.cancel()
    fatal = node.fatal_error
    await node.shutdown(graceful=fatal is None)
    if fatal is not None:
        raise ServerError(fatal)


def describe_quorum(
    node: RaftNode, cluster_id: str, address_of: Callable[[int], str]
) -> raft_pb2.DescribeQuorumResponse:
    """The leader's view of every replica, timestamps turned from core time to wall time."""
    core = node.core
    response = raft_pb2.DescribeQuorumResponse(
        cluster_id=cluster_id,
        node_id=core.node_id,
        leader_id=core.leader_id,
        leader_epoch=core.epoch,
        role=core.role_name,
        leader_address=address_of(core.leader_id),
        directory_id=core.directory_id,
        high_watermark=core.high_watermark,
    )
    if not core.is_leader:
        response.error = raft_pb2.RAFT_ERROR_NOT_LEADER
        return response
    description = core.describe()
    response.high_watermark = description.high_watermark

    def wall(ms: int) -> int:
        return ms + core.wall_offset_ms if ms >= 0 else -1

    for target, replicas in (
        (response.voters, description.voters),
        (response.observers, description.observers),
    ):
        for replica in replicas:
            target.add(
                node_id=replica.node_id,
                log_end_offset=replica.log_end_offset,
                last_fetch_timestamp_ms=wall(replica.last_fetch_ms),
                last_caught_up_timestamp_ms=wall(replica.last_caught_up_ms),
                address=address_of(replica.node_id),
                directory_id=replica.directory_id,
            )
    return response
