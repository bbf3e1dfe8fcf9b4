"""Snapshots of the metadata image: the records that rebuild it, as KRaft writes them.

A snapshot is not a second format for the image: it is the shortest sequence of
ordinary ``MetadataRecord``s that rebuilds it, replayed by the same ``MetadataDelta``
as the log, so loading a snapshot cannot mean something else than replaying the log.

Layout, big-endian::

    magic         4s   b"RKMI"
    version       u16
    offset        i64  the image's offset: the next offset after what it includes
    timestamp_ms  i64  of the last batch the image includes; -1 when unknown
    record_count  u32
    crc           u32  CRC-32C of every byte after the header
    records       record_count x (u32 length, MetadataRecord)

Records come in a fixed order (features, brokers, producer ids, topics by name with
their configs and partitions, other configs, offsets, groups' last rebalances, ACLs,
client quotas, SCRAM credentials, transactions and their pending offsets), so every replica writes the same bytes for the same
image. A partition costs about 45 bytes.
Brokers come before the partitions that name them; a partition may still name a broker
that has unregistered, which no record restates, so the delta replaying a snapshot
does not ask a PartitionRecord for registered brokers (``MetadataDelta(snapshot=True)``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from raftka.metadata import quotas, records
from raftka.metadata.delta import MetadataDelta, ReplayError
from raftka.metadata.image import TOPIC, GroupGeneration, MetadataImage
from raftka.metadata.records import MetadataRecord, RecordError
from raftka.security.scram import ScramCredential
from raftka.v1 import metadata_pb2

_HEADER = struct.Struct(">4sHqqII")
_LENGTH = struct.Struct(">I")
_MAGIC = b"RKMI"
_VERSION = 1


class SnapshotError(Exception):
    """Snapshot data that does not rebuild an image; the message says where it went wrong."""


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    offset: int
    timestamp_ms: int
    records: tuple[bytes, ...]  # serialized MetadataRecords, not yet decoded


def encode_image(image: MetadataImage, *, timestamp_ms: int = -1) -> bytes:
    body = bytearray()
    count = 0
    for record in _image_records(image):
        # no records.check: everything in an image passed it (and replay) on the way in
        data = record.SerializeToString(deterministic=True)
        body += _LENGTH.pack(len(data))
        body += data
        count += 1
    return _HEADER.pack(_MAGIC, _VERSION, image.offset, timestamp_ms, count, crc32c.crc32c(body)) + body


def decode_image(data: bytes) -> MetadataImage:
    return rebuild_image(read_snapshot(data))


def rebuild_image(contents: SnapshotContents) -> MetadataImage:
    """Replay checked snapshot contents (``read_snapshot``) into the image they hold."""
    delta = MetadataDelta(MetadataImage(), snapshot=True)
    for index, raw in enumerate(contents.records):
        try:
            delta.replay(records.decode(raw))
        except (RecordError, ReplayError) as exc:
            raise SnapshotError(f"snapshot record {index}: {exc}") from None
    return delta.apply(contents.offset)


def read_snapshot(data: bytes) -> SnapshotContents:
    """The header and the framed records, checked (CRC, framing) but not decoded."""
    if len(data) < _HEADER.size:
        raise SnapshotError(f"{len(data)} bytes is too short for a metadata snapshot header")
    magic, version, offset, timestamp_ms, count, crc = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _VERSION:
        raise SnapshotError(
            f"not a version {_VERSION} metadata snapshot (magic {magic!r}, version {version})"
        )
    if offset < 0:
        raise SnapshotError(f"negative offset {offset}")
    with memoryview(data) as view, view[_HEADER.size :] as body:
        if crc32c.crc32c(body) != crc:
            raise SnapshotError("CRC-32C of the metadata snapshot does not match its header")
    if count > (len(data) - _HEADER.size) // _LENGTH.size:
        raise SnapshotError(f"{count} records cannot fit in {len(data) - _HEADER.size} bytes")
    found = []
    position = _HEADER.size
    unpack = _LENGTH.unpack_from
    for index in range(count):
        if position + _LENGTH.size > len(data):
            raise SnapshotError(f"record {index} of {count} starts past the end")
        (size,) = unpack(data, position)
        position += _LENGTH.size
        if position + size > len(data):
            raise SnapshotError(f"record {index} of {size} bytes runs past the end")
        found.append(data[position : position + size])
        position += size
    if position != len(data):
        raise SnapshotError(f"{len(data) - position} bytes after the last of {count} records")
    return SnapshotContents(offset, timestamp_ms, tuple(found))


def _image_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    for name, level in sorted(image.features.items()):
        yield MetadataRecord(feature_level=metadata_pb2.FeatureLevelRecord(name=name, feature_level=level))
    for _, broker in sorted(image.brokers.items()):
        yield MetadataRecord(
            register_broker=metadata_pb2.RegisterBrokerRecord(
                broker_id=broker.broker_id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.epoch,
                endpoints=[
                    metadata_pb2.BrokerEndpoint(name=e.name, host=e.host, port=e.port)
                    for e in broker.endpoints
                ],
                rack=broker.rack,
                fenced=broker.fenced,
                log_dir_id=broker.log_dir_id,
                crashed=broker.crashed,
            )
        )
    if image.next_producer_id > 0:
        # no broker asked for this block: -1, as Kafka writes it in snapshots
        producer_ids = metadata_pb2.ProducerIdsRecord(
            broker_id=-1, broker_epoch=-1, next_producer_id=image.next_producer_id
        )
        yield MetadataRecord(producer_ids=producer_ids)
    for name, topic_id in sorted(image.topic_ids_by_name.items()):
        yield MetadataRecord(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id))
        yield from _config_records((TOPIC, name), image.configs.get((TOPIC, name), {}))
        for partition_id, p in sorted(image.topics_by_id[topic_id].partitions.items()):
            yield MetadataRecord(
                partition=metadata_pb2.PartitionRecord(
                    partition_id=partition_id,
                    topic_id=topic_id,
                    replicas=p.replicas,
                    isr=p.isr,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    elr=p.elr,
                    last_known_elr=p.last_known_elr,
                    adding_replicas=p.adding_replicas,
                    removing_replicas=p.removing_replicas,
                )
            )
    for resource, configs in sorted(image.configs.items()):
        if resource[0] != TOPIC:
            yield from _config_records(resource, configs)
    for group, committed in sorted(image.offsets.items()):
        for (topic_id, partition), c in sorted(committed.items()):
            yield MetadataRecord(
                offset_commit=metadata_pb2.OffsetCommitRecord(
                    group=group,
                    topic_id=topic_id,
                    partition=partition,
                    offset=c.offset,
                    metadata=c.metadata,
                    commit_timestamp_ms=c.commit_timestamp_ms,
                )
            )
    for group, g in sorted(image.groups.items()):
        yield MetadataRecord(group_rebalance=group_rebalance_record(group, g))
    for _, acl in sorted(image.acls.items()):
        yield MetadataRecord(access_control_entry=acl.record())
    for entity, values in sorted(image.client_quotas.items(), key=lambda item: item[0].sort_key()):
        for key, value in sorted(values.items()):
            yield MetadataRecord(client_quota=quotas.record(entity, key, value))
    for (name, mechanism), c in sorted(image.scram_credentials.items()):
        yield MetadataRecord(user_scram_credential=scram_record(name, mechanism, c))
    if image.scram_decoy_key:
        yield MetadataRecord(scram_decoy_key=metadata_pb2.ScramDecoyKeyRecord(key=image.scram_decoy_key))
    for _, txn in sorted(image.transactions.items()):
        yield MetadataRecord(transaction=txn)
    for transactional_id, pending in sorted(image.txn_offsets.items()):
        txn = image.transactions[transactional_id]
        for (group, topic_id, partition), c in sorted(pending.items()):
            yield MetadataRecord(
                txn_offset_commit=metadata_pb2.TxnOffsetCommitRecord(
                    transactional_id=transactional_id,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    group=group,
                    topic_id=topic_id,
                    partition=partition,
                    offset=c.offset,
                    metadata=c.metadata,
                    commit_timestamp_ms=c.commit_timestamp_ms,
                )
            )


def scram_record(name: str, mechanism: str, c: ScramCredential) -> metadata_pb2.UserScramCredentialRecord:
    return metadata_pb2.UserScramCredentialRecord(
        name=name,
        mechanism=mechanism,
        salt=c.salt,
        stored_key=c.stored_key,
        server_key=c.server_key,
        iterations=c.iterations,
    )


def group_rebalance_record(group: str, g: GroupGeneration) -> metadata_pb2.GroupRebalanceRecord:
    return metadata_pb2.GroupRebalanceRecord(
        group=group,
        generation_id=g.generation_id,
        protocol_type=g.protocol_type,
        protocol_name=g.protocol_name,
        leader=g.leader,
        members=[
            metadata_pb2.GroupMemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                assignment=[
                    metadata_pb2.GroupAssignedTopic(topic=t, partitions=ps) for t, ps in m.assignment
                ],
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
            )
            for m in g.members
        ],
        coordinator=g.coordinator,
        timestamp_ms=g.timestamp_ms,
    )


def _config_records(resource: tuple[int, str], configs: dict[str, str]) -> Iterator[MetadataRecord]:
    resource_type, resource_name = resource
    for name, value in sorted(configs.items()):
        yield MetadataRecord(
            config=metadata_pb2.ConfigRecord(
                resource_type=resource_type, resource_name=resource_name, name=name, value=value
            )
        )
