"""The on-disk batch format: exact layout, round trips, and damage reported, never raised."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.raft.batch import Batch, BatchKind
from raftka.raft.storage import batch_codec
from raftka.raft.storage.batch_codec import (
    HEADER_BYTES,
    check_crcs,
    decode_frame,
    encode_batch,
    encode_batches,
    find_valid_frame,
    frame_bytes,
    iter_frames,
)
from tests.unit.storage_support import make_batches, raw_frame


def test_layout_is_big_endian_with_crc_over_everything_after_it() -> None:
    batch = Batch(7, 3, 1234, BatchKind.LEADER_CHANGE, (b"ab", b""))
    data = encode_batch(batch)
    assert data == raw_frame((7, 3, 2, 1234, 1), b"\x00\x00\x00\x02ab\x00\x00\x00\x00")
    assert struct.unpack_from(">I", data, 4)[0] == crc32c.crc32c(data[8:])
    assert len(data) == frame_bytes(batch) == HEADER_BYTES + 4 + 2 + 4


def test_encode_batches_is_the_concatenation() -> None:
    batches = make_batches(0, 5)
    assert encode_batches(batches) == b"".join(encode_batch(b) for b in batches)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**31 - 1),
            st.integers(-(2**63), 2**63 - 1),
            st.sampled_from(BatchKind),
            st.lists(st.binary(max_size=40), min_size=1, max_size=6),
        ),
        max_size=5,
    )
)
def test_round_trip(specs: list[tuple[int, int, BatchKind, list[bytes]]]) -> None:
    batches, offset = [], 0
    for epoch, timestamp_ms, kind, records in specs:
        batches.append(Batch(offset, epoch, timestamp_ms, kind, tuple(records)))
        offset += len(records)
    frames = list(iter_frames(encode_batches(batches)))
    assert [f.batch for f in frames] == batches
    assert all(f.error is None and f.crc_valid for f in frames)


def test_every_cut_point_reports_a_torn_frame_where_the_batch_starts() -> None:
    first, second = make_batches(0, 2)
    data = encode_batches([first, second])
    start = len(encode_batch(first))
    for cut in range(start + 1, len(data)):
        frames = list(iter_frames(data[:cut]))
        assert [f.batch for f in frames[:-1]] == [first]
        assert frames[-1].batch is None and frames[-1].position == start and frames[-1].error


def test_any_flipped_byte_is_detected() -> None:
    data = encode_batch(make_batches(0, 1, records=3)[0])
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        frame = decode_frame(bytes(damaged), 0)
        assert frame.batch is None and frame.error, position


def test_crc_mismatch_keeps_the_header_for_diagnosis() -> None:
    data = bytearray(encode_batch(make_batches(40, 1)[0]))
    data[-1] ^= 0xFF
    frame = decode_frame(bytes(data), 0)
    assert "CRC-32C mismatch" in (frame.error or "")
    assert not frame.crc_valid and frame.header is not None and frame.header.base_offset == 40
    assert frame.end == len(data)


@pytest.mark.parametrize(
    ("fields", "body", "error"),
    [
        ((0, 1, 1, 0, 9), b"\x00\x00\x00\x00", "unknown batch kind 9"),
        ((-1, 1, 1, 0, 0), b"\x00\x00\x00\x00", "negative base offset"),
        ((0, -1, 1, 0, 0), b"\x00\x00\x00\x00", "negative base offset"),
        ((0, 1, 0, 0, 0), b"\x00\x00\x00\x00", "record count 0"),
        ((0, 1, 2, 0, 0), b"\x00\x00\x00\x00", "record count 2 impossible"),
        ((0, 1, 2, 0, 0), b"\x00\x00\x00\x00\x00\x00\x00\x09", "record 1 of 9 bytes runs past"),
        ((0, 1, 1, 0, 0), b"\x00\x00\x00\x00\x00", "1 bytes after the last"),
        ((0, 1, 1, 0, 0), b"\x00\x00\x00\x05ab", "record 0 of 5 bytes runs past"),
    ],
)
def test_impossible_content_behind_a_valid_crc_is_rejected(
    fields: tuple[int, int, int, int, int], body: bytes, error: str
) -> None:
    frame = decode_frame(raw_frame(fields, body), 0)
    assert frame.batch is None and frame.crc_valid
    assert error in (frame.error or "")


@pytest.mark.parametrize("length", [0, 32, batch_codec.MAX_BATCH_BYTES + 1, 2**32 - 1])
def test_length_out_of_bounds_is_rejected_before_reading(length: int) -> None:
    data = bytearray(encode_batch(make_batches(0, 1)[0]))
    struct.pack_into(">I", data, 0, length)
    frame = decode_frame(bytes(data), 0)
    assert frame.batch is None and frame.end is None and "outside" in (frame.error or "")


def test_short_header_is_torn() -> None:
    frame = decode_frame(b"\x00" * 10, 0)
    assert frame.header is None and frame.error == f"incomplete batch header: 10 of {HEADER_BYTES} bytes"


def test_encoder_refuses_oversized_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_codec, "MAX_BATCH_BYTES", 64)
    out = bytearray(b"kept")
    with pytest.raises(ValueError, match="over 64"):
        batch_codec.encode_into(out, Batch(0, 0, 0, BatchKind.DATA, (b"x" * 100,)))
    assert out == b"kept"


def test_find_valid_frame_skips_garbage_but_not_zeros() -> None:
    frame = encode_batch(make_batches(9, 1)[0])
    garbage = bytes(range(250)) * 2
    assert find_valid_frame(garbage + frame, 0) == len(garbage)
    assert find_valid_frame(garbage + frame, len(garbage) + 1) is None
    assert find_valid_frame(b"\x00" * 4096, 0) is None


def test_check_crcs_counts_every_frame_and_each_flipped_byte_once() -> None:
    batches = make_batches(0, 5, records=3)
    data = encode_batches(batches)
    assert check_crcs(data) == (5, 0, 0)
    second = len(encode_batch(batches[0]))
    for position in (second + 4, second + HEADER_BYTES, len(data) - 1):  # CRC, a record, the last byte
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        assert check_crcs(bytes(damaged)) == (5, 1, 0), position


def test_check_crcs_stops_at_a_length_no_frame_can_have() -> None:
    data = encode_batches(make_batches(0, 3))
    third = 2 * len(encode_batch(make_batches(0, 1)[0]))
    damaged = data[:third] + struct.pack(">I", batch_codec.MAX_BATCH_BYTES + 1) + data[third + 4 :]
    assert check_crcs(damaged) == (2, 0, len(data) - third)
    assert check_crcs(data[:-1]) == (2, 0, len(data) - 1 - third)  # a torn last frame
