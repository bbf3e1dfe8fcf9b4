"""One broker process: a Raft observer of the metadata log, its image, and its lifecycle.

The broker runs the same RaftCore as the controllers, with a node id outside the voter
set, so it only fetches the metadata log (and snapshots) from the leader and never
votes. Committed batches are replayed into a ``MetadataStateMachine``; every new image
becomes role changes in ``BrokerPartitions`` (the data plane's hook); the lifecycle
task registers the broker and heartbeats the active controller.

SIGTERM or SIGINT is a controlled shutdown: the broker heartbeats ``want_shut_down``
until the controller has moved its leaderships away, waiting at most
``CONTROLLED_SHUTDOWN_TIMEOUT_S`` (a controller that cannot answer must not keep a
broker from stopping), then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import structlog
from raftka.v1 import metadata_pb2

from broker.controller_link import ControllerLink
from broker.lifecycle import BrokerLifecycle, State
from broker.partitions import BrokerPartitions, RoleChanges
from metadata.image import MetadataImage
from metadata.state_machine import MetadataStateMachine
from raft.driver import RaftNode
from raft.logs import configure_logging
from raft.node_config import NodeConfig, parse_host_port
from raft.server import ServerError, open_node

CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0  # within `raftka cluster down`'s grace before SIGKILL
CONTROLLER_REQUEST_TIMEOUT_S = 2.0
LISTENER_NAME = "PLAINTEXT"
ROLE_CHANGES_LOGGED_MAX = 10  # partitions named in one INFO line; the rest are counted

log = structlog.get_logger("broker.server")


class Broker:
    """A started broker: its raft node, image, partition roles and lifecycle."""

    def __init__(
        self,
        node: RaftNode,
        state_machine: MetadataStateMachine,
        partitions: BrokerPartitions,
        lifecycle: BrokerLifecycle,
        link: ControllerLink,
    ) -> None:
        self.node = node
        self.state_machine = state_machine
        self.partitions = partitions
        self.lifecycle = lifecycle
        self._link = link
        self.lifecycle_task = asyncio.create_task(
            lifecycle.run(), name=f"broker-{lifecycle.broker_id}-lifecycle"
        )

    @property
    def image(self) -> MetadataImage:
        return self.state_machine.image

    async def controlled_shutdown(self, timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> bool:
        """Hand leaderships over, then stop; False if the controller did not confirm in time."""
        self.lifecycle.request_shutdown()
        try:
            await asyncio.wait_for(asyncio.shield(self.lifecycle_task), timeout_s)
        except TimeoutError:
            log.warning("controlled shutdown not confirmed in time; stopping anyway", timeout_s=timeout_s)
            return False
        return self.lifecycle.state is State.STOPPED

    async def close(self) -> None:
        self.lifecycle_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.lifecycle_task
        await self._link.close()
        await self.node.shutdown(graceful=True)


async def start_broker(config: NodeConfig) -> Broker:
    """Recover storage, start following the metadata log, and start the lifecycle."""
    if config.node_id in config.voter_ids:
        raise ServerError(f"node_id: a broker's id must not be a voter, got {config.node_id}")
    addresses = config.voter_addresses
    node: RaftNode
    state_machine = MetadataStateMachine(config.metadata, lambda snapshot: node.save_snapshot(snapshot))
    partitions = BrokerPartitions(config.node_id)
    roles_log = log.bind(node_id=config.node_id, role="broker")  # runs in raft's callbacks: bind here
    state_machine.add_listener(lambda image: log_role_changes(roles_log, partitions.update(image)))
    node = await open_node(config, state_machine)
    await node.start()
    link = ControllerLink(addresses, lambda: node.leadership.leader_id, CONTROLLER_REQUEST_TIMEOUT_S)
    host, port = parse_host_port(config.listener, "listener")
    lifecycle = BrokerLifecycle(
        config.node_id,
        [metadata_pb2.BrokerEndpoint(name=LISTENER_NAME, host=host, port=port)],
        config.broker.rack,
        config.broker.heartbeat_interval_ms,
        link,
        lambda: state_machine.image.offset - 1,  # the last offset replayed (image.offset is the next)
    )
    return Broker(node, state_machine, partitions, lifecycle, link)


async def run_broker(config: NodeConfig) -> None:
    configure_logging(config.logging.level, config.logging.format, node_id=config.node_id, role="broker")
    broker = await start_broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("broker listening", listener=config.listener, incarnation_id=broker.lifecycle.incarnation_id)
    stopped = asyncio.create_task(broker.node.wait_stopped())
    asked = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped, asked, broker.lifecycle_task}, return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, asked):
        task.cancel()
    problem = broker.node.fatal_error
    if problem is None and broker.lifecycle_task.done():
        error = broker.lifecycle_task.exception()
        problem = f"lifecycle task failed: {error!r}" if error else "lifecycle task ended"
    if problem is None:
        await broker.controlled_shutdown()
    await broker.close()
    log.info("broker stopped")
    if problem is not None:
        raise ServerError(problem)


def log_role_changes(logger: structlog.typing.FilteringBoundLogger, changes: RoleChanges) -> None:
    """One INFO line per image that changed roles; each partition at DEBUG."""
    if not changes:
        return
    for role in (*changes.leading, *changes.following):
        logger.debug(
            "partition role",
            partition=role.name,
            partition_role=role.role.value,
            leader=role.leader,
            leader_epoch=role.leader_epoch,
        )
    for gone in changes.stopped:
        logger.debug("partition stopped", partition=gone.name, deleted=gone.deleted)

    def sample(names: list[str]) -> list[str]:
        return names[:ROLE_CHANGES_LOGGED_MAX]

    logger.info(
        "partition roles changed",
        leading=len(changes.leading),
        following=len(changes.following),
        stopped=len(changes.stopped),
        became_leader=sample([r.name for r in changes.leading]),
        became_follower=sample([r.name for r in changes.following]),
        stopped_serving=sample([s.name for s in changes.stopped]),
    )
