"""One controller process: a Raft voter whose state machine is the metadata image, and
the QuorumController, served with the Raft service on the node's listener.

``raftka server --config FILE`` with ``process_roles = ["controller"]`` runs this until
SIGTERM or SIGINT; a leader then resigns with EndQuorumEpoch, so another controller takes
over in one round trip instead of an election timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass

import structlog
from raftka.v1 import controller_pb2_grpc

from metadata.controller import QuorumController
from metadata.service import ControllerService
from metadata.state_machine import MetadataStateMachine
from raft.core import RaftCore
from raft.driver import RaftNode, monotonic_ms
from raft.logs import configure_logging
from raft.node_config import NodeConfig
from raft.server import describe_quorum, serve_until_signalled
from raft.storage.file import FileStorage
from raft.storage.meta import check_meta
from raft.transport.grpc_transport import GrpcTransport


@dataclass(frozen=True, slots=True)
class ControllerNode:
    """A started controller: its raft driver, its image and the controller logic."""

    node: RaftNode
    state_machine: MetadataStateMachine
    controller: QuorumController
    cluster_id: str
    ticker: asyncio.Task[None]

    async def shutdown(self, *, graceful: bool = True) -> None:
        self.ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.ticker
        await self.node.shutdown(graceful=graceful)


async def start_controller(config: NodeConfig) -> ControllerNode:
    """Recover storage, build core, transport, image and controller, and start serving."""
    meta = check_meta(config.data_dir, config.node_id)
    storage = FileStorage(
        config.data_dir, segment_bytes=config.log.segment_bytes, archive=config.log.archive_segments
    )
    loaded = await asyncio.to_thread(storage.load)
    now = monotonic_ms()
    core = RaftCore(
        config.node_id,
        config.voter_ids,
        meta.cluster_id,
        config.raft,
        loaded,
        random.Random(),
        now,
        wall_offset_ms=time.time_ns() // 1_000_000 - now,
    )
    addresses = config.voter_addresses
    node: RaftNode
    state_machine = MetadataStateMachine(
        config.metadata.snapshot_interval_records, lambda snapshot: node.save_snapshot(snapshot)
    )
    transport = GrpcTransport(
        config.node_id,
        config.listener,
        addresses,
        meta.cluster_id,
        describe=lambda: describe_quorum(node, meta.cluster_id, addresses),
        servicers=[lambda server: controller_pb2_grpc.add_ControllerServicer_to_server(service, server)],
    )
    node = RaftNode(core, storage, transport, state_machine)
    controller = QuorumController(
        node,
        state_machine,
        cluster_id=meta.cluster_id,
        addresses=addresses,
        session_timeout_ms=config.controller.session_timeout_ms,
        max_partitions_per_topic=config.controller.max_partitions_per_topic,
    )
    service = ControllerService(controller)
    await node.start()
    return ControllerNode(
        node, state_machine, controller, meta.cluster_id, asyncio.create_task(controller.run())
    )


async def run_controller(config: NodeConfig) -> None:
    configure_logging(config.logging.level, config.logging.format, node_id=config.node_id, role="controller")
    log = structlog.get_logger("metadata.server")
    started = await start_controller(config)
    log.info("controller listening", listener=config.listener, cluster_id=started.cluster_id)
    try:
        await serve_until_signalled(started.node)
    finally:
        started.ticker.cancel()
    log.info("controller stopped")
