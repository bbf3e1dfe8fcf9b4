"""Compressed batches in every codec and framing Kafka's clients write, built by hand so a
test can compress what it likes (a decompression bomb: megabytes of zeros in a few KB)."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import cramjam
import crc32c
from aiokafka import codec as aiokafka_codec

from raftka.records.batch import CRC_START, HEADER_SIZE
from raftka.records.codec import BatchBuilder, Compression

NOW = 1_700_000_000_000


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
