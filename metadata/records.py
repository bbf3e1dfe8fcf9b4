"""Metadata records on the wire: one ``MetadataRecord`` per raft record.

Every record that enters or leaves the log passes ``check``: ``encode`` refuses to write
a malformed record and ``decode`` refuses to return one, naming the field, so replay
(``raftka.metadata.delta``) only ever sees records of the right shape. Whether a record makes
sense against the current image (does the topic exist?) is replay's question, not this
module's.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from raftka.metadata import acls, quotas, transactions
from raftka.metadata.image import LEADER_UNCHANGED, NO_LEADER
from raftka.security import scram
from raftka.v1 import metadata_pb2

MetadataRecord = metadata_pb2.MetadataRecord

TOPIC_ID_BYTES = 16
LOG_DIR_ID_BYTES = 16  # a UUID, as Kafka's directory.id
_ZERO_TOPIC_ID = bytes(TOPIC_ID_BYTES)
_CONFIG_RESOURCE_TYPES = frozenset({metadata_pb2.CONFIG_RESOURCE_TOPIC, metadata_pb2.CONFIG_RESOURCE_BROKER})


class RecordError(Exception):
    """A record that must not be written or replayed; the message names the field."""


def encode(record: MetadataRecord) -> bytes:
    check(record)
    return record.SerializeToString(deterministic=True)


def decode(data: bytes) -> MetadataRecord:
    record = MetadataRecord()
    try:
        record.ParseFromString(data)
    except DecodeError as exc:
        raise RecordError(f"not a MetadataRecord ({len(data)} bytes): {exc}") from None
    check(record)
    return record


def type_name(record: MetadataRecord) -> str:
    """The record type the way kafka-dump-log names it: ``partition_change`` -> ``PARTITION_CHANGE_RECORD``."""
    kind = record.WhichOneof("record")
    return "UNKNOWN_RECORD" if kind is None else f"{kind.upper()}_RECORD"


def topic_id_str(topic_id: bytes) -> str:
    """A topic id as Kafka prints a Uuid: base64url without padding."""
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


def to_json(record: MetadataRecord) -> dict[str, Any]:
    """The record's fields as JSON values: every field, proto names, topic ids as Kafka Uuids.

    Integers stay numbers (protobuf's own JSON turns int64 into strings), enums are their
    numbers as in Kafka's dump, and an unset ``optional`` or message field is left out.
    """
    kind = record.WhichOneof("record")
    return {} if kind is None else _message_json(getattr(record, kind))


def check(record: MetadataRecord) -> None:
    kind = record.WhichOneof("record")
    if kind is None:
        raise RecordError("MetadataRecord holds no record (empty, or a type this version does not know)")
    _CHECKS[kind](getattr(record, kind))


# JSON ---------------------------------------------------------------------------------


def _message_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        if field.has_presence and not message.HasField(field.name):
            continue
        out[field.name] = _field_json(field, getattr(message, field.name))
    return out


def _field_json(field: FieldDescriptor, value: Any) -> Any:
    if field.is_repeated:
        return [_scalar_json(field, v) for v in value]
    return _scalar_json(field, value)


def _scalar_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        # A BrokerIdList prints as its list, the way Kafka prints an int32 array.
        if value.DESCRIPTOR is metadata_pb2.BrokerIdList.DESCRIPTOR:
            return value.ids[:]
        return _message_json(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return topic_id_str(value)
    return value


# checks -------------------------------------------------------------------------------
# Hot on snapshot load (one PartitionRecord per partition): each test is a plain ``if``
# and the message is built only when it fails.


def _topic_id(kind: str, topic_id: bytes) -> None:
    if len(topic_id) != TOPIC_ID_BYTES:
        raise RecordError(f"{kind}.topic_id: {len(topic_id)} bytes, not a 16-byte UUID")
    if topic_id == _ZERO_TOPIC_ID:  # not any(topic_id): that walks the bytes one by one, 20x slower
        raise RecordError(f"{kind}.topic_id: the zero UUID is not a topic id")


def _broker_ids(kind: str, name: str, ids: tuple[int, ...], *, allow_empty: bool) -> None:
    if not ids and not allow_empty:
        raise RecordError(f"{kind}.{name}: empty")
    if ids and min(ids) < 0:
        raise RecordError(f"{kind}.{name}: negative broker id in {list(ids)}")
    if len(set(ids)) != len(ids):
        raise RecordError(f"{kind}.{name}: duplicate broker id in {list(ids)}")


def _check_register_broker(r: metadata_pb2.RegisterBrokerRecord) -> None:
    kind = "RegisterBrokerRecord"
    if r.broker_id < 0:
        raise RecordError(f"{kind}.broker_id: {r.broker_id} is negative")
    if r.broker_epoch < 0:
        raise RecordError(f"{kind}.broker_epoch: {r.broker_epoch} is negative")
    for endpoint in r.endpoints:
        if not endpoint.host:
            raise RecordError(f"{kind}.endpoints.host: empty")
        if not 0 < endpoint.port < 65536:
            raise RecordError(f"{kind}.endpoints.port: {endpoint.port} out of range")
    if len(r.log_dir_id) not in (0, LOG_DIR_ID_BYTES):
        raise RecordError(f"{kind}.log_dir_id: {len(r.log_dir_id)} bytes, not {LOG_DIR_ID_BYTES} (or none)")


def _check_broker_epoch(kind: str, broker_id: int, epoch: int) -> None:
    if broker_id < 0:
        raise RecordError(f"{kind}: broker id {broker_id} is negative")
    if epoch < 0:
        raise RecordError(f"{kind}: broker epoch {epoch} is negative")


def _check_topic(r: metadata_pb2.TopicRecord) -> None:
    if not r.name:
        raise RecordError("TopicRecord.name: empty")
    _topic_id("TopicRecord", r.topic_id)


def _check_partition(r: metadata_pb2.PartitionRecord) -> None:
    kind = "PartitionRecord"
    if r.partition_id < 0:
        raise RecordError(f"{kind}.partition_id: {r.partition_id} is negative")
    _topic_id(kind, r.topic_id)
    replicas, isr, leader = tuple(r.replicas[:]), tuple(r.isr[:]), r.leader
    _broker_ids(kind, "replicas", replicas, allow_empty=False)
    _broker_ids(kind, "isr", isr, allow_empty=True)
    if not set(isr) <= set(replicas):
        raise RecordError(f"{kind}.isr: {list(isr)} not within replicas {list(replicas)}")
    if leader != NO_LEADER and leader not in isr:
        raise RecordError(f"{kind}.leader: {leader} is not in isr {list(isr)}")
    elr = tuple(r.elr[:])
    _broker_ids(kind, "elr", elr, allow_empty=True)
    _broker_ids(kind, "last_known_elr", tuple(r.last_known_elr[:]), allow_empty=True)
    if not set(elr) <= set(replicas) or set(elr) & set(isr):
        raise RecordError(f"{kind}.elr: {list(elr)} not within replicas {list(replicas)} or overlaps isr")
    adding, removing = tuple(r.adding_replicas[:]), tuple(r.removing_replicas[:])
    _broker_ids(kind, "adding_replicas", adding, allow_empty=True)
    _broker_ids(kind, "removing_replicas", removing, allow_empty=True)
    if not set(adding) | set(removing) <= set(replicas) or set(adding) & set(removing):
        raise RecordError(
            f"{kind}.adding_replicas {list(adding)} and removing_replicas {list(removing)}: "
            f"not disjoint and within replicas {list(replicas)}"
        )
    if r.leader_epoch < 0 or r.partition_epoch < 0:
        raise RecordError(
            f"{kind}: negative leader_epoch {r.leader_epoch} or partition_epoch {r.partition_epoch}"
        )


def _check_partition_change(r: metadata_pb2.PartitionChangeRecord) -> None:
    kind = "PartitionChangeRecord"
    if r.partition_id < 0:
        raise RecordError(f"{kind}.partition_id: {r.partition_id} is negative")
    _topic_id(kind, r.topic_id)
    if r.leader < LEADER_UNCHANGED:
        raise RecordError(f"{kind}.leader: {r.leader} (use -1 for none, -2 for unchanged)")
    if r.HasField("isr"):
        _broker_ids(kind, "isr", tuple(r.isr.ids[:]), allow_empty=True)
    if r.HasField("replicas"):
        _broker_ids(kind, "replicas", tuple(r.replicas.ids[:]), allow_empty=False)
    for field in ("elr", "last_known_elr", "adding_replicas", "removing_replicas"):
        if r.HasField(field):
            _broker_ids(kind, field, tuple(getattr(r, field).ids[:]), allow_empty=True)


def _check_remove_topic(r: metadata_pb2.RemoveTopicRecord) -> None:
    _topic_id("RemoveTopicRecord", r.topic_id)


def _check_config(r: metadata_pb2.ConfigRecord) -> None:
    kind = "ConfigRecord"
    if r.resource_type not in _CONFIG_RESOURCE_TYPES:
        raise RecordError(f"{kind}.resource_type: {r.resource_type} unknown")
    if r.resource_type == metadata_pb2.CONFIG_RESOURCE_TOPIC and not r.resource_name:
        raise RecordError(f"{kind}.resource_name: empty for a topic")
    if not r.name:
        raise RecordError(f"{kind}.name: empty")


def _check_feature_level(r: metadata_pb2.FeatureLevelRecord) -> None:
    if not r.name:
        raise RecordError("FeatureLevelRecord.name: empty")
    if r.feature_level < 0:
        raise RecordError(f"FeatureLevelRecord.feature_level: {r.feature_level} is negative")


def _check_producer_ids(r: metadata_pb2.ProducerIdsRecord) -> None:
    # broker -1 / epoch -1: written by a snapshot, which knows no broker (as in Kafka)
    if r.broker_id < -1:
        raise RecordError(f"ProducerIdsRecord.broker_id: {r.broker_id} is negative")
    if r.next_producer_id <= 0:
        raise RecordError(f"ProducerIdsRecord.next_producer_id: {r.next_producer_id} is not positive")


def _check_offset_commit(r: metadata_pb2.OffsetCommitRecord) -> None:
    kind = "OffsetCommitRecord"
    if not r.group:
        raise RecordError(f"{kind}.group: empty")
    _topic_id(kind, r.topic_id)
    if r.partition < 0:
        raise RecordError(f"{kind}.partition: {r.partition} is negative")
    if r.offset < 0:
        raise RecordError(f"{kind}.offset: {r.offset} is negative")


def _check_remove_group_offsets(r: metadata_pb2.RemoveGroupOffsetsRecord) -> None:
    if not r.group:
        raise RecordError("RemoveGroupOffsetsRecord.group: empty")


def _check_group_rebalance(r: metadata_pb2.GroupRebalanceRecord) -> None:
    kind = "GroupRebalanceRecord"
    if not r.group:
        raise RecordError(f"{kind}.group: empty")
    if r.generation_id <= 0:
        raise RecordError(f"{kind}.generation_id: {r.generation_id} is not positive")
    member_ids = [m.member_id for m in r.members]
    if not all(member_ids) or len(set(member_ids)) != len(member_ids):
        raise RecordError(f"{kind}.members: member ids must be non-empty and distinct")
    if r.members and r.leader not in member_ids:
        raise RecordError(f"{kind}.leader: {r.leader!r} is not a member")
    for member in r.members:
        for topic in member.assignment:
            if not topic.topic or any(p < 0 for p in topic.partitions):
                raise RecordError(f"{kind}.members[].assignment: bad entry for member {member.member_id!r}")


def _check_access_control_entry(r: metadata_pb2.AccessControlEntryRecord) -> None:
    kind = "AccessControlEntryRecord"
    acl = acls.from_pb(r)
    problem = acls.binding_problem(acl.to_pb(), kind)
    if problem is not None:
        raise RecordError(problem)
    if r.id != acl.id:
        raise RecordError(f"{kind}.id: {r.id!r} is not the digest of its fields ({acl.id})")


def _check_remove_access_control_entry(r: metadata_pb2.RemoveAccessControlEntryRecord) -> None:
    if not r.id:
        raise RecordError("RemoveAccessControlEntryRecord.id: empty")


def _check_client_quota(r: metadata_pb2.ClientQuotaRecord) -> None:
    problem = quotas.record_problem(r)
    if problem is not None:
        raise RecordError(problem)


def _check_scram_user(kind: str, name: str, mechanism: str) -> None:
    problem = scram.name_problem(name)
    if problem is not None:
        raise RecordError(f"{kind}.name: {problem}")
    if mechanism not in scram.MECHANISMS:
        raise RecordError(f"{kind}.mechanism: {mechanism!r} is not one of {', '.join(scram.MECHANISMS)}")


def _check_user_scram_credential(r: metadata_pb2.UserScramCredentialRecord) -> None:
    kind = "UserScramCredentialRecord"
    _check_scram_user(kind, r.name, r.mechanism)
    if not 0 < len(r.salt) <= scram.SALT_BYTES_MAX:
        raise RecordError(f"{kind}.salt: {len(r.salt)} bytes, not 1 to {scram.SALT_BYTES_MAX}")
    size = scram.digest_bytes(r.mechanism)
    for field in ("stored_key", "server_key"):
        if len(getattr(r, field)) != size:
            raise RecordError(f"{kind}.{field}: {len(getattr(r, field))} bytes, {r.mechanism} makes {size}")
    if not scram.ITERATIONS_MIN <= r.iterations <= scram.ITERATIONS_MAX:
        raise RecordError(
            f"{kind}.iterations: {r.iterations} is not in [{scram.ITERATIONS_MIN}, {scram.ITERATIONS_MAX}]"
        )


def _check_scram_decoy_key(r: metadata_pb2.ScramDecoyKeyRecord) -> None:
    if len(r.key) != scram.DECOY_KEY_BYTES:
        raise RecordError(f"ScramDecoyKeyRecord.key: {len(r.key)} bytes, not {scram.DECOY_KEY_BYTES}")


def _check_transaction(r: metadata_pb2.TransactionRecord) -> None:
    kind = "TransactionRecord"
    problem = transactions.transactional_id_problem(r.transactional_id)
    if problem is not None:
        raise RecordError(f"{kind}.{problem}")
    if r.producer_id < 0 or not 0 <= r.producer_epoch <= transactions.PRODUCER_EPOCH_MAX + 1:
        raise RecordError(f"{kind}: producer {r.producer_id} epoch {r.producer_epoch} out of range")
    if r.timeout_ms <= 0:
        raise RecordError(f"{kind}.timeout_ms: {r.timeout_ms} is not positive")
    if any(not t.name or any(p < 0 for p in t.partitions) for t in r.topics):
        raise RecordError(f"{kind}.topics: a topic without a name or a negative partition")


def _check_txn_offset_commit(r: metadata_pb2.TxnOffsetCommitRecord) -> None:
    kind = "TxnOffsetCommitRecord"
    problem = transactions.transactional_id_problem(r.transactional_id)
    if problem is not None:
        raise RecordError(f"{kind}.{problem}")
    if not r.group:
        raise RecordError(f"{kind}.group: empty")
    _topic_id(kind, r.topic_id)
    if r.partition < 0 or r.offset < 0:
        raise RecordError(f"{kind}: partition {r.partition}, offset {r.offset}: negative")


def _check_remove_transaction(r: metadata_pb2.RemoveTransactionRecord) -> None:
    problem = transactions.transactional_id_problem(r.transactional_id)
    if problem is not None:
        raise RecordError(f"RemoveTransactionRecord.{problem}")


def _no_fields(_: Message) -> None:
    pass


_CHECKS: dict[str, Callable[[Any], None]] = {
    "register_broker": _check_register_broker,
    "unregister_broker": lambda r: _check_broker_epoch("UnregisterBrokerRecord", r.broker_id, r.broker_epoch),
    "fence_broker": lambda r: _check_broker_epoch("FenceBrokerRecord", r.id, r.epoch),
    "unfence_broker": lambda r: _check_broker_epoch("UnfenceBrokerRecord", r.id, r.epoch),
    "topic": _check_topic,
    "partition": _check_partition,
    "partition_change": _check_partition_change,
    "remove_topic": _check_remove_topic,
    "config": _check_config,
    "feature_level": _check_feature_level,
    "producer_ids": _check_producer_ids,
    "no_op": _no_fields,
    "offset_commit": _check_offset_commit,
    "remove_group_offsets": _check_remove_group_offsets,
    "group_rebalance": _check_group_rebalance,
    "access_control_entry": _check_access_control_entry,
    "remove_access_control_entry": _check_remove_access_control_entry,
    "client_quota": _check_client_quota,
    "user_scram_credential": _check_user_scram_credential,
    "remove_user_scram_credential": lambda r: _check_scram_user(
        "RemoveUserScramCredentialRecord", r.name, r.mechanism
    ),
    "transaction": _check_transaction,
    "txn_offset_commit": _check_txn_offset_commit,
    "remove_transaction": _check_remove_transaction,
    "scram_decoy_key": _check_scram_decoy_key,
}
assert set(_CHECKS) == {f.name for f in MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields}
