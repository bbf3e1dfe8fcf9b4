"""Message sets (magic 0 and 1) up-converted to a v2 batch and v2 batches down-converted:
the records survive both ways, whatever their shape and codec, as another implementation
(kafka-python's legacy record builder and reader) writes and reads them."""

from __future__ import annotations

import gzip

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from raftka.records.codec import BatchBuilder, Compression, read_records
from raftka.records.legacy import LegacyError, down_convert, encode_message, up_convert

NOW_MS = 1_700_000_000_000
BOUND = 1 << 20
maybe_bytes = st.one_of(st.none(), st.binary(max_size=64))
records = st.lists(st.tuples(maybe_bytes, maybe_bytes), min_size=1, max_size=20)
# kafka-python's legacy builder: codec ids for magic 0 (no lz4: Kafka's old framing) and magic 1
LEGACY_CODECS = {0: (0, 1, 2), 1: (0, 1, 2, 3)}


def legacy_set(magic: int, codec: int, rows: list[tuple[bytes | None, bytes | None]]) -> bytes:
    """``rows`` as kafka-python writes a message set, compressed into one wrapper message
    as Kafka's producers compress (here with cramjam: kafka-python's own codecs need
    libraries this project does not install)."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 22)
    for i, (key, value) in enumerate(rows):
        builder.append(i, timestamp=NOW_MS + i if magic else None, key=key, value=value)
    inner = bytes(builder.build())
    if codec == Compression.NONE:
        return inner
    compress = {Compression.GZIP: gzip.compress, Compression.SNAPPY: cramjam.snappy.compress_raw,
                Compression.LZ4: cramjam.lz4.compress}[Compression(codec)]  # fmt: skip
    return encode_message(magic, len(rows) - 1, NOW_MS, None, bytes(compress(inner)), attributes=codec)


def read_set(buf: bytes, magic: int) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    """Each message of a message set, read by kafka-python (which reads one at a time)."""
    read, pos = [], 0
    while pos < len(buf):
        size = int.from_bytes(buf[pos + 8 : pos + 12], "big")
        read += [
            (r.offset, r.timestamp, r.key, r.value)
            for r in LegacyRecordBatch(buf[pos : pos + 12 + size], magic)
        ]
        pos += 12 + size
    return read


@settings(max_examples=150, deadline=None)
@given(rows=records, magic=st.sampled_from([0, 1]), data=st.data())
def test_a_message_set_becomes_one_batch_with_the_same_records(rows, magic: int, data) -> None:
    codec = data.draw(st.sampled_from(LEGACY_CODECS[magic]))
    batch = up_convert(legacy_set(magic, codec, rows), now_ms=NOW_MS, uncompressed_bytes_max=BOUND)
    got = list(read_records(batch))
    assert [(r.offset, r.key, r.value) for r in got] == [(i, k, v) for i, (k, v) in enumerate(rows)]
    expected_times = [NOW_MS + i for i in range(len(rows))] if magic else [NOW_MS] * len(rows)
    assert [r.timestamp for r in got] == expected_times


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(records, min_size=1, max_size=4),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(list(Compression)),
    skip=st.integers(0, 10),
)
def test_batches_become_messages_at_their_offsets_from_the_fetch_offset(batches, magic, codec, skip) -> None:
    log, expected, offset = b"", [], 0
    for rows in batches:
        builder = BatchBuilder(codec)
        for i, (key, value) in enumerate(rows):
            builder.append(NOW_MS + offset + i, key, value, [("h", b"dropped")])
        built = bytearray(builder.build())
        built[0:8] = offset.to_bytes(8, "big")  # the base offset the leader would assign
        log += bytes(built)
        expected += [(offset + i, NOW_MS + offset + i, k, v) for i, (k, v) in enumerate(rows)]
        offset += len(rows)
    converted = down_convert(log, magic=magic, from_offset=skip, max_bytes=1 << 30)
    read = read_set(converted, magic)
    wanted = [(o, t if magic else None, k, v) for o, t, k, v in expected if o >= skip]
    assert read == wanted


def test_a_down_converted_answer_stops_at_a_message_past_the_fetch_size_but_holds_the_first() -> None:
    builder = BatchBuilder()
    for _ in range(10):
        builder.append(NOW_MS, b"k", bytes(100))
    log = bytes(builder.build())
    one = len(encode_message(1, 0, NOW_MS, b"k", bytes(100)))
    assert len(down_convert(log, magic=1, from_offset=0, max_bytes=1)) == one
    assert len(down_convert(log, magic=1, from_offset=0, max_bytes=3 * one + 1)) == 3 * one


def test_control_batches_are_left_out_of_a_down_converted_answer() -> None:
    builder = BatchBuilder()
    builder.append(NOW_MS, b"k", b"v")
    batch = bytes(builder.build())
    control = bytearray(batch)
    control[22] |= 0x20  # the control bit of the attributes (bytes 21-22 of a v2 batch)
    converted = down_convert(bytes(control) + batch, magic=1, from_offset=0, max_bytes=1 << 20)
    assert read_set(converted, 1) == [(0, NOW_MS, b"k", b"v")]


GOOD = encode_message(0, 0, -1, b"k", b"v")


@pytest.mark.parametrize(
    "message, why",
    [
        (GOOD[:-1] + bytes([GOOD[-1] ^ 0xFF]), "fails its CRC"),
        (GOOD[:16] + bytes([7]) + GOOD[17:], "magic: 7"),
        (encode_message(1, 0, NOW_MS, b"k", b"v", attributes=int(Compression.ZSTD)), "codec 4"),
        (encode_message(0, 0, -1, None, bytes(10), attributes=int(Compression.LZ4)), "lz4 in a magic 0"),
    ],
)
def test_a_corrupt_or_unknown_message_is_refused_by_name(message: bytes, why: str) -> None:
    assert up_convert(GOOD, now_ms=NOW_MS, uncompressed_bytes_max=BOUND)
    with pytest.raises(LegacyError, match=why):
        up_convert(message, now_ms=NOW_MS, uncompressed_bytes_max=BOUND)


def test_a_compressed_wrapper_larger_than_the_bound_is_refused_before_it_is_held() -> None:
    bomb = gzip.compress(b"".join(encode_message(1, i, NOW_MS, None, bytes(1 << 16)) for i in range(64)))
    wrapper = encode_message(1, 63, NOW_MS, None, bomb, attributes=int(Compression.GZIP))
    assert len(wrapper) < 16 << 10
    with pytest.raises(LegacyError, match="bound"):
        up_convert(wrapper, now_ms=NOW_MS, uncompressed_bytes_max=1 << 20)


def test_a_set_with_no_whole_message_is_refused() -> None:
    whole = legacy_set(1, 0, [(b"k", b"v")])
    with pytest.raises(LegacyError, match="no whole message"):
        up_convert(whole[:-1], now_ms=NOW_MS, uncompressed_bytes_max=BOUND)
