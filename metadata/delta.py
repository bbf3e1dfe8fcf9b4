"""MetadataDelta: replays records onto an image; the one replay code path of the cluster.

The active controller, the standbys, the brokers, snapshot loading and the Spark audit
all turn records into images here, so they cannot disagree about what a record means.

A delta copies what it changes and shares the rest with its base image: a record about
one partition copies that topic's partition map and the topic index (pointers), never
the other topics' partitions. A record that cannot apply (unknown topic or broker, a
stale broker epoch, an ISR outside the replicas...) raises ``ReplayError`` and leaves
the delta as it was, so a caller can drop a bad batch whole.

Partitions take in registered brokers only: every broker a PartitionRecord names, and
every one a PartitionChangeRecord adds to the replicas or the ISR or makes leader. The
ids a change keeps may be those of a broker that has unregistered since (Kafka lets a
broker that holds replicas unregister; its partitions keep its id). A snapshot restates
such partitions as they are, so a delta that replays one (``snapshot=True``) does not
check its PartitionRecords' brokers.

Records are expected to be well formed (``raftka.metadata.records.check``, which ``encode`` and
``decode`` run); replay checks what only the image can tell.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from raftka.metadata import acls, quotas, transactions
from raftka.metadata.acls import Acl
from raftka.metadata.image import (
    LEADER_UNCHANGED,
    NO_LEADER,
    TOPIC,
    BrokerRegistration,
    CommittedOffset,
    Endpoint,
    GroupGeneration,
    GroupMember,
    MetadataImage,
    PartitionState,
    TopicImage,
    frozen,
)
from raftka.metadata.quotas import QuotaEntity
from raftka.metadata.records import MetadataRecord, topic_id_str
from raftka.security.scram import ScramCredential
from raftka.v1 import metadata_pb2

K = TypeVar("K")
K2 = TypeVar("K2")
V = TypeVar("V")

_NOTHING: Mapping[Any, Any] = frozen()
_PartitionRecord = metadata_pb2.PartitionRecord | metadata_pb2.PartitionChangeRecord


class ReplayError(Exception):
    """A well-formed record that does not apply to the image it is replayed on."""


def _copy(mapping: Mapping[K, V]) -> dict[K, V]:
    # mappingproxy.copy() is dict.copy() of what it wraps: much faster than dict(proxy)
    if isinstance(mapping, MappingProxyType | dict):
        return mapping.copy()
    return dict(mapping)


class _Cow(Generic[K, V]):
    """A mapping of the base image, copied the first time the delta changes it."""

    __slots__ = ("_base", "_own")

    def __init__(self, base: Mapping[K, V]) -> None:
        self._base = base
        self._own: dict[K, V] | None = None

    @property
    def view(self) -> Mapping[K, V]:
        return self._base if self._own is None else self._own

    def edit(self) -> dict[K, V]:
        if self._own is None:
            self._own = _copy(self._base)
        return self._own

    def result(self) -> Mapping[K, V]:
        return self._base if self._own is None else frozen(self._own)


class _Nested(Generic[K, K2, V]):
    """``K -> (K2 -> V)`` copied on write at both levels; an emptied inner map disappears."""

    __slots__ = ("_outer", "_inner")

    def __init__(self, base: Mapping[K, Mapping[K2, V]]) -> None:
        self._outer: _Cow[K, Mapping[K2, V]] = _Cow(base)
        self._inner: dict[K, dict[K2, V]] = {}

    def get(self, key: K) -> Mapping[K2, V]:
        inner = self._inner.get(key)
        return inner if inner is not None else self._outer.view.get(key, _NOTHING)

    def edit(self, key: K) -> dict[K2, V]:
        inner = self._inner.get(key)
        if inner is None:
            inner = self._inner[key] = _copy(self._outer.view.get(key, _NOTHING))
        return inner

    def drop(self, key: K) -> None:
        self._inner.pop(key, None)
        if key in self._outer.view:
            self._outer.edit().pop(key)

    def outer_keys(self) -> Iterable[K]:
        return set(self._outer.view) | set(self._inner)

    def result(self) -> Mapping[K, Mapping[K2, V]]:
        if not self._inner:
            return self._outer.result()
        outer = self._outer.edit()
        for key, inner in self._inner.items():
            if inner:
                outer[key] = frozen(inner)
            else:
                outer.pop(key, None)
        return frozen(outer)


class MetadataDelta:
    """Records replayed onto ``image``; ``apply`` makes the next image (once)."""

    def __init__(self, image: MetadataImage, *, snapshot: bool = False) -> None:
        """``snapshot``: the records restate an image (``raftka.metadata.snapshot``)."""
        self.image = image
        self._snapshot = snapshot
        self._brokers: _Cow[int, BrokerRegistration] = _Cow(image.brokers)
        self._topics: _Cow[bytes, TopicImage] = _Cow(image.topics_by_id)
        self._names: _Cow[str, bytes] = _Cow(image.topic_ids_by_name)
        self._partitions: dict[bytes, dict[int, PartitionState]] = {}  # topics whose partitions changed
        self._configs: _Nested[tuple[int, str], str, str] = _Nested(image.configs)
        self._offsets: _Nested[str, tuple[bytes, int], CommittedOffset] = _Nested(image.offsets)
        self._features: _Cow[str, int] = _Cow(image.features)
        self._next_producer_id = image.next_producer_id
        self._groups: _Cow[str, GroupGeneration] = _Cow(image.groups)
        self._acls: _Cow[str, Acl] = _Cow(image.acls)
        self._client_quotas: _Nested[QuotaEntity, str, float] = _Nested(image.client_quotas)
        self._scram: _Cow[tuple[str, str], ScramCredential] = _Cow(image.scram_credentials)
        self._scram_decoy_key = image.scram_decoy_key
        self._transactions: _Cow[str, metadata_pb2.TransactionRecord] = _Cow(image.transactions)
        self._txn_offsets: _Nested[str, tuple[str, bytes, int], CommittedOffset] = _Nested(image.txn_offsets)
        self._applied = False

    def replay(self, record: MetadataRecord) -> None:
        assert not self._applied, "a delta is applied once; start a new one from its image"
        kind = record.WhichOneof("record")
        if kind is None:
            raise ReplayError("MetadataRecord holds no record")
        _REPLAY[kind](self, getattr(record, kind))

    def apply(self, offset: int) -> MetadataImage:
        """The image after every replayed record; ``offset`` is the next offset after them."""
        assert not self._applied, "a delta is applied once"
        assert offset >= self.image.offset, (offset, self.image.offset)
        self._applied = True
        if self._partitions:
            topics = self._topics.edit()
            for topic_id, partitions in self._partitions.items():
                topic = topics[topic_id]  # present: a removed topic leaves _partitions too
                topics[topic_id] = TopicImage(topic.name, topic_id, frozen(partitions))
        return MetadataImage(
            offset=offset,
            brokers=self._brokers.result(),
            topics_by_id=self._topics.result(),
            topic_ids_by_name=self._names.result(),
            configs=self._configs.result(),
            offsets=self._offsets.result(),
            next_producer_id=self._next_producer_id,
            features=self._features.result(),
            groups=self._groups.result(),
            acls=self._acls.result(),
            client_quotas=self._client_quotas.result(),
            scram_credentials=self._scram.result(),
            scram_decoy_key=self._scram_decoy_key,
            transactions=self._transactions.result(),
            txn_offsets=self._txn_offsets.result(),
        )

    # brokers ----------------------------------------------------------------------------

    def _register_broker(self, r: metadata_pb2.RegisterBrokerRecord) -> None:
        previous = self._brokers.view.get(r.broker_id)
        if previous is not None and r.broker_epoch <= previous.epoch:
            raise ReplayError(
                f"broker {r.broker_id}: registration epoch {r.broker_epoch} is not above "
                f"the current {previous.epoch}"
            )
        endpoints = tuple(Endpoint(e.name, e.host, e.port) for e in r.endpoints)
        self._brokers.edit()[r.broker_id] = BrokerRegistration(
            r.broker_id,
            r.incarnation_id,
            r.broker_epoch,
            endpoints,
            r.rack,
            r.fenced,
            r.log_dir_id,
            r.crashed,
        )

    def _registered(self, kind: str, broker_id: int, epoch: int) -> BrokerRegistration:
        broker = self._brokers.view.get(broker_id)
        if broker is None:
            raise ReplayError(f"{kind}: broker {broker_id} is not registered")
        if broker.epoch != epoch:
            raise ReplayError(f"{kind}: broker {broker_id} has epoch {broker.epoch}, not {epoch}")
        return broker

    def _unregister_broker(self, r: metadata_pb2.UnregisterBrokerRecord) -> None:
        self._registered("UnregisterBrokerRecord", r.broker_id, r.broker_epoch)
        del self._brokers.edit()[r.broker_id]

    def _set_fenced(self, kind: str, broker_id: int, epoch: int, fenced: bool) -> None:
        broker = self._registered(kind, broker_id, epoch)
        if broker.fenced != fenced:
            self._brokers.edit()[broker_id] = dataclasses.replace(broker, fenced=fenced)

    def _fence_broker(self, r: metadata_pb2.FenceBrokerRecord) -> None:
        self._set_fenced("FenceBrokerRecord", r.id, r.epoch, True)

    def _unfence_broker(self, r: metadata_pb2.UnfenceBrokerRecord) -> None:
        self._set_fenced("UnfenceBrokerRecord", r.id, r.epoch, False)

    # topics and partitions --------------------------------------------------------------

    def _topic(self, r: metadata_pb2.TopicRecord) -> None:
        if r.name in self._names.view:
            raise ReplayError(f"TopicRecord: topic {r.name!r} already exists")
        if r.topic_id in self._topics.view:
            raise ReplayError(f"TopicRecord: topic id {topic_id_str(r.topic_id)} already exists")
        self._topics.edit()[r.topic_id] = TopicImage(r.name, r.topic_id, _NOTHING)
        self._names.edit()[r.name] = r.topic_id
        self._partitions[r.topic_id] = {}

    def _topic_partitions(self, kind: str, topic_id: bytes) -> Mapping[int, PartitionState]:
        partitions = self._partitions.get(topic_id)
        if partitions is not None:
            return partitions
        topic = self._topics.view.get(topic_id)
        if topic is None:
            raise ReplayError(f"{kind}: unknown topic id {topic_id_str(topic_id)}")
        return topic.partitions

    def _edit_partitions(self, topic_id: bytes) -> dict[int, PartitionState]:
        partitions = self._partitions.get(topic_id)
        if partitions is None:
            partitions = self._partitions[topic_id] = _copy(self._topics.view[topic_id].partitions)
        return partitions

    def _brought_in(
        self, kind: str, r: _PartitionRecord, ids: tuple[int, ...], before: tuple[int, ...]
    ) -> None:
        """Every id of ``ids`` not in ``before`` is a registered broker."""
        if ids is before:
            return
        brokers = self._brokers.view
        for broker_id in ids:
            if broker_id not in brokers and broker_id not in before:
                problem = f"broker {broker_id} is not registered"
                raise ReplayError(f"{kind} for {topic_id_str(r.topic_id)}-{r.partition_id}: {problem}")

    def _partition(self, r: metadata_pb2.PartitionRecord) -> None:
        # records.check keeps the ISR within the replicas and the leader in the ISR: the replicas are all
        kind = "PartitionRecord"
        self._topic_partitions(kind, r.topic_id)
        replicas = tuple(r.replicas[:])
        if not self._snapshot:
            self._brought_in(kind, r, replicas, ())
        self._edit_partitions(r.topic_id)[r.partition_id] = PartitionState(
            replicas,
            tuple(r.isr[:]),
            r.leader,
            r.leader_epoch,
            r.partition_epoch,
            tuple(r.elr[:]),
            tuple(r.last_known_elr[:]),
            tuple(r.adding_replicas[:]),
            tuple(r.removing_replicas[:]),
        )

    def _partition_change(self, r: metadata_pb2.PartitionChangeRecord) -> None:
        kind = "PartitionChangeRecord"
        current = self._topic_partitions(kind, r.topic_id).get(r.partition_id)
        if current is None:
            raise ReplayError(f"{kind}: topic {topic_id_str(r.topic_id)} has no partition {r.partition_id}")
        replicas = tuple(r.replicas.ids[:]) if r.HasField("replicas") else current.replicas
        isr = tuple(r.isr.ids[:]) if r.HasField("isr") else current.isr
        leader = current.leader if r.leader == LEADER_UNCHANGED else r.leader
        if not set(isr) <= set(replicas):
            problem = f"isr {list(isr)} is not within replicas {list(replicas)}"
            raise ReplayError(f"{kind} for {topic_id_str(r.topic_id)}-{r.partition_id}: {problem}")
        if leader != NO_LEADER and leader not in isr:
            problem = f"leader {leader} is not in isr {list(isr)}"
            raise ReplayError(f"{kind} for {topic_id_str(r.topic_id)}-{r.partition_id}: {problem}")
        elr = tuple(r.elr.ids[:]) if r.HasField("elr") else current.elr
        last_known_elr = (
            tuple(r.last_known_elr.ids[:]) if r.HasField("last_known_elr") else current.last_known_elr
        )
        if not set(elr) <= set(replicas) or set(elr) & set(isr):
            problem = (
                f"elr {list(elr)} is not within replicas {list(replicas)} and apart from isr {list(isr)}"
            )
            raise ReplayError(f"{kind} for {topic_id_str(r.topic_id)}-{r.partition_id}: {problem}")
        adding = tuple(r.adding_replicas.ids[:]) if r.HasField("adding_replicas") else current.adding_replicas
        removing = (
            tuple(r.removing_replicas.ids[:])
            if r.HasField("removing_replicas")
            else current.removing_replicas
        )
        if not set(adding) | set(removing) <= set(replicas) or set(adding) & set(removing):
            problem = (
                f"adding_replicas {list(adding)} and removing_replicas {list(removing)} are not "
                f"disjoint and within replicas {list(replicas)}"
            )
            raise ReplayError(f"{kind} for {topic_id_str(r.topic_id)}-{r.partition_id}: {problem}")
        self._brought_in(kind, r, replicas, current.replicas)
        self._brought_in(kind, r, isr, current.isr)
        if leader not in (current.leader, NO_LEADER):
            self._brought_in(kind, r, (leader,), ())
        leader_epoch = current.leader_epoch + (leader != current.leader)
        self._edit_partitions(r.topic_id)[r.partition_id] = PartitionState(
            replicas,
            isr,
            leader,
            leader_epoch,
            current.partition_epoch + 1,
            elr,
            last_known_elr,
            adding,
            removing,
        )

    def _remove_topic(self, r: metadata_pb2.RemoveTopicRecord) -> None:
        topic_id = r.topic_id
        topic = self._topics.view.get(topic_id)
        if topic is None:
            raise ReplayError(f"RemoveTopicRecord: unknown topic id {topic_id_str(topic_id)}")
        del self._topics.edit()[topic_id]
        del self._names.edit()[topic.name]
        self._partitions.pop(topic_id, None)
        self._configs.drop((TOPIC, topic.name))
        for group in self._offsets.outer_keys():
            gone = [key for key in self._offsets.get(group) if key[0] == topic_id]
            if gone:
                committed = self._offsets.edit(group)
                for key in gone:
                    del committed[key]
        for transactional_id in self._txn_offsets.outer_keys():
            pending = [key for key in self._txn_offsets.get(transactional_id) if key[1] == topic_id]
            if pending:
                held = self._txn_offsets.edit(transactional_id)
                for key in pending:
                    del held[key]

    # configs, features, producer ids, offsets -------------------------------------------

    def _config(self, r: metadata_pb2.ConfigRecord) -> None:
        if r.resource_type == TOPIC and r.resource_name not in self._names.view:
            raise ReplayError(f"ConfigRecord: unknown topic {r.resource_name!r}")
        resource = (int(r.resource_type), r.resource_name)
        if r.HasField("value"):
            self._configs.edit(resource)[r.name] = r.value
        elif r.name in self._configs.get(resource):
            del self._configs.edit(resource)[r.name]

    def _feature_level(self, r: metadata_pb2.FeatureLevelRecord) -> None:
        if r.feature_level == 0:  # level 0: the feature is off, as in Kafka
            self._features.edit().pop(r.name, None)
        else:
            self._features.edit()[r.name] = r.feature_level

    def _producer_ids(self, r: metadata_pb2.ProducerIdsRecord) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise ReplayError(
                f"ProducerIdsRecord: next producer id {r.next_producer_id} is not above "
                f"the current {self._next_producer_id}"
            )
        self._next_producer_id = r.next_producer_id

    def _no_op(self, r: metadata_pb2.NoOpRecord) -> None:
        pass

    def _offset_commit(self, r: metadata_pb2.OffsetCommitRecord) -> None:
        kind = "OffsetCommitRecord"
        if r.partition not in self._topic_partitions(kind, r.topic_id):
            raise ReplayError(f"{kind}: topic {topic_id_str(r.topic_id)} has no partition {r.partition}")
        self._offsets.edit(r.group)[(r.topic_id, r.partition)] = CommittedOffset(
            r.offset, r.metadata, r.commit_timestamp_ms
        )

    def _remove_group_offsets(self, r: metadata_pb2.RemoveGroupOffsetsRecord) -> None:
        if not self._offsets.get(r.group) and r.group not in self._groups.view:
            raise ReplayError(f"RemoveGroupOffsetsRecord: group {r.group!r} has no offsets and no rebalance")
        self._offsets.drop(r.group)
        self._groups.edit().pop(r.group, None)

    def _group_rebalance(self, r: metadata_pb2.GroupRebalanceRecord) -> None:
        previous = self._groups.view.get(r.group)
        if previous is not None and r.generation_id <= previous.generation_id:
            raise ReplayError(
                f"GroupRebalanceRecord: group {r.group!r} generation {r.generation_id} is not above "
                f"the recorded {previous.generation_id}"
            )
        members = tuple(
            GroupMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                tuple((a.topic, tuple(a.partitions)) for a in m.assignment),
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
            )
            for m in r.members
        )
        self._groups.edit()[r.group] = GroupGeneration(
            r.generation_id,
            r.protocol_type,
            r.protocol_name,
            r.leader,
            members,
            r.coordinator,
            r.timestamp_ms,
        )

    # transactions ------------------------------------------------------------------------

    def _transaction(self, r: metadata_pb2.TransactionRecord) -> None:
        """The id's new state; a transaction that ends takes its pending offsets with it
        (a commit wrote them as OffsetCommitRecords first, in the same batch)."""
        previous = self._transactions.view.get(r.transactional_id)
        problem = None if self._snapshot else transactions.transition_problem(previous, r)
        if problem is not None:
            raise ReplayError(f"TransactionRecord {r.transactional_id!r}: {problem}")
        record = metadata_pb2.TransactionRecord()
        record.CopyFrom(r)
        self._transactions.edit()[r.transactional_id] = record
        if r.state not in transactions.OPEN:
            self._txn_offsets.drop(r.transactional_id)

    def _remove_transaction(self, r: metadata_pb2.RemoveTransactionRecord) -> None:
        txn = self._transactions.view.get(r.transactional_id)
        if txn is None or txn.state in transactions.OPEN:
            why = "no such id" if txn is None else "its transaction is open"
            raise ReplayError(f"RemoveTransactionRecord {r.transactional_id!r}: {why}")
        del self._transactions.edit()[r.transactional_id]

    def _txn_offset_commit(self, r: metadata_pb2.TxnOffsetCommitRecord) -> None:
        kind = "TxnOffsetCommitRecord"
        txn = self._transactions.view.get(r.transactional_id)
        if txn is None or txn.state != transactions.State.TXN_ONGOING:
            raise ReplayError(f"{kind}: transactional id {r.transactional_id!r} has no ongoing transaction")
        if (txn.producer_id, txn.producer_epoch) != (r.producer_id, r.producer_epoch):
            raise ReplayError(
                f"{kind}: producer {r.producer_id} epoch {r.producer_epoch} is not the transaction's "
                f"({txn.producer_id} epoch {txn.producer_epoch})"
            )
        if r.partition not in self._topic_partitions(kind, r.topic_id):
            raise ReplayError(f"{kind}: topic {topic_id_str(r.topic_id)} has no partition {r.partition}")
        self._txn_offsets.edit(r.transactional_id)[(r.group, r.topic_id, r.partition)] = CommittedOffset(
            r.offset, r.metadata, r.commit_timestamp_ms
        )

    # ACLs ------------------------------------------------------------------------------

    def _access_control_entry(self, r: metadata_pb2.AccessControlEntryRecord) -> None:
        if r.id in self._acls.view:
            raise ReplayError(f"AccessControlEntryRecord: ACL {r.id} exists already")
        self._acls.edit()[r.id] = acls.from_pb(r)

    def _remove_access_control_entry(self, r: metadata_pb2.RemoveAccessControlEntryRecord) -> None:
        if r.id not in self._acls.view:
            raise ReplayError(f"RemoveAccessControlEntryRecord: no ACL {r.id}")
        del self._acls.edit()[r.id]

    # client quotas -----------------------------------------------------------------------

    def _client_quota(self, r: metadata_pb2.ClientQuotaRecord) -> None:
        """Kafka's replay: a removal of a key the entity does not hold changes nothing."""
        entity = quotas.entity_of(r.entity)
        if not r.remove:
            self._client_quotas.edit(entity)[r.key] = r.value
        elif r.key in self._client_quotas.get(entity):
            del self._client_quotas.edit(entity)[r.key]

    # SCRAM credentials -----------------------------------------------------------------

    def _user_scram_credential(self, r: metadata_pb2.UserScramCredentialRecord) -> None:
        """Adds or replaces the user's credential for the mechanism (a new password)."""
        self._scram.edit()[(r.name, r.mechanism)] = ScramCredential(
            r.salt, r.stored_key, r.server_key, r.iterations
        )

    def _scram_decoy_key(self, r: metadata_pb2.ScramDecoyKeyRecord) -> None:
        """The first one stays: unknown users' salts never change (the controller writes one)."""
        self._scram_decoy_key = self._scram_decoy_key or r.key

    def _remove_user_scram_credential(self, r: metadata_pb2.RemoveUserScramCredentialRecord) -> None:
        if (r.name, r.mechanism) not in self._scram.view:
            raise ReplayError(
                f"RemoveUserScramCredentialRecord: user {r.name!r} has no {r.mechanism} credential"
            )
        del self._scram.edit()[(r.name, r.mechanism)]


_REPLAY: dict[str, Callable[[MetadataDelta, Any], None]] = {
    "register_broker": MetadataDelta._register_broker,
    "unregister_broker": MetadataDelta._unregister_broker,
    "fence_broker": MetadataDelta._fence_broker,
    "unfence_broker": MetadataDelta._unfence_broker,
    "topic": MetadataDelta._topic,
    "partition": MetadataDelta._partition,
    "partition_change": MetadataDelta._partition_change,
    "remove_topic": MetadataDelta._remove_topic,
    "config": MetadataDelta._config,
    "feature_level": MetadataDelta._feature_level,
    "producer_ids": MetadataDelta._producer_ids,
    "no_op": MetadataDelta._no_op,
    "offset_commit": MetadataDelta._offset_commit,
    "remove_group_offsets": MetadataDelta._remove_group_offsets,
    "group_rebalance": MetadataDelta._group_rebalance,
    "access_control_entry": MetadataDelta._access_control_entry,
    "remove_access_control_entry": MetadataDelta._remove_access_control_entry,
    "client_quota": MetadataDelta._client_quota,
    "user_scram_credential": MetadataDelta._user_scram_credential,
    "remove_user_scram_credential": MetadataDelta._remove_user_scram_credential,
    "transaction": MetadataDelta._transaction,
    "txn_offset_commit": MetadataDelta._txn_offset_commit,
    "remove_transaction": MetadataDelta._remove_transaction,
    "scram_decoy_key": MetadataDelta._scram_decoy_key,
}
assert set(_REPLAY) == {f.name for f in MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields}
