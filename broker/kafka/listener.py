"""A broker's Kafka listener: every Kafka API it serves, on raw asyncio connections (a
Kafka client's requests cost a frame each, not a gRPC call)."""

from __future__ import annotations

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.acl_apis import AclApis
from raftka.broker.kafka.broker_apis import BrokerApis
from raftka.broker.kafka.cluster_apis import ClusterApis
from raftka.broker.kafka.config_apis import ConfigApis
from raftka.broker.kafka.group_apis import GroupApis
from raftka.broker.kafka.log_apis import LogApis
from raftka.broker.kafka.marker_apis import MarkerApis
from raftka.broker.kafka.protocol import KafkaApi, KafkaDispatcher
from raftka.broker.kafka.quota_apis import QuotaApis
from raftka.broker.kafka.reassign_apis import ReassignApis
from raftka.broker.kafka.sasl_apis import SaslApis, kafka_logins
from raftka.broker.kafka.txn_apis import TxnApis
from raftka.broker.sasl_logins import SaslLogins
from raftka.node.config import NodeConfig
from raftka.security.sasl import parse_mechanisms
from raftka.wire.guard import DEFAULT_LIMITS, ConnectionLimits
from raftka.wire.server import Listener


def kafka_listener(
    api: BrokerApi, config: NodeConfig, limits: ConnectionLimits = DEFAULT_LIMITS, name: str = "kafka"
) -> Listener:
    """``name``: "kafka", or "kafka-external" for the second one (``raftka.broker.kafka.endpoints``)."""
    mechanisms = parse_mechanisms(config.kafka.sasl_mechanisms)
    logins = kafka_logins(api, mechanisms) if mechanisms else None
    login = None if logins is None else logins.new
    return Listener(
        KafkaDispatcher(kafka_apis(api, config, logins), api.quotas), name=name, login=login, limits=limits
    )


def kafka_apis(api: BrokerApi, config: NodeConfig, logins: SaslLogins | None = None) -> list[KafkaApi]:
    """Every API the Kafka listener serves (ApiVersions apart: the dispatcher's own)."""
    return [
        *ClusterApis(api, config).apis(),
        *ConfigApis(api).apis(),
        *LogApis(api).apis(),
        *MarkerApis(api).apis(),
        *GroupApis(api).apis(),
        *QuotaApis(api).apis(),
        *AclApis(api).apis(),
        *ReassignApis(api).apis(),
        *BrokerApis(api).apis(),
        *SaslApis(api, logins).apis(),
        *TxnApis(api).apis(),
    ]
