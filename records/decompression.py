"""A batch's compressed records, decompressed with a bound on what they may grow to.

``max.message.bytes`` bounds a batch as sent, compressed: zstd turns 128 KiB of zeros
into 4 bytes, so a 16 KB produce could make a broker allocate a gibibyte and stall its
event loop for seconds (a decompression bomb). Here every codec stops at ``limit``
bytes of output, before it would spend more: gzip through zlib's ``max_length``, snappy
from the lengths its blocks declare, lz4 and zstd into an output buffer that grows
fourfold up to ``limit`` (most batches fit the first guess, four times their compressed
size; one that needs more is decompressed again into the larger buffer, and the tries
that came short cost less than the last one's worth).

Kafka's framings, as its clients write them: gzip members (possibly several), snappy
in xerial's blocks (Java) or raw (librdkafka, kafka-python's default is xerial), the LZ4
frame format, zstd frames.

The partition leader bounds what a producer's batch may grow to
(``broker.uncompressed_batch_bytes_max``), and raftka's consumer what a fetched one may
(its ``uncompressed_batch_bytes_max``): a consumer trusts no broker to have checked, as a
broker with a larger bound, a corrupt log or a hostile broker would serve a bomb all the same.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam

from raftka.records.batch import HEADER_SIZE, BatchHeader, Compression, uncompressed

FIRST_GUESS_RATIO = 4
FIRST_GUESS_MIN_BYTES = 64 << 10
_XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class DecompressionError(ValueError):
    """Records that do not decompress within the bound, or not at all."""


def decompress(codec: Compression, data: bytes | memoryview, limit: int) -> bytes | bytearray:
    """``data`` decompressed; DecompressionError past ``limit`` bytes or if it is not
    ``codec``'s format."""
    try:
        if codec is Compression.GZIP:
            return _gzip(data, limit)
        if codec is Compression.SNAPPY:
            return _snappy(data, limit)
        if codec is Compression.LZ4:
            return _into_growing_buffer(cramjam.lz4.decompress_into, data, limit)
        if codec is Compression.ZSTD:
            return _into_growing_buffer(cramjam.zstd.decompress_into, data, limit)
    except (cramjam.DecompressionError, zlib.error, ValueError) as e:  # DecompressionError is one
        raise DecompressionError(f"{codec.name.lower()}: {e}") from None
    raise DecompressionError(f"codec {int(codec)} is not one of Kafka's")


def plain_batch(
    buf: bytes | bytearray | memoryview, position: int, header: BatchHeader, limit: int
) -> bytes | bytearray:
    """The batch at ``position`` with its records decompressed within ``limit``, as if it
    had been sent uncompressed (for decoding only: its CRC is the compressed batch's); the
    batch itself if it is not compressed. DecompressionError past ``limit``."""
    if header.compression == Compression.NONE:
        return bytes(buf[position : position + header.size])
    try:
        codec = Compression(header.compression)
    except ValueError:
        raise DecompressionError(f"compression codec {header.compression} is not one of Kafka's") from None
    records = memoryview(buf)[position + HEADER_SIZE : position + header.size]
    return uncompressed(buf, position, decompress(codec, records, limit))


def _gzip(data: bytes | memoryview, limit: int) -> bytes:
    chunks: list[bytes] = []
    room = limit
    rest = bytes(data)
    while rest:
        member = zlib.decompressobj(_GZIP_WBITS)
        chunk = member.decompress(rest, room + 1)
        if len(chunk) > room:
            raise DecompressionError(f"more than {limit} bytes")
        if not member.eof:
            raise DecompressionError("the stream ends inside a member")
        chunks.append(chunk)
        room -= len(chunk)
        rest = member.unused_data
    return b"".join(chunks)


def _snappy(data: bytes | memoryview, limit: int) -> bytearray:
    blocks = _xerial_blocks(memoryview(data)) if bytes(data[:8]) == _XERIAL_HEADER else [memoryview(data)]
    lengths = [cramjam.snappy.decompress_raw_len(block) for block in blocks]
    if sum(lengths) > limit:
        raise DecompressionError(f"its blocks declare {sum(lengths)} bytes, more than {limit}")
    out = bytearray(sum(lengths))
    view, position = memoryview(out), 0
    for block, length in zip(blocks, lengths, strict=True):
        cramjam.snappy.decompress_raw_into(block, view[position : position + length])
        position += length
    return out


def _xerial_blocks(data: memoryview) -> list[memoryview]:
    blocks, position = [], _XERIAL_HEADER_BYTES
    while position < len(data):
        if position + _XERIAL_BLOCK_LENGTH.size > len(data):
            raise DecompressionError("a block length is cut short")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += _XERIAL_BLOCK_LENGTH.size
        if not 0 <= length <= len(data) - position:
            raise DecompressionError(f"a block of {length} bytes in {len(data) - position}")
        blocks.append(data[position : position + length])
        position += length
    return blocks


def _into_growing_buffer(
    decompress_into: Callable[[bytes | memoryview, bytearray], int], data: bytes | memoryview, limit: int
) -> bytearray:
    """The codec writes into a buffer and fails when it is full; a full buffer smaller than
    ``limit`` + 1 is retried four times larger (cramjam tells a full buffer from bad input
    only in its message, so bad input is retried too, within the same bound)."""
    size = min(limit + 1, max(FIRST_GUESS_MIN_BYTES, FIRST_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError:
            if size > limit:
                raise DecompressionError(f"more than {limit} bytes, or not this codec's format") from None
            size = min(limit + 1, size * FIRST_GUESS_RATIO)
            continue
        if written > limit:
            raise DecompressionError(f"more than {limit} bytes")
        del out[written:]
        return out
