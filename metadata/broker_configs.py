"""Dynamic broker configs: the keys ``raftka configs alter --broker`` may set, as Kafka's
``DynamicConfig.Broker`` (``kafka-configs --entity-type brokers``).

They live in the quorum as ``ConfigRecord``s of resource type BROKER, named by the broker id,
or by ``""`` for the cluster-wide default that a broker without its own value takes. A
broker reads them from its metadata image, so a change applies without a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from raftka.metadata.image import BROKER, MetadataImage
from raftka.metadata.topic_configs import INT64_MAX, ConfigDef, integer, validate_entry
from raftka.metadata.validation import ErrorCode, ValidationError

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
CLUSTER_DEFAULT = ""  # the resource name of the values every broker takes unless it has its own

BROKER_CONFIGS: Mapping[str, ConfigDef] = MappingProxyType(
    {
        d.name: d
        for d in (
            ConfigDef(
                LEADER_THROTTLED_RATE,
                str(INT64_MAX),
                "bytes/s this broker, as leader, serves to catching-up followers of the replicas "
                "in leader.replication.throttled.replicas",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                FOLLOWER_THROTTLED_RATE,
                str(INT64_MAX),
                "bytes/s this broker, as a catching-up follower, fetches for the replicas "
                "in follower.replication.throttled.replicas",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
        )
    }
)


def validate_broker_config(key: str, value: str) -> str:
    return validate_entry(BROKER_CONFIGS, "broker", key, value)


def check_broker_name(name: str) -> None:
    """A broker resource is a broker id, written canonically (one name per broker), or ``""``
    (the cluster default), as Kafka's."""
    canonical = name.isascii() and name.isdigit() and len(name) <= 10 and name == str(int(name))
    if name != CLUSTER_DEFAULT and not canonical:
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"broker: {name!r} is not a broker id or '' (the cluster-wide default)",
        )


def broker_value(image: MetadataImage, broker_id: int, key: str) -> str:
    """The value ``broker_id`` runs with: its own, else the cluster default, else the built-in one."""
    for name in (str(broker_id), CLUSTER_DEFAULT):
        value = image.configs.get((BROKER, name), {}).get(key)
        if value is not None:
            return value
    return BROKER_CONFIGS[key].default
