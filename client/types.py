"""What ``Admin`` returns: small frozen dataclasses, never protobuf objects.

Topic ids are shown as Kafka shows them: the 16-byte UUID in URL-safe base64 without
padding (22 characters), so ids match ``raftka metadata dump`` and Kafka's tools.
Per-item results carry ``error`` (None when the item succeeded) and ``check()``, so a
caller that wants exceptions gets the same AdminError as for a whole-request failure.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from raftka.client.errors import AdminError
from raftka.wire.frames import DATA_LISTENER

NO_LEADER = -1


def topic_id_str(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode() if topic_id else ""


def _check(error: str | None, message: str) -> None:
    if error is not None:
        raise AdminError(error, message)


# requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    metadata: str = ""


# results ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicResult:
    """The outcome of a write for one topic (create, delete, partitions, configs)."""

    name: str
    topic_id: str
    error: str | None
    message: str

    def check(self) -> None:
        _check(self.error, f"{self.name}: {self.message}" if self.message else self.name)


@dataclass(frozen=True, slots=True)
class TopicListing:
    name: str
    topic_id: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int  # NO_LEADER: offline
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966): may lead when the ISR is empty
    adding: tuple[int, ...] = ()  # a reassignment in progress (KIP-455): replicas it adds
    removing: tuple[int, ...] = ()  # and replicas it removes once those joined the ISR

    @property
    def offline(self) -> bool:
        return self.leader == NO_LEADER


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    error: str | None
    message: str

    def check(self) -> None:
        _check(self.error, f"{self.name}: {self.message}" if self.message else self.name)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class TopicConfigs:
    topic: str
    entries: tuple[ConfigEntry, ...]
    error: str | None
    message: str

    def check(self) -> None:
        _check(self.error, f"{self.topic}: {self.message}" if self.message else self.topic)


@dataclass(frozen=True, slots=True)
class BrokerConfigs:
    """A broker's dynamic configs (``broker`` "" is the cluster-wide default); an alteration's
    outcome carries no entries."""

    broker: str
    entries: tuple[ConfigEntry, ...]
    error: str | None
    message: str

    def check(self) -> None:
        who = f"broker {self.broker}" if self.broker else "the broker default"
        _check(self.error, f"{who}: {self.message}" if self.message else who)


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str
    fenced: bool
    epoch: int
    in_controlled_shutdown: bool

    @property
    def data_address(self) -> str:
        """Where producers and consumers reach the broker: its data listener."""
        for endpoint in self.endpoints:
            if endpoint.name == DATA_LISTENER:
                return endpoint.address
        return ""


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress (KIP-455): ``replicas`` is the target followed by the
    replicas being removed."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """The outcome for one partition (offset commit, leader election)."""

    topic: str
    partition: int
    error: str | None
    message: str

    def check(self) -> None:
        where = f"{self.topic}-{self.partition}"
        _check(self.error, f"{where}: {self.message}" if self.message else where)


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1: nothing committed
    metadata: str
    error: str | None
    message: str

    def check(self) -> None:
        where = f"{self.topic}-{self.partition}"
        _check(self.error, f"{where}: {self.message}" if self.message else where)


# the data plane ---------------------------------------------------------------------------


class TopicPartition(NamedTuple):
    """A named tuple: hashed per record by the producer, so its hash must be C's."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record went; offset -1 with acks=0 (the broker says nothing)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """A named tuple: a consumer makes one per record, on its hot path."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transaction needs of a consumer's group to commit its offsets
    (``Consumer.consumer_group_metadata``, confluent-kafka's shape): generation -1 and no
    member for a consumer outside the group's membership."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# consumer groups (raftka.client.group_admin) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupListing:
    group: str
    protocol_type: str
    state: str  # Kafka's: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead


@dataclass(frozen=True, slots=True)
class GroupMemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]  # decoded for protocol type "consumer"; empty otherwise


@dataclass(frozen=True, slots=True)
class GroupPartitionOffsets:
    """One partition of a group: where it committed, where the log ends, who reads it."""

    partition: TopicPartition
    committed: int | None  # None: nothing committed
    log_end: int | None  # the high watermark; None: its leader did not answer
    member_id: str | None  # the member it is assigned to, if any

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end is None:
            return None
        return max(self.log_end - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    coordinator: int
    members: tuple[GroupMemberDescription, ...]
    offsets: tuple[GroupPartitionOffsets, ...]


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (``raftka acls``); as a filter, an empty field matches any value. Creating
    one, an empty pattern type is LITERAL, an empty permission ALLOW and an empty host *."""

    principal: str = ""  # User:CN=alice,OU=client,O=raftka, or User:*
    operation: str = ""  # ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ... (Kafka's eleven)
    resource_type: str = ""  # TOPIC, GROUP or CLUSTER
    resource_name: str = ""  # a name, * for all; the cluster's is kafka-cluster
    pattern_type: str = ""  # LITERAL or PREFIXED
    permission_type: str = ""  # ALLOW or DENY
    host: str = ""  # the client's IP address, or * for any


# A client quota entity: entity type ("user", "client-id") -> name, or None for the
# type's default entity (shown as <default>); types it does not name are left out.
QuotaEntity = Mapping[str, "str | None"]


@dataclass(frozen=True, slots=True)
class ClientQuotaEntry:
    """One entity's client quotas (``raftka quotas describe``)."""

    entity: QuotaEntity
    values: Mapping[str, float]  # producer_byte_rate, consumer_byte_rate, request_percentage


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """A user's password for one SCRAM mechanism (``raftka users add``): the client salts
    and hashes it (``Admin.alter_user_scram_credentials``), so the password itself never
    leaves this process, as with Kafka's AdminClient."""

    user: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    password: str = field(repr=False)
    iterations: int = 8_192  # 4096 to 16384


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: str


@dataclass(frozen=True, slots=True)
class UserResult:
    """The outcome of a change to one user's credentials."""

    user: str
    error: str | None
    message: str


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    """A user's SCRAM mechanisms and their iteration counts (never a key or a salt)."""

    user: str
    mechanisms: tuple[tuple[str, int], ...]  # (mechanism, iterations)
    error: str | None = None  # RESOURCE_NOT_FOUND: a user asked for that has no credential
    message: str = ""
