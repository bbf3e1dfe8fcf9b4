"""Metadata records: every type round-trips, prints like kafka-dump-log, and bad bytes are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftka.metadata import records
from raftka.metadata.records import RecordError
from raftka.v1 import metadata_pb2 as pb
from tests.unit import metadata_support as m

TID = m.topic_id(0x0123456789ABCDEF)

EVERY_TYPE = {
    "REGISTER_BROKER_RECORD": m.register(101, 7, rack="r1"),
    "UNREGISTER_BROKER_RECORD": m.unregister(101, 7),
    "FENCE_BROKER_RECORD": m.fence(101, 7),
    "UNFENCE_BROKER_RECORD": m.unfence(101, 7),
    "TOPIC_RECORD": m.topic("orders", TID),
    "PARTITION_RECORD": m.partition(TID, 3, [101, 102, 103], leader_epoch=2, partition_epoch=5),
    "PARTITION_CHANGE_RECORD": m.change(TID, 3, leader=102, isr=[102, 103]),
    "REMOVE_TOPIC_RECORD": m.remove(TID),
    "CONFIG_RECORD": m.config("orders", "retention.ms", "1000"),
    "FEATURE_LEVEL_RECORD": m.feature("metadata.version", 1),
    "PRODUCER_IDS_RECORD": m.producer_ids(1000, broker_id=101, broker_epoch=7),
    "NO_OP_RECORD": m.no_op(),
    "OFFSET_COMMIT_RECORD": m.commit("g", TID, 3, 42, "meta", ts=1_700_000_000_000),
    "REMOVE_GROUP_OFFSETS_RECORD": m.remove_group_offsets("g"),
    "TRANSACTION_RECORD": m.transaction("tx", 5, 1, pb.TXN_ONGOING, [("orders", 3)], ["g"]),
    "TXN_OFFSET_COMMIT_RECORD": m.txn_offset_commit("tx", 5, 1, "g", TID, 3, 42),
    "REMOVE_TRANSACTION_RECORD": pb.MetadataRecord(
        remove_transaction=pb.RemoveTransactionRecord(transactional_id="tx")
    ),
    "GROUP_REBALANCE_RECORD": m.group_rebalance("g", 3, ["m1", "m2"], assignment=[("orders", [0, 1])]),
    "ACCESS_CONTROL_ENTRY_RECORD": m.acl("User:CN=alice,OU=client,O=raftka", "CREATE", "TOPIC", "orders"),
    "REMOVE_ACCESS_CONTROL_ENTRY_RECORD": m.remove_acl("0123456789abcdef0123456789abcdef"),
    "CLIENT_QUOTA_RECORD": m.client_quota("alice", "<default>", "producer_byte_rate", 1024.0),
    "USER_SCRAM_CREDENTIAL_RECORD": m.scram_credential("alice"),
    "REMOVE_USER_SCRAM_CREDENTIAL_RECORD": m.remove_scram_credential("alice"),
    "SCRAM_DECOY_KEY_RECORD": pb.MetadataRecord(scram_decoy_key=pb.ScramDecoyKeyRecord(key=bytes(32))),
}


def test_every_record_type_is_covered() -> None:
    oneof = pb.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"]
    assert {records.type_name(r) for r in EVERY_TYPE.values()} == {
        f"{f.name.upper()}_RECORD" for f in oneof.fields
    }


@pytest.mark.parametrize("name", sorted(EVERY_TYPE))
def test_round_trip_and_type_name(name: str) -> None:
    record = EVERY_TYPE[name]
    decoded = records.decode(records.encode(record))
    assert decoded == record
    assert records.type_name(decoded) == name


def test_topic_ids_print_as_kafka_uuids() -> None:
    # Kafka's Uuid.toString(): base64url, no padding, 22 characters
    assert records.topic_id_str(TID) == "AAAAAAAAAAABI0VniavN7w"
    assert records.to_json(EVERY_TYPE["TOPIC_RECORD"]) == {
        "name": "orders",
        "topic_id": "AAAAAAAAAAABI0VniavN7w",
    }


def test_json_keeps_every_field_with_numbers_as_numbers() -> None:
    assert records.to_json(EVERY_TYPE["PARTITION_RECORD"]) == {
        "partition_id": 3,
        "topic_id": records.topic_id_str(TID),
        "replicas": [101, 102, 103],
        "isr": [101, 102, 103],
        "leader": 101,
        "leader_epoch": 2,
        "partition_epoch": 5,
        "elr": [],
        "last_known_elr": [],
        "adding_replicas": [],
        "removing_replicas": [],
    }
    assert records.to_json(EVERY_TYPE["REGISTER_BROKER_RECORD"]) == {
        "broker_id": 101,
        "incarnation_id": "inc-101-7",
        "broker_epoch": 7,
        "endpoints": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
        "rack": "r1",
        "fenced": True,
        "log_dir_id": records.topic_id_str(m.log_dir_id(101)),  # a Uuid too, as Kafka prints directory ids
        "crashed": False,
    }
    assert records.to_json(EVERY_TYPE["NO_OP_RECORD"]) == {}
    assert records.to_json(EVERY_TYPE["REMOVE_GROUP_OFFSETS_RECORD"]) == {"group": "g"}


def test_json_leaves_out_what_a_record_leaves_unset() -> None:
    assert records.to_json(m.change(TID, 0, isr=[1])) == {
        "partition_id": 0,
        "topic_id": records.topic_id_str(TID),
        "isr": [1],
        "leader": -2,
    }
    assert records.to_json(m.config("t", "retention.ms", None)) == {
        "resource_type": 2,
        "resource_name": "t",
        "name": "retention.ms",
    }


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "holds no record"),
        (b"\xff\xff\xff", "not a MetadataRecord"),
        (records.encode(EVERY_TYPE["PARTITION_RECORD"])[:-3], "not a MetadataRecord"),
        (b"\xa2\x06\x00", "holds no record"),  # field 100: a type from a newer version
    ],
)
def test_damaged_bytes_raise_record_error(data: bytes, problem: str) -> None:
    with pytest.raises(RecordError, match=problem):
        records.decode(data)


@given(st.binary(max_size=64))
def test_decode_of_any_bytes_returns_a_checked_record_or_raises_record_error(data: bytes) -> None:
    try:
        record = records.decode(data)
    except RecordError:
        return
    records.check(record)


def _scram_with(**fields: object) -> pb.MetadataRecord:
    record = m.scram_credential("alice")
    for name, value in fields.items():
        setattr(record.user_scram_credential, name, value)
    return record


def _with_log_dir_id(record: pb.MetadataRecord, log_dir_id: bytes) -> pb.MetadataRecord:
    record.register_broker.log_dir_id = log_dir_id
    return record


MALFORMED = [
    (m.topic("t", b"\x01" * 15), "TopicRecord.topic_id: 15 bytes"),
    (m.topic("t", bytes(16)), "TopicRecord.topic_id: the zero UUID"),
    (m.topic("", TID), "TopicRecord.name: empty"),
    (m.partition(TID, -1, [1]), "PartitionRecord.partition_id"),
    (m.partition(TID, 0, []), "PartitionRecord.replicas: empty"),
    (m.partition(TID, 0, [1, 1]), "PartitionRecord.replicas: duplicate"),
    (m.partition(TID, 0, [1, 2], isr=[3]), "PartitionRecord.isr: \\[3\\] not within replicas"),
    (m.partition(TID, 0, [1, 2], isr=[2], leader=1), "PartitionRecord.leader: 1 is not in isr"),
    (m.change(TID, 0, leader=-3), "PartitionChangeRecord.leader: -3"),
    (m.change(TID, 0, isr=[2, 2]), "PartitionChangeRecord.isr: duplicate"),
    (m.change(TID, 0, replicas=[]), "PartitionChangeRecord.replicas: empty"),
    (m.register(-1, 0), "RegisterBrokerRecord.broker_id"),
    (m.register(1, 0, port=70000), "RegisterBrokerRecord.endpoints.port"),
    (_with_log_dir_id(m.register(1, 0), b"\x01" * 3), "RegisterBrokerRecord.log_dir_id: 3 bytes"),
    (m.fence(1, -1), "FenceBrokerRecord: broker epoch -1"),
    (m.config("t", "k", "v", resource_type=0), "ConfigRecord.resource_type: 0 unknown"),
    (m.config("", "k", "v"), "ConfigRecord.resource_name: empty for a topic"),
    (m.config("t", "", "v"), "ConfigRecord.name: empty"),
    (m.producer_ids(0), "ProducerIdsRecord.next_producer_id"),
    (m.commit("", TID, 0, 1), "OffsetCommitRecord.group: empty"),
    (m.commit("g", TID, 0, -1), "OffsetCommitRecord.offset: -1"),
    (m.remove_group_offsets(""), "RemoveGroupOffsetsRecord.group: empty"),
    (m.feature("", 1), "FeatureLevelRecord.name: empty"),
    (m.scram_credential(""), "UserScramCredentialRecord.name: empty"),
    (_scram_with(mechanism="SCRAM-MD5"), "UserScramCredentialRecord.mechanism: 'SCRAM-MD5'"),
    (
        _scram_with(stored_key=b"short"),
        "UserScramCredentialRecord.stored_key: 5 bytes, SCRAM-SHA-512 makes 64",
    ),
    (m.scram_credential("a", iterations=1000), "UserScramCredentialRecord.iterations: 1000 is not in"),
    (m.remove_scram_credential("a", "PLAIN"), "RemoveUserScramCredentialRecord.mechanism: 'PLAIN'"),
]


@pytest.mark.parametrize(("record", "problem"), MALFORMED)
def test_malformed_records_are_neither_written_nor_read(record: pb.MetadataRecord, problem: str) -> None:
    with pytest.raises(RecordError, match=problem):
        records.encode(record)
    with pytest.raises(RecordError, match=problem):
        records.decode(record.SerializeToString())


def test_an_empty_record_is_not_written() -> None:
    with pytest.raises(RecordError, match="holds no record"):
        records.encode(pb.MetadataRecord())
