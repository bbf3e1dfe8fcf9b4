"""One broker process: a Raft observer of the metadata log, its partition logs, and its
lifecycle.

The broker runs the same RaftCore as the controllers, with a node id outside the voter
set, so it only fetches the metadata log (and snapshots) from the leader and never
votes. Committed batches are replayed into a ``MetadataStateMachine``; every new image
becomes role changes in ``BrokerPartitions``, which the replica manager turns into
leaders and followers of partition logs, once the image holds this process's own
registration unfenced (until then produce and fetch are answered NOT_LEADER_OR_FOLLOWER);
the lifecycle task registers the broker and heartbeats the active controller. The data
API (``raftka.broker.data_service``) is served on the broker's data listener
(``broker.data_listener``, the raw-TCP data protocol of ``wire``) for producers,
consumers and followers, on its Kafka listener (``kafka.listener``,
``raftka.broker.kafka``) for Kafka's own clients, and on the node's gRPC server for tools.

SIGTERM or SIGINT is a controlled shutdown: the broker heartbeats ``want_shut_down``
until the controller has moved its leaderships away, waiting at most
``CONTROLLED_SHUTDOWN_TIMEOUT_S`` (a controller that cannot answer must not keep a
broker from stopping), then stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Iterator

import structlog

from raftka.broker import wiped_replicas
from raftka.broker.authorization import BROKER_SERVICE_RULES, RequestAuthorizer
from raftka.broker.controller_link import ControllerLink
from raftka.broker.data_service import BrokerApi, BrokerService
from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.broker.groups.group import GroupLimits
from raftka.broker.kafka.endpoints import KAFKA_EXTERNAL_LISTENER, KAFKA_LISTENER
from raftka.broker.kafka.listener import kafka_listener
from raftka.broker.lifecycle import BrokerLifecycle, State, new_incarnation_id, registration_in
from raftka.broker.log.cleaner.manager import LogCleaner
from raftka.broker.log.cleaner.metrics import CleanerCollector
from raftka.broker.log.flusher import BackgroundFlusher
from raftka.broker.log.manager import LogManager
from raftka.broker.metrics import BrokerCollector
from raftka.broker.offline_report import OfflineReport
from raftka.broker.partitions import BrokerPartitions, RoleChanges
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.quota.metrics import QuotaCollector
from raftka.broker.replica.fetcher import ReplicaFetchers
from raftka.broker.replica.isr import IsrChanges
from raftka.broker.replica.manager import ReplicaManager
from raftka.broker.replica.throttle import FOLLOWER, ReplicationQuota
from raftka.broker.sasl_logins import data_listener
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.markers import DataListenerLeaders, MarkerWriter
from raftka.broker.transactions.peers import PeerBrokers
from raftka.broker.transactions.verifier import CoordinatorVerifier
from raftka.metadata.acls import Authorizer
from raftka.metadata.image import MetadataImage
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.metadata.validation import GROUP_MEMBERS_MAX
from raftka.node.assembly import ServerError, open_node
from raftka.node.config import BrokerConfig, NodeConfig, parse_host_port
from raftka.node.descriptors import DESCRIPTORS, raise_open_files_limit
from raftka.node.health import NodeHealth
from raftka.node.logs import configure_logging
from raftka.node.metrics_endpoint import MetricsEndpoint, serve_metrics
from raftka.raft.driver import RaftNode
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.metrics import RaftCollector
from raftka.v1 import broker_pb2, broker_pb2_grpc, metadata_pb2
from raftka.wire.frames import DATA_LISTENER
from raftka.wire.guard import ConnectionLimits
from raftka.wire.guard_metrics import ListenerCollector
from raftka.wire.server import Listener

PARTITIONS_DIR = "partitions"  # under data_dir, beside the metadata log
FLUSH_CHECK_INTERVAL_MS = (
    1_000  # how often logs are checked against their flush.ms (Kafka's scheduler: 1 s too)
)
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0  # within `raftka cluster down`'s grace before SIGKILL
CONTROLLER_REQUEST_TIMEOUT_S = 2.0
GRPC_LISTENER = "GRPC"  # the node's gRPC server: the Broker service for tools
ROLE_CHANGES_LOGGED_MAX = 10  # partitions named in one INFO line; the rest are counted

log = structlog.get_logger("raftka.broker.server")


class Broker:
    """A started broker: its raft node, image, partition roles, replicas and lifecycle."""

    def __init__(
        self,
        node: RaftNode,
        state_machine: MetadataStateMachine,
        partitions: BrokerPartitions,
        lifecycle: BrokerLifecycle,
        link: ControllerLink,
        data: DataPlane,
        health: NodeHealth,
        metrics: MetricsEndpoint | None = None,
    ) -> None:
        self.node = node
        self.metrics = metrics  # None: metrics.port is 0
        self.state_machine = state_machine
        self.partitions = partitions
        self.lifecycle = lifecycle
        self.data = data
        self.health = health
        self._link = link
        self.lifecycle_task = asyncio.create_task(
            lifecycle.run(), name=f"broker-{lifecycle.broker_id}-lifecycle"
        )

    @property
    def image(self) -> MetadataImage:
        return self.state_machine.image

    async def controlled_shutdown(self, timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> bool:
        """Hand leaderships over, then stop; False if the controller did not confirm in time."""
        self.health.shut_down()
        self.lifecycle.request_shutdown()
        try:
            await asyncio.wait_for(asyncio.shield(self.lifecycle_task), timeout_s)
        except TimeoutError:
            log.warning("controlled shutdown not confirmed in time; stopping anyway", timeout_s=timeout_s)
            return False
        return self.lifecycle.state is State.STOPPED

    async def close(self) -> None:
        self.health.shut_down()
        self.lifecycle_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.lifecycle_task
        if self.metrics is not None:
            await self.metrics.close()
        await self.data.close()
        await self._link.close()
        await self.node.shutdown(graceful=True)


class DataPlane:
    """The partition logs and their replication, the group coordinator, and the periodic
    work they need."""

    def __init__(
        self,
        config: NodeConfig,
        link: ControllerLink,
        broker_epoch: Callable[[], int],
        on_offline_changed: Callable[[], None],
    ) -> None:
        """``on_offline_changed``: the partitions offline on this broker changed (``offline``)."""
        broker = config.broker
        self._broker_epoch = broker_epoch
        if broker.group_max_size > GROUP_MEMBERS_MAX:
            raise ServerError(
                f"broker.group_max_size: at most {GROUP_MEMBERS_MAX} (a rebalance is one metadata record), "
                f"got {broker.group_max_size}"
            )
        self.groups = GroupCoordinator(
            config.node_id,
            broker_epoch,
            GroupLimits(
                min_session_timeout_ms=broker.group_min_session_timeout_ms,
                max_session_timeout_ms=broker.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=broker.group_initial_rebalance_delay_ms,
                max_size=broker.group_max_size,
            ),
            link,
            config.raft.append_max_records,
        )
        self.logs = LogManager(
            config.data_dir / PARTITIONS_DIR, BackgroundFlusher(asyncio.get_running_loop())
        )
        self.logs.open_all()
        self.cleaner = LogCleaner(
            config.data_dir / PARTITIONS_DIR,
            config.log_cleaner,
            self.logs.cleaner_candidates(lambda: self.replicas.high_watermarks()),
        )
        self.fetchers = ReplicaFetchers(
            config.node_id,
            self._address,
            config.broker,
            broker_epoch,
            lambda partitions, then: self.replicas.truncated(partitions, then),
            config.tls.client_ssl if config.tls else None,
            ReplicationQuota(FOLLOWER, config.node_id, lambda: self.replicas.image),
        )
        self.listeners: list[Listener] = []
        self.isr_changes = IsrChanges(
            link, config.node_id, broker_epoch, lambda p: self.replicas.isr_change_done(p)
        )
        self.replicas = ReplicaManager(
            config.node_id,
            self.logs,
            config.broker,
            request_isr_change=self.isr_changes.request,
            on_follow=self.fetchers.follow,
            on_stop_following=self.fetchers.stop_following,
            high_watermarks=self.logs.read_high_watermarks(),
            on_offline_changed=on_offline_changed,
        )
        self.producer_ids = ProducerIdManager(link, config.node_id, broker_epoch)
        self.peers = PeerBrokers(lambda: self.replicas.image, config.tls.client_ssl if config.tls else None)
        self.transactions = TransactionCoordinator(
            config.node_id,
            broker_epoch,
            link,
            self.producer_ids,
            MarkerWriter(
                DataListenerLeaders(self.peers), lambda: self.replicas.image, config.node_id, broker_epoch
            ),
            max_timeout_ms=broker.transaction_max_timeout_ms,
            abort_check_interval_s=broker.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
        )
        self.replicas.verifier = CoordinatorVerifier(
            self.transactions, lambda: self.replicas.image, self.peers
        )
        self._producer_id_expiration_ms = config.broker.producer_id_expiration_ms
        self.cleaner.start()
        self._tasks = [
            asyncio.create_task(self.isr_changes.run(), name="isr-changes"),
            asyncio.create_task(self.groups.run(), name="group-coordinator"),
            asyncio.create_task(self.transactions.run(), name="transaction-coordinator"),
            _every(broker.replica_lag_time_max_ms / 2, self.replicas.shrink_isrs, "isr-expiration"),
            _every(broker.replica_high_watermark_checkpoint_interval_ms, self._checkpoint, "hw-checkpoint"),
            _every(broker.log_retention_check_interval_ms, self._apply_retention, "log-retention"),
            _every(FLUSH_CHECK_INTERVAL_MS, self.logs.flush_due, "log-flush"),
            _every(
                broker.producer_id_expiration_check_interval_ms, self._expire_producers, "producer-expiration"
            ),
        ]

    async def serve(self, api: BrokerApi, config: NodeConfig) -> None:
        """Listen for raftka's data protocol and, if configured, Kafka's."""
        limits = connection_limits(config.broker)
        wanted = [("broker.data_listener", config.broker.data_listener, data_listener(api, config, limits))]
        if config.kafka.listener:
            wanted.append(("kafka.listener", config.kafka.listener, kafka_listener(api, config, limits)))
        if config.kafka.external_listener:
            external = kafka_listener(api, config, limits, "kafka-external")
            wanted.append(("kafka.external_listener", config.kafka.external_listener, external))
        for key, address, listener in wanted:
            host, port = parse_host_port(address, key)
            try:
                tls = config.tls.listener_ssl(listener.login is not None) if config.tls else None
                await listener.start(host, port, tls)
            except OSError as e:
                raise ServerError(f"{key}: cannot listen on {address}: {e.strerror or e}") from None
            self.listeners.append(listener)

    def offline(self) -> Iterator[tuple[bytes, int]]:
        """(topic id, partition) of each partition whose log failed here: taken offline by
        the replica manager, or stopped by its fetcher."""
        for (_, partition), offline in self.replicas.offline().items():
            yield offline.topic_id, partition
        for failed in self.fetchers.failed():
            yield failed.topic_id, failed.partition

    def _address(self, broker_id: int) -> str | None:
        broker = self.replicas.image.brokers.get(broker_id)
        endpoint = None if broker is None else broker.endpoint(DATA_LISTENER)
        return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"

    def _checkpoint(self) -> None:
        self.logs.write_high_watermarks(self.replicas.high_watermarks())
        self.logs.checkpoint_recovery_points()

    def _apply_retention(self) -> None:
        self.logs.apply_retention(int(time.time() * 1000), self.replicas.high_watermarks())

    def _expire_producers(self) -> None:
        self.logs.expire_producers(int(time.time() * 1000), self._producer_id_expiration_ms)

    async def close(self) -> None:
        for listener in self.listeners:
            await listener.close()
        await self.groups.close()
        await self.transactions.close()
        self.peers.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.producer_ids.close()
        await self.fetchers.close()
        self.replicas.close()
        await self.cleaner.stop()
        self.logs.write_high_watermarks(self.replicas.high_watermarks())
        self.logs.close(self._broker_epoch())


def connection_limits(broker: BrokerConfig) -> ConnectionLimits:
    return ConnectionLimits(
        connections_max=broker.max_connections,
        connections_per_ip_max=broker.max_connections_per_ip,
        idle_ms=broker.connections_max_idle_ms,
        partial_request_ms=broker.connections_partial_request_timeout_ms,
        buffered_bytes_max=broker.connections_buffered_bytes_max,
        answer_bytes_max=broker.connections_answer_bytes_max,
    )


def _every(interval_ms: float, work: Callable[[], None], name: str) -> asyncio.Task:
    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            work()

    return asyncio.create_task(loop(), name=name)


async def start_broker(config: NodeConfig) -> Broker:
    """Recover storage, start following the metadata log, and start the lifecycle."""
    if config.node_id in config.voter_ids:
        raise ServerError(f"node_id: a broker's id must not be a voter, got {config.node_id}")
    node: RaftNode
    lifecycle: BrokerLifecycle
    state_machine = MetadataStateMachine(config.metadata, lambda snapshot: node.save_snapshot(snapshot))
    incarnation_id = new_incarnation_id()
    partitions = BrokerPartitions(config.node_id, incarnation_id)
    link = ControllerLink(
        VoterEndpoints(config.voter_addresses, lambda: node.core.voter_set),
        lambda: node.leadership.leader_id,
        CONTROLLER_REQUEST_TIMEOUT_S,
        config.tls,
    )
    data = DataPlane(config, link, lambda: lifecycle.broker_epoch, lambda: lifecycle.offline_changed())
    roles_log = log.bind(node_id=config.node_id, role="broker")  # runs in raft's callbacks: bind here

    def adopt(image: MetadataImage) -> None:
        changes = partitions.update(image)
        if changes.started:
            roles_log.info("registered and unfenced: serving partitions", offset=image.offset)
        log_role_changes(roles_log, changes)
        data.replicas.apply(image, changes)
        data.groups.update(image)
        data.transactions.update(image)

    state_machine.add_listener(adopt)
    api: BrokerApi
    health = NodeHealth(config.node_id, [broker_pb2.DESCRIPTOR.services_by_name["Broker"]])
    authorizer = Authorizer(
        config.authorizer.super_users,
        lambda: state_machine.image.acls,
        config.authorizer.allow_everyone_if_no_acl_found,
    )
    node = await open_node(
        config,
        state_machine,
        [
            lambda server: broker_pb2_grpc.add_BrokerServicer_to_server(BrokerService(api), server),
            health.add_to_server,
        ],
        BROKER_SERVICE_RULES,
        authorizer,
        is_broker=lambda node_id: node_id in state_machine.image.brokers,
    )
    api = BrokerApi(
        data.replicas,
        data.groups,
        link,
        node.cluster_id,
        lambda: node.leadership.leader_id,
        data.producer_ids,
        data.transactions,
        RequestAuthorizer(authorizer if config.tls else None),  # plaintext: no principal to judge
    )
    state_machine.add_listener(lambda image: api.sasl_sessions.credentials_changed(image.scram_credentials))
    endpoints = [  # what clients and other brokers are told: each listener's advertised address
        _endpoint(DATA_LISTENER, config.broker.advertised_data_listener),
        _endpoint(GRPC_LISTENER, config.advertised_listener),
    ]
    if config.kafka.listener:
        endpoints.append(_endpoint(KAFKA_LISTENER, config.kafka.advertised_listener))
    if config.kafka.external_listener:
        endpoints.append(_endpoint(KAFKA_EXTERNAL_LISTENER, config.kafka.advertised_external_listener))
    lifecycle = BrokerLifecycle(
        config.node_id,
        endpoints,
        config.broker.rack,
        config.broker.heartbeat_interval_ms,
        link,
        lambda: state_machine.image.offset - 1,  # the last offset replayed (image.offset is the next)
        incarnation_id,
        on_state=lambda state: health.set_serving(state is State.RUNNING),
        offline_replicas=OfflineReport(data.offline),
        previous_broker_epoch=data.logs.clean_shutdown_epoch,
        log_dir_id=data.logs.directory_id,
        wiped_replicas=OfflineReport(
            lambda: wiped_replicas.wiped(state_machine.image, config.node_id, data.logs.found_at_start),
            "more partitions wiped than a heartbeat may report; the rest go in the next ones",
        ),
        registration=lambda epoch: registration_in(state_machine.image, config.node_id, epoch),
    )
    await node.start()
    try:
        await data.serve(api, config)
        collectors = [
            RaftCollector(node),
            BrokerCollector(data.replicas, data.isr_changes, data.fetchers),
            CleanerCollector(data.cleaner),
            QuotaCollector(api.quotas),
            ListenerCollector(lambda: [listener.guard for listener in data.listeners]),
            DESCRIPTORS,
        ]
        metrics = await serve_metrics(config, collectors)
    except ServerError:
        await data.close()
        await node.shutdown(graceful=False)
        raise
    return Broker(node, state_machine, partitions, lifecycle, link, data, health, metrics)


def _advertised(config: NodeConfig) -> dict[str, str]:
    """Each listener's advertised address where it is not the listener's own."""
    pairs = {
        "listener": (config.listener, config.advertised_listener),
        "data_listener": (config.broker.data_listener, config.broker.advertised_data_listener),
        "kafka_listener": (config.kafka.listener, config.kafka.advertised_listener),
        "kafka_external_listener": (
            config.kafka.external_listener,
            config.kafka.advertised_external_listener,
        ),
    }
    return {name: advertised for name, (bound, advertised) in pairs.items() if advertised != bound}


def _endpoint(name: str, address: str) -> metadata_pb2.BrokerEndpoint:
    host, port = parse_host_port(address, name)
    return metadata_pb2.BrokerEndpoint(name=name, host=host, port=port)


async def run_broker(config: NodeConfig) -> None:
    configure_logging(config.logging.level, config.logging.format, node_id=config.node_id, role="broker")
    raise_open_files_limit()
    broker = await start_broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "broker listening",
        data_listener=config.broker.data_listener,
        kafka_listener=config.kafka.listener or None,
        kafka_external_listener=config.kafka.external_listener or None,
        listener=config.listener,
        advertised=_advertised(config),
        incarnation_id=broker.lifecycle.incarnation_id,
    )
    stopped = asyncio.create_task(broker.node.wait_stopped())
    asked = asyncio.create_task(stop.wait())
    await asyncio.wait({stopped, asked, broker.lifecycle_task}, return_when=asyncio.FIRST_COMPLETED)
    for task in (stopped, asked):
        task.cancel()
    problem = broker.node.fatal_error
    if problem is None and broker.lifecycle_task.done():
        error = broker.lifecycle_task.exception()
        problem = f"lifecycle task failed: {error!r}" if error else "lifecycle task ended"
        if error is None and broker.lifecycle.state is State.UNREGISTERED:
            problem = (
                f"broker {config.node_id} was unregistered (raftka brokers unregister); "
                "started again it registers as a new broker"
            )
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
