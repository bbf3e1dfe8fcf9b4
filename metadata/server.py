"""One controller process: a Raft voter whose state machine is the metadata image, and
the QuorumController, served with the Raft service on the node's listener.

``raftka server --config FILE`` with ``process_roles = ["controller"]`` runs this until
SIGTERM or SIGINT; a leader then resigns with EndQuorumEpoch, so another controller takes
over in one round trip instead of an election timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import structlog

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.metadata.authorization import controller_rules, may
from raftka.metadata.controller import QuorumController
from raftka.metadata.metrics import ControllerCollector, EventQueueProbe
from raftka.metadata.service import ControllerService
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.node.assembly import ServerError, open_node, serve_until_signalled
from raftka.node.config import NodeConfig
from raftka.node.descriptors import DESCRIPTORS, raise_open_files_limit
from raftka.node.health import NodeHealth
from raftka.node.logs import configure_logging
from raftka.node.metrics_endpoint import MetricsEndpoint, serve_metrics
from raftka.raft.driver import RaftNode
from raftka.raft.metrics import RaftCollector
from raftka.v1 import controller_pb2, controller_pb2_grpc


@dataclass(frozen=True, slots=True)
class ControllerNode:
    """A started controller: its raft driver, its image and the controller logic."""

    node: RaftNode
    state_machine: MetadataStateMachine
    controller: QuorumController
    cluster_id: str
    ticker: asyncio.Task[None]
    metrics: MetricsEndpoint | None = None  # None: metrics.port is 0

    async def shutdown(self, *, graceful: bool = True) -> None:
        self.ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.ticker
        if self.metrics is not None:
            await self.metrics.close()
        await self.node.shutdown(graceful=graceful)


async def start_controller(config: NodeConfig) -> ControllerNode:
    """Recover storage, build core, transport, image and controller, and start serving."""
    node: RaftNode
    state_machine = MetadataStateMachine(config.metadata, lambda snapshot: node.save_snapshot(snapshot))
    health = NodeHealth(config.node_id, [controller_pb2.DESCRIPTOR.services_by_name["Controller"]])
    authorizer = Authorizer(
        config.authorizer.super_users,
        lambda: state_machine.image.acls,
        config.authorizer.allow_everyone_if_no_acl_found,
    )
    node = await open_node(
        config,
        state_machine,
        [
            lambda server: controller_pb2_grpc.add_ControllerServicer_to_server(service, server),
            health.add_to_server,
        ],
        controller_rules(authorizer),
        authorizer,
        is_broker=lambda node_id: node_id in state_machine.image.brokers,
    )
    node.add_caught_up_listener(health.set_serving)  # and NOT_SERVING from the start of a shutdown
    controller = QuorumController(
        node,
        state_machine,
        cluster_id=node.cluster_id,
        address_of=node.endpoints.address,
        session_timeout_ms=config.controller.session_timeout_ms,
        max_partitions_per_topic=config.controller.max_partitions_per_topic,
        offsets_retention_ms=config.controller.offsets_retention_minutes * 60_000,
        transactional_id_expiration_ms=config.controller.transactional_id_expiration_ms,
        leader_rebalance_interval_ms=config.controller.leader_rebalance_interval_ms,
        disconnect_fence_ms=config.controller.disconnect_fence_ms,
    )
    service = ControllerService(
        controller, may(authorizer, acls.DESCRIBE), may(authorizer, acls.DESCRIBE_CONFIGS)
    )
    await node.start()
    probe = EventQueueProbe()
    try:
        metrics = await serve_metrics(
            config,
            [RaftCollector(node), ControllerCollector(controller, state_machine, probe), DESCRIPTORS],
            [probe.run],
        )
    except ServerError:
        await node.shutdown(graceful=False)
        raise
    return ControllerNode(
        node, state_machine, controller, node.cluster_id, asyncio.create_task(controller.run()), metrics
    )


async def run_controller(config: NodeConfig) -> None:
    configure_logging(config.logging.level, config.logging.format, node_id=config.node_id, role="controller")
    raise_open_files_limit()
    log = structlog.get_logger("raftka.metadata.server")
    started = await start_controller(config)
    log.info("controller listening", listener=config.listener, cluster_id=started.cluster_id)
    try:
        await serve_until_signalled(started.node)
    finally:
        started.ticker.cancel()
        if started.metrics is not None:
            await started.metrics.close()
    log.info("controller stopped")
