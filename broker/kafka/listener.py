"""A broker's Kafka listener: every Kafka API it serves, on raw asyncio connections (a
Kafka client's requests cost a frame each, not a gRPC call)."""

from __future__ import annotations

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.cluster_apis import ClusterApis
from raftka.broker.kafka.group_apis import GroupApis
from raftka.broker.kafka.log_apis import LogApis
from raftka.broker.kafka.protocol import KafkaDispatcher
from raftka.node.config import NodeConfig
from raftka.wire.guard import DEFAULT_LIMITS, ConnectionLimits
from raftka.wire.server import Listener


def kafka_listener(api: BrokerApi, config: NodeConfig, limits: ConnectionLimits = DEFAULT_LIMITS) -> Listener:
    apis = [*ClusterApis(api, config).apis(), *LogApis(api).apis(), *GroupApis(api).apis()]
    return Listener(KafkaDispatcher(apis), name="kafka", limits=limits)
