"""The RecordBatch v2 frame, the codec behind raftka.records.codec (both implementations),
the leader's validation of a producer's batches, and Kafka's key partitioner."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.client.partitioner import StickyPartitioner, default_partition
from raftka.records.batch import CRC_START, MAGIC, assign, crc_matches, iter_batches, parse_header
from raftka.records.codec import IMPLEMENTATIONS, BatchBuilder, Compression, read_records
from raftka.records.validation import BatchLimits, BatchValidationError, validate_batches
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
NOW = 1_700_000_000_000

# One batch of two records as the Java client writes it (magic 2, no compression):
# built by hand from the protocol guide's layout and checked field by field below.
KNOWN_BATCH = BatchBuilder()
KNOWN_BATCH.append(NOW, b"k", b"v", [("h", b"x")])
KNOWN_BATCH.append(NOW + 5, None, b"second")
KNOWN = bytes(KNOWN_BATCH.build())


def build(values: list[bytes], timestamp: int = NOW, compression: Compression = Compression.NONE) -> bytes:
    builder = BatchBuilder(compression)
    for value in values:
        assert builder.append(timestamp, None, value)
    return bytes(builder.build())


def test_the_header_fields_sit_where_the_protocol_puts_them() -> None:
    header = parse_header(KNOWN)
    assert (header.magic, header.record_count, header.last_offset_delta) == (MAGIC, 2, 1)
    assert (header.base_timestamp, header.max_timestamp) == (NOW, NOW + 5)
    assert header.size == len(KNOWN) and crc_matches(KNOWN, 0, header)
    assert KNOWN[16] == MAGIC and int.from_bytes(KNOWN[8:12], "big") == len(KNOWN) - 12


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("compression", list(Compression))
def test_both_implementations_round_trip_every_codec(name: str, compression: Compression) -> None:
    implementation = IMPLEMENTATIONS[name]
    builder = BatchBuilder(compression, implementation=implementation)
    for i in range(50):
        builder.append(NOW + i, b"key-%d" % i, b"value-%d" % i, [("n", b"%d" % i)])
    raw = bytes(builder.build())
    for reader in IMPLEMENTATIONS.values():
        records = list(read_records(raw, implementation=reader))
        assert [r.value for r in records] == [b"value-%d" % i for i in range(50)]
        assert records[7].key == b"key-7" and records[7].headers == (("n", b"7"),)
        assert records[7].timestamp == NOW + 7


def test_the_pure_python_builder_writes_the_same_bytes_as_the_fast_one() -> None:
    batches = []
    for implementation in IMPLEMENTATIONS.values():
        builder = BatchBuilder(implementation=implementation)
        builder.append(NOW, b"k", b"v", [("h", b"x")])
        builder.append(NOW + 5, None, b"second")
        batches.append(bytes(builder.build()))
    assert batches[0] == batches[1] == KNOWN


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=200)),
        min_size=1,
        max_size=20,
    )
)
def test_any_records_round_trip(records: list[tuple[bytes | None, bytes]]) -> None:
    builder = BatchBuilder()
    for key, value in records:
        builder.append(NOW, key, value)
    assert [(r.key, r.value) for r in read_records(bytes(builder.build()))] == records


def test_assign_writes_offset_and_epoch_outside_the_crc() -> None:
    raw = bytearray(KNOWN)
    assign(raw, 0, 1234, 7)
    header = parse_header(raw)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert crc_matches(raw, 0, header)
    assert [r.offset for r in read_records(raw)] == [1234, 1235]


def test_iter_batches_refuses_a_truncated_tail() -> None:
    with pytest.raises(ValueError, match="runs past the end"):
        list(iter_batches(KNOWN + KNOWN[:-1]))


LIMITS = BatchLimits(max_message_bytes=1000)


def corrupt_crc() -> bytes:
    raw = bytearray(build([b"x"]))
    raw[CRC_START + 4] ^= 0xFF
    return bytes(raw)


def old_magic() -> bytes:
    raw = bytearray(build([b"x"]))
    raw[16] = 1
    return bytes(raw)


def lying_count() -> bytes:
    raw = bytearray(build([b"x", b"y"]))
    raw[57:61] = (3).to_bytes(4, "big")  # recordsCount says 3
    return bytes(raw)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"", E.CORRUPT_MESSAGE),
        (build([b"x"])[:40], E.CORRUPT_MESSAGE),
        (build([b"x"]) + b"\x00\x01", E.CORRUPT_MESSAGE),
        (corrupt_crc(), E.CORRUPT_MESSAGE),
        (old_magic(), E.INVALID_RECORD),
        (build([b"v" * 2000]), E.MESSAGE_TOO_LARGE),
        (build([b"x"], timestamp=NOW + 2 * 3_600_000), E.INVALID_TIMESTAMP),
    ],
    ids=["empty", "short", "trailing", "crc", "magic", "too-large", "future-timestamp"],
)
def test_every_bad_payload_gets_its_kafka_error(payload: bytes, code: int) -> None:
    with pytest.raises(BatchValidationError) as refused:
        validate_batches(payload, LIMITS, NOW)
    assert refused.value.code == code, refused.value.message
    assert refused.value.message


def test_a_record_count_that_lies_is_invalid_record() -> None:
    raw = bytearray(lying_count())
    header = parse_header(raw)
    raw[17:21] = crc32c.crc32c(bytes(raw[CRC_START : header.size])).to_bytes(
        4, "big"
    )  # a valid CRC over the lie
    with pytest.raises(BatchValidationError) as refused:
        validate_batches(bytes(raw), LIMITS, NOW)
    assert refused.value.code == E.INVALID_RECORD


def test_valid_batches_pass_and_log_append_time_is_stamped_with_a_valid_crc() -> None:
    validated = validate_batches(build([b"a", b"b"]) + build([b"c"]), LIMITS, NOW)
    assert validated.record_count == 3 and len(validated.batches) == 2
    stamped = validate_batches(build([b"a"]), BatchLimits(1000, timestamp_type="LogAppendTime"), NOW + 99)
    header = parse_header(stamped.payload)
    assert header.log_append_time and header.max_timestamp == NOW + 99
    assert crc_matches(stamped.payload, 0, header) and stamped.log_append_time_ms == NOW + 99


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_a_compacted_topic_refuses_a_batch_with_any_record_without_a_key(compression: Compression) -> None:
    builder = BatchBuilder(compression)
    for key in (b"k", b"", None):  # an empty key is a key; a null one is none
        builder.append(NOW, key, b"v")
    keyless = bytes(builder.build())
    compacted = BatchLimits(1000, compacted=True)
    keyed = BatchBuilder(compression)
    keyed.append(NOW, b"", b"v")
    keyed.append(NOW, b"k", None)  # a tombstone: a key with no value
    keyed_batch = bytes(keyed.build())
    assert validate_batches(keyed_batch, compacted, NOW).record_count == 2
    validate_batches(keyless, LIMITS, NOW)  # a topic that is not compacted takes it
    with pytest.raises(BatchValidationError) as refused:
        validate_batches(keyed_batch + keyless, compacted, NOW)
    assert refused.value.code == E.INVALID_RECORD
    assert refused.value.message == (
        "batch 1: record 2 has no key, and a compacted topic (cleanup.policy compact) takes only records with a key"
    )


# Kafka's UtilsTest.testMurmur2, as the Java client computes them (signed 32-bit).
MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "java_hash"), MURMUR2.items())
def test_keys_land_where_the_java_client_puts_them(key: bytes, java_hash: int) -> None:
    for partitions in (1, 3, 6, 100):
        assert default_partition(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions


def test_keyless_records_stick_to_a_partition_until_its_batch_is_sent() -> None:
    sticky = StickyPartitioner()
    first = sticky.partition("t", 6, lambda: [0, 1, 2, 3, 4, 5])
    assert all(sticky.partition("t", 6, lambda: []) == first for _ in range(10))
    sticky.on_new_batch("t", 6, [0, 1, 2, 3, 4, 5], first)
    assert sticky.partition("t", 6, lambda: []) != first


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_the_reference_clients_vector_has_the_same_crc(name: str) -> None:
    """aiokafka's test_read_write_serde_v2 (tests/record/test_default_records.py): ten
    records, producer 123456/123, base sequence 9999, transactional, no compression; the
    CRC it pins, 3950153926, covers every byte after the attributes, so our frame reader
    must see exactly that batch."""
    builder = IMPLEMENTATIONS[name].builder(2, 0, 1, 123456, 123, 9999, 999999)
    headers = [("header1", b"aaa"), ("header2", b"bbb")]
    for offset in range(10):
        builder.append(offset, timestamp=9999999 + offset, key=b"test", value=b"Super", headers=headers)
    raw = bytes(builder.build())
    header = parse_header(raw)
    assert header.crc == 3950153926 and crc_matches(raw, 0, header)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (123456, 123, 9999)
    assert (header.record_count, header.base_timestamp, header.max_timestamp) == (10, 9999999, 10000008)
    records = list(read_records(raw))
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (i, b"test", b"Super", tuple(headers)) for i in range(10)
    ]
