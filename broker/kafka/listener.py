"""A broker's Kafka listener: every Kafka API it serves, on raw asyncio connections (a
Kafka client's requests cost a frame each, not a gRPC call)."""

from __future__ import annotations

from broker.data_service import BrokerApi
from broker.kafka.cluster_apis import ClusterApis
from broker.kafka.group_apis import GroupApis
from broker.kafka.log_apis import LogApis
from broker.kafka.protocol import KafkaDispatcher
from raft.node_config import NodeConfig
from wire.server import Listener


def kafka_listener(api: BrokerApi, config: NodeConfig) -> Listener:
    apis = [*ClusterApis(api, config).apis(), *LogApis(api).apis(), *GroupApis(api).apis()]
    return Listener(KafkaDispatcher(apis), name="kafka")
