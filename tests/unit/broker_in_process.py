"""One real broker in this process for client tests: its replica manager and partition
logs on disk, its group and transaction coordinators (markers to ``MarkerLeaders``), served over the data protocol and Kafka's on
loopback ports (with TLS if given); the controller is ``ControllerInMemory`` and the test
sets the topics' partitions, which the broker leads, with ``followers`` (registered at
broker epoch 1, never fetching unless the test fetches as them) in every ISR."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from raftka.broker.authorization import RequestAuthorizer
from raftka.broker.data_service import BrokerApi
from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.broker.groups.group import GroupLimits
from raftka.broker.kafka.endpoints import KAFKA_LISTENER
from raftka.broker.kafka.listener import kafka_listener
from raftka.broker.log.cleaner.manager import LogCleaner
from raftka.broker.log.manager import LogManager
from raftka.broker.partitions import BrokerPartitions
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.replica.manager import ReplicaManager
from raftka.broker.sasl_logins import data_listener
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.markers import MarkerWriter
from raftka.broker.transactions.peers import PeerBrokers
from raftka.broker.transactions.verifier import CoordinatorVerifier
from raftka.metadata.acls import Authorizer
from raftka.metadata.image import (
    TOPIC,
    BrokerRegistration,
    Endpoint,
    MetadataImage,
    PartitionState,
    TopicImage,
    frozen,
)
from raftka.node.config import BrokerConfig, CleanerConfig, KafkaConfig, NodeConfig
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2
from raftka.wire.frames import DATA_LISTENER
from tests.unit.controller_in_memory import ControllerInMemory

BROKER = 101
INCARNATION = "i"
GROUP_LIMITS = GroupLimits(min_session_timeout_ms=100, initial_rebalance_delay_ms=0)
ONE_BROKER_KAFKA = KafkaConfig(auto_create_topics_enable=False, default_replication_factor=1)
DEFAULT_BROKER_CONFIG = BrokerConfig()
CLEANER_OFF = CleanerConfig(enable=False)


class MarkerLeaders:
    """The partition leaders a transaction coordinator writes markers to, faked: every
    request is kept, and every partition answered ``answer`` (NONE unless a test says)."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, broker_pb2.WriteTxnMarkersRequest]] = []
        self.answer = 0

    async def __call__(
        self, broker_id: int, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        self.requests.append((broker_id, request))
        response = broker_pb2.WriteTxnMarkersResponse()
        for marker in request.markers:
            result = response.markers.add(producer_id=marker.producer_id)
            for topic in marker.topics:
                answered = result.topics.add(name=topic.name)
                for p in topic.partitions:
                    answered.partitions.add(partition=p, error=self.answer)
        return response


class InProcessBroker:
    def __init__(
        self,
        api: BrokerApi,
        controller: ControllerInMemory,
        port: int,
        kafka_port: int,
        followers: tuple[int, ...],
        markers: MarkerLeaders,
        cleaner: LogCleaner,
    ) -> None:
        self.api = api
        self.cleaner = cleaner
        self.markers = markers
        self.replicas = api.replicas
        self.controller = controller
        self.followers = followers
        self.address = f"127.0.0.1:{port}"
        self.kafka_address = f"127.0.0.1:{kafka_port}"
        self._endpoints = (
            Endpoint(DATA_LISTENER, "127.0.0.1", port),
            Endpoint(KAFKA_LISTENER, "127.0.0.1", kafka_port),
        )
        self._partitions = BrokerPartitions(BROKER, INCARNATION)

    def adopt(self, image: MetadataImage) -> None:
        self.replicas.apply(image, self._partitions.update(image))

    def set_topics(self, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
        """Topic name -> partition count, all led by this broker (ids derive from the name)."""
        replicas = (BROKER, *self.followers)
        state = PartitionState(
            replicas=replicas, isr=replicas, leader=BROKER, leader_epoch=0, partition_epoch=0
        )
        ids = {name: uuid.uuid5(uuid.NAMESPACE_OID, name).bytes for name in topics}
        brokers = {b: BrokerRegistration(b, f"i{b}", 1, (), "", False) for b in self.followers}
        brokers[BROKER] = BrokerRegistration(BROKER, INCARNATION, 1, self._endpoints, "", False)
        image = MetadataImage(
            offset=self.controller.image.offset + 1,
            brokers=frozen(brokers),
            topics_by_id=frozen(
                {
                    ids[n]: TopicImage(n, ids[n], frozen(dict.fromkeys(range(c), state)))
                    for n, c in topics.items()
                }
            ),
            topic_ids_by_name=frozen(ids),
            configs=frozen({(TOPIC, n): frozen(v) for n, v in (configs or {}).items()}),
            offsets=self.controller.image.offsets,
            groups=self.controller.image.groups,
            client_quotas=self.controller.image.client_quotas,
            scram_credentials=self.controller.image.scram_credentials,
            transactions=self.controller.image.transactions,
            txn_offsets=self.controller.image.txn_offsets,
        )
        self.replicas.apply(image, self._partitions.update(image))
        self.controller.set_image(image)

    def follow_controller(self) -> None:
        """Replay what the controller in memory has committed (SCRAM credentials written
        through it), as a broker following the metadata log would."""
        image = self.controller.image
        self.replicas.apply(image, self._partitions.update(image))


@contextlib.asynccontextmanager
async def broker_in_process(
    tmp_path: Path,
    topics: dict[str, int],
    configs: dict[str, dict[str, str]] | None = None,
    kafka_config: KafkaConfig = ONE_BROKER_KAFKA,
    broker_config: BrokerConfig = DEFAULT_BROKER_CONFIG,
    tls: TlsFiles | None = None,
    followers: tuple[int, ...] = (),
    transactions_for_real: bool = False,
    authorizer: Authorizer | None = None,
    log_cleaner: CleanerConfig = CLEANER_OFF,
) -> AsyncIterator[InProcessBroker]:
    """``transactions_for_real``: the coordinator's markers go to this broker's own
    WriteTxnMarkers, and its partitions verify transactional batches with the coordinator
    (KIP-890); else markers go to ``MarkerLeaders`` and every batch is taken.
    ``authorizer``: the broker judges every request by it (as with TLS); none: off.
    ``log_cleaner``: the broker's ``[log.cleaner]``, its cleaner built and started as the
    data plane does (off unless a test turns it on)."""
    logs = LogManager(tmp_path)
    logs.open_all()
    replicas = ReplicaManager(
        BROKER,
        logs,
        broker_config,
        request_isr_change=lambda p, isr: None,
        on_follow=lambda p: None,
        on_stop_following=lambda p: None,
        high_watermarks={},
    )
    cleaner = LogCleaner(tmp_path, log_cleaner, logs.cleaner_candidates(replicas.high_watermarks))
    controller = ControllerInMemory(MetadataImage())
    groups = GroupCoordinator(BROKER, lambda: 1, GROUP_LIMITS, controller, 4096)  # type: ignore[arg-type]
    controller.listeners.append(groups.update)
    producer_ids = ProducerIdManager(controller, BROKER, lambda: 1)  # type: ignore[arg-type]
    markers = MarkerLeaders()
    transactions = TransactionCoordinator(
        BROKER,
        lambda: 1,
        controller,  # type: ignore[arg-type]
        producer_ids,
        MarkerWriter(
            (lambda _, request: api.write_txn_markers(request)) if transactions_for_real else markers,
            lambda: controller.image,
            BROKER,
            lambda: 1,
        ),
        wall_clock_ms=lambda: controller.wall_clock_ms,
    )
    controller.listeners.append(transactions.update)
    api = BrokerApi(
        replicas,
        groups,
        controller,  # type: ignore[arg-type]
        "c",
        lambda: 1,
        producer_ids,
        transactions,
        RequestAuthorizer(authorizer),
    )
    if transactions_for_real:
        replicas.verifier = CoordinatorVerifier(
            transactions, lambda: controller.image, PeerBrokers(lambda: controller.image, None)
        )
    config = NodeConfig(
        BROKER,
        tmp_path,
        (),
        "127.0.0.1:1",
        process_roles=("broker",),
        broker=broker_config,
        kafka=kafka_config,
    )
    server = data_listener(api, config)
    port = await server.start("127.0.0.1", 0, tls.listener_ssl(server.login is not None) if tls else None)
    kafka = kafka_listener(api, config)
    kafka_port = await kafka.start("127.0.0.1", 0, tls.listener_ssl(kafka.login is not None) if tls else None)
    coordinating = asyncio.create_task(groups.run())
    completing = asyncio.create_task(transactions.run())
    broker = InProcessBroker(api, controller, port, kafka_port, followers, markers, cleaner)
    controller.listeners.append(broker.adopt)  # quotas altered through it reach the broker
    controller.listeners.append(lambda image: api.sasl_sessions.credentials_changed(image.scram_credentials))
    broker.set_topics(topics, configs)
    cleaner.start()
    try:
        yield broker
    finally:
        await cleaner.stop()
        coordinating.cancel()
        completing.cancel()
        await groups.close()
        await transactions.close()
        await kafka.close()
        await server.close()
        logs.close()
