"""A compressed batch is decompressed within a bound, in every codec and framing Kafka's
clients write: a decompression bomb (a small batch of compressed zeros) is refused before
its bytes are spent, and a record count its bytes cannot hold before anything is decoded."""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import crc32c
import pytest
from aiokafka import codec as aiokafka_codec

from raftka.records import validation
from raftka.records.batch import CRC_START, HEADER_SIZE, parse_header
from raftka.records.codec import BatchBuilder, Compression, read_records
from raftka.records.decompression import DecompressionError, decompress
from raftka.records.validation import BatchLimits, BatchValidationError, validate_batches
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
NOW = 1_700_000_000_000
MIB = 1 << 20


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_two_members(data: bytes) -> bytes:
    return _gzip(data[: len(data) // 2]) + _gzip(data[len(data) // 2 :])


FRAMINGS: dict[str, tuple[Compression, Callable[[bytes], bytes]]] = {
    "gzip": (Compression.GZIP, _gzip),
    "gzip-two-members": (Compression.GZIP, _gzip_two_members),
    "snappy-xerial": (Compression.SNAPPY, aiokafka_codec.snappy_encode),  # Java's framing
    "snappy-raw": (Compression.SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),  # librdkafka's
    "lz4": (Compression.LZ4, aiokafka_codec.lz4_encode),
    "zstd": (Compression.ZSTD, lambda d: bytes(cramjam.zstd.compress(d))),
}


def compressed_batch(values: list[bytes], codec: Compression, compress: Callable[[bytes], bytes]) -> bytes:
    """A valid batch of ``values`` whose records are compressed by ``compress``."""
    builder = BatchBuilder()
    for value in values:
        assert builder.append(NOW, None, value)
    plain = bytes(builder.build())
    raw = bytearray(plain[:HEADER_SIZE] + compress(plain[HEADER_SIZE:]))
    raw[8:12] = (len(raw) - 12).to_bytes(4, "big")
    raw[CRC_START : CRC_START + 2] = (int.from_bytes(raw[21:23], "big") | codec).to_bytes(2, "big")
    raw[17:21] = crc32c.crc32c(bytes(raw[CRC_START:])).to_bytes(4, "big")
    return bytes(raw)


@pytest.mark.parametrize("framing", FRAMINGS)
def test_every_framing_decompresses_within_the_bound_and_its_records_decode(framing: str) -> None:
    codec, compress = FRAMINGS[framing]
    values = [b"a" * 1000, b"b", b"c" * 5000]
    batch = compressed_batch(values, codec, compress)
    validated = validate_batches(batch, BatchLimits(max_message_bytes=MIB), NOW)
    assert validated.record_count == 3
    assert bytes(validated.payload) == batch, "the batch is stored as sent, compressed"
    assert [r.value for r in read_records(validated.payload)] == values


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_decompression_bomb_is_refused_before_its_bytes_are_spent(framing: str) -> None:
    """16 MiB of zeros in one record, sent in a few KB (snappy: ~0.8 MB), against a bound of
    1 MiB: refused, and the memory the check took stays near the bound, not 16 MiB (the old
    codec path decompressed it all, then copied it)."""
    codec, compress = FRAMINGS[framing]
    bomb = compressed_batch([bytes(16 * MIB)], codec, compress)
    assert len(bomb) < MIB
    limits = BatchLimits(max_message_bytes=MIB, uncompressed_batch_bytes_max=MIB)
    tracemalloc.start()
    try:
        with pytest.raises(BatchValidationError) as refused:
            validate_batches(bomb, limits, NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.code == E.INVALID_RECORD
    assert "broker.uncompressed_batch_bytes_max" in refused.value.message
    assert peak < 4 * MIB, f"{peak} bytes allocated checking a batch bounded at {MIB}"


@pytest.mark.parametrize("framing", FRAMINGS)
def test_decompress_returns_at_most_the_limit(framing: str) -> None:
    codec, compress = FRAMINGS[framing]
    data = bytes(range(256)) * 4096  # 1 MiB
    compressed = compress(data)
    assert decompress(codec, compressed, len(data)) == data
    with pytest.raises(DecompressionError, match=f"{len(data) - 1}"):
        decompress(codec, compressed, len(data) - 1)


def test_a_record_count_its_bytes_cannot_hold_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("records were decoded")

    monkeypatch.setattr(validation, "iter_batch_records", never)
    monkeypatch.setattr(validation, "decompress", never)
    limits = BatchLimits(max_message_bytes=MIB, uncompressed_batch_bytes_max=MIB)
    for codec, compress in (FRAMINGS["snappy-raw"], (Compression.NONE, lambda d: d)):
        raw = bytearray(compressed_batch([b"x"], codec, compress))
        count = MIB  # a million records in one small batch
        raw[57:61] = count.to_bytes(4, "big")
        raw[8 + 4 + 4 + 1 + 4 + 2 : 8 + 4 + 4 + 1 + 4 + 2 + 4] = (count - 1).to_bytes(
            4, "big"
        )  # lastOffsetDelta
        raw[17:21] = crc32c.crc32c(bytes(raw[CRC_START:])).to_bytes(4, "big")
        assert parse_header(raw).record_count == count
        with pytest.raises(BatchValidationError) as refused:
            validate_batches(bytes(raw), limits, NOW)
        assert refused.value.code == E.INVALID_RECORD
        assert f"{count} records need at least" in refused.value.message
