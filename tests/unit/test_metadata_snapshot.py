"""Snapshots: the image as records, rebuilt exactly; snapshot + tail = the whole log."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import BROKER, EMPTY, MetadataImage
from raftka.metadata.snapshot import SnapshotError, decode_image, encode_image, read_snapshot
from tests.unit import metadata_support as m
from tests.unit.metadata_support import Record, replay

T1, T2 = m.topic_id(1), m.topic_id(2)


def populated() -> MetadataImage:
    return replay(
        EMPTY,
        m.feature("metadata.version", 2),
        m.register(1, 3, fenced=False, rack="r1"),
        m.register(2, 4),
        m.producer_ids(5000),
        m.topic("b", T2),
        m.partition(T2, 0, [1, 2], isr=[2], leader=2, leader_epoch=3, partition_epoch=8),
        m.topic("a", T1),
        m.partition(T1, 1, [2, 1], isr=[], leader=-1),
        m.partition(T1, 0, [1]),
        m.config("a", "retention.ms", "100"),
        m.config("1", "log.retention.ms", "7", resource_type=BROKER),
        m.commit("g", T1, 0, 42, "meta", ts=99),
        m.commit("g", T2, 0, 1),
        m.group_rebalance("g", 3, ["m1", "m2"], assignment=[("a", [0, 1])]),
        m.group_rebalance("only-members", 1, ["x"]),
        m.scram_credential("alice", "SCRAM-SHA-512"),
        m.scram_credential("alice", "SCRAM-SHA-256"),
        m.scram_credential("bob", "SCRAM-SHA-256"),
        m.remove_scram_credential("bob", "SCRAM-SHA-256"),
        m.unregister(2, 4),  # no record restates broker 2, but b-0 and a-1 keep its id
        offset=1234,
    )


def test_round_trip_of_every_part_of_the_image() -> None:
    image = populated()
    assert decode_image(encode_image(image)) == image


def test_a_group_whose_offsets_were_removed_is_not_in_the_snapshot() -> None:
    image = replay(populated(), m.commit("h", T1, 0, 7), m.remove_group_offsets("g"))
    assert set(image.offsets) == {"h"}
    assert decode_image(encode_image(image)) == image


def test_the_empty_image_round_trips() -> None:
    assert decode_image(encode_image(EMPTY)) == EMPTY


def test_the_same_image_always_encodes_to_the_same_bytes() -> None:
    image = populated()
    data = encode_image(image, timestamp_ms=5)
    assert encode_image(decode_image(data), timestamp_ms=5) == data


def test_header_carries_offset_and_timestamp() -> None:
    contents = read_snapshot(encode_image(populated(), timestamp_ms=1_700_000_000_123))
    assert contents.offset == 1234 and contents.timestamp_ms == 1_700_000_000_123
    # one per record of populated() but broker 2's registration and unregistration, and
    # bob's credential and its removal
    assert len(contents.records) == 16


def test_about_forty_bytes_per_partition() -> None:
    brokers = [m.register(b, b) for b in (101, 102, 103)]
    image = replay(
        EMPTY, *brokers, m.topic("t", T1), *(m.partition(T1, p, [101, 102, 103]) for p in range(1000))
    )
    per_partition = len(encode_image(image)) / 1000
    assert per_partition < 50, per_partition  # KRaft: about 100


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda d: d[:10], "too short"),
        (lambda d: b"XXXX" + d[4:], "not a version 1 metadata snapshot"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC-32C"),
        (lambda d: d[:-2], "CRC-32C"),
    ],
)
def test_damaged_snapshots_are_refused(damage, problem: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SnapshotError, match=problem):
        decode_image(damage(encode_image(populated())))


def _framed(body: bytes, count: int, offset: int = 0) -> bytes:
    import crc32c

    return struct.pack(">4sHqqII", b"RKMI", 1, offset, -1, count, crc32c.crc32c(body)) + body


def test_framing_errors_behind_a_valid_crc_are_refused() -> None:
    record = m.no_op().SerializeToString()
    framed = struct.pack(">I", len(record)) + record
    with pytest.raises(SnapshotError, match="after the last of 1 records"):
        read_snapshot(_framed(framed + b"x", 1))
    with pytest.raises(SnapshotError, match="runs past the end"):
        read_snapshot(_framed(struct.pack(">I", 99) + record, 1))
    with pytest.raises(SnapshotError, match="cannot fit"):
        read_snapshot(_framed(framed, 1_000_000))
    with pytest.raises(SnapshotError, match="negative offset"):
        read_snapshot(_framed(framed, 1, offset=-5))


def test_a_record_that_does_not_replay_is_named() -> None:
    record = m.partition(T1, 0, [1]).SerializeToString()  # no TopicRecord before it
    with pytest.raises(SnapshotError, match="snapshot record 0: PartitionRecord: unknown topic id"):
        decode_image(_framed(struct.pack(">I", len(record)) + record, 1))


def _replay_batches(image: MetadataImage, log: list[Record], cuts: list[int]) -> MetadataImage:
    """``log`` replayed as batches ending at each cut, one delta per batch."""
    start = image.offset
    for end in sorted({c for c in cuts if start < c < len(log)} | {len(log)}):
        delta = MetadataDelta(image)
        for record in log[start:end]:
            delta.replay(record)
        image = delta.apply(end)
        start = end
    return image


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_snapshot_plus_tail_equals_the_whole_log(data: st.DataObject) -> None:
    log = data.draw(m.valid_log())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=8)))
    full = _replay_batches(EMPTY, log, cuts)
    at = data.draw(st.sampled_from([0, *cuts, len(log)]))
    snapshot = encode_image(_replay_batches(EMPTY, log[:at], cuts))
    rebuilt = _replay_batches(decode_image(snapshot), log, cuts)
    assert rebuilt == full
    assert encode_image(rebuilt) == encode_image(full)
    # and how the log was cut into batches does not matter
    assert _replay_batches(EMPTY, log, []) == full
