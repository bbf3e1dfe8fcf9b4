"""MetadataImage: the cluster's metadata at one offset of the log, immutable.

Built only by replaying records (``raftka.metadata.delta.MetadataDelta``), on the active
controller, the standbys, the brokers and in the Spark audit alike, so no two of them
can disagree about what a record means. Images share unchanged parts with the image
they were made from, so a delta costs what it changes, not the size of the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from raftka.metadata.acls import Acl
from raftka.metadata.quotas import QuotaEntity
from raftka.security.scram import ScramCredential
from raftka.v1 import metadata_pb2

NO_LEADER = -1
LEADER_UNCHANGED = -2  # PartitionChangeRecord.leader: leave the leader as it is

TOPIC = 2  # ConfigResourceType, Kafka's ids
BROKER = 4


def frozen(mapping: dict | None = None) -> Mapping:
    return MappingProxyType(mapping if mapping is not None else {})


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: str
    epoch: int  # the offset of its RegisterBrokerRecord
    endpoints: tuple[Endpoint, ...]
    rack: str  # "" when none
    fenced: bool
    log_dir_id: bytes = b""  # KIP-858: its log directory's id; b"" from a broker that sent none
    crashed: bool = False  # registered after a crash, directory intact: may miss its unflushed tail

    def endpoint(self, name: str) -> Endpoint | None:
        """The listener called ``name`` (a broker registers one per protocol it serves)."""
        return next((e for e in self.endpoints if e.name == name), None)


@dataclass(frozen=True, slots=True)
class PartitionState:
    replicas: tuple[int, ...]  # the first is the preferred leader
    isr: tuple[int, ...]
    leader: int  # NO_LEADER: offline
    leader_epoch: int
    partition_epoch: int
    # KIP-966 (``raftka.metadata.eligible_leaders``): replicas out of the ISR that hold every
    # committed record, electable when the ISR is empty; and the ones that were, until an
    # unclean restart. Both empty while the ISR has min.insync.replicas members.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-455 (``raftka.metadata.reassign_ops``): a reassignment in progress. ``replicas`` is
    # then the target followed by ``removing_replicas``; ``adding_replicas`` are the target
    # replicas it brings in. Both empty when none is in progress.
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: bytes  # 16-byte UUID
    partitions: Mapping[int, PartitionState]


class CommittedOffset(NamedTuple):
    """A tuple, not a frozen dataclass like the rest: one is made for every offset commit
    replayed (millions in a busy history), and a tuple is made in half the time."""

    offset: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str  # "": not a static member
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]  # (topic, partitions); empty when opaque
    session_timeout_ms: int = 0  # 0: recorded before the timeouts were
    rebalance_timeout_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupGeneration:
    """A consumer group as its last completed rebalance left it (GroupRebalanceRecord)."""

    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    members: tuple[GroupMember, ...]
    coordinator: int
    timestamp_ms: int  # the controller's wall clock when it recorded the rebalance


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = 0  # the next offset after the last record this image includes (raft's own too)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=frozen)
    topics_by_id: Mapping[bytes, TopicImage] = field(default_factory=frozen)
    topic_ids_by_name: Mapping[str, bytes] = field(default_factory=frozen)
    # (resource type, resource name) -> {key: value}; only keys set explicitly
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=frozen)
    # group -> (topic id, partition) -> offset
    offsets: Mapping[str, Mapping[tuple[bytes, int], CommittedOffset]] = field(default_factory=frozen)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=frozen)
    groups: Mapping[str, GroupGeneration] = field(default_factory=frozen)  # group -> last rebalance
    acls: Mapping[str, Acl] = field(default_factory=frozen)  # ACL id -> ACL (raftka.metadata.acls)
    # entity -> {key: value}: the client quotas set (raftka.metadata.quotas)
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=frozen)
    # (user, mechanism) -> its SCRAM credential (raftka.security.scram)
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = field(default_factory=frozen)
    # the secret unknown users' SCRAM salts derive from (ScramDecoyKeyRecord); b"": none yet
    scram_decoy_key: bytes = b""
    # transactional id -> its state (raftka.metadata.transactions); a record the delta copied, never changed
    transactions: Mapping[str, metadata_pb2.TransactionRecord] = field(default_factory=frozen)
    # transactional id -> (group, topic id, partition) -> an offset its open transaction commits
    txn_offsets: Mapping[str, Mapping[tuple[str, bytes, int], CommittedOffset]] = field(
        default_factory=frozen
    )

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids_by_name.get(name)
        return None if topic_id is None else self.topics_by_id[topic_id]

    def unfenced_brokers(self) -> list[BrokerRegistration]:
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]


EMPTY = MetadataImage()
