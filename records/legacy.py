"""Kafka's message sets from before record batches (magic 0 and 1), for the clients that
still send Produce v0-2 and Fetch v0-3: Kafka 3.x serves those versions (4.0 removed
them, KIP-896), converting as here.

A produced message set becomes one v2 batch before the broker validates it, as a Kafka
3.x broker converts (its log holds v2 only since ``message.format.version`` 3.0); its
codec is kept. A magic 0 message has no timestamp: it gets the broker's clock, where
Kafka writes -1 (no timestamp), so that the time index and retention by time treat it
as written now. A fetch at those versions gets the log's batches down-converted: each
data record a message at its own offset, magic 1 with its timestamp (Fetch v2-3) or
magic 0 (v0-1), uncompressed, control batches and record headers left out (neither
format has a place for them), records below the fetch offset dropped.

Wrapper messages (a compressed inner message set) are decompressed with the broker's
bound on uncompressed bytes (``raftka.records.decompression``), and nested at most once,
as Kafka's producers write them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from raftka.records.batch import iter_batches
from raftka.records.codec import BatchBuilder, Compression, RecordError, iter_batch_records
from raftka.records.decompression import DecompressionError, decompress

MESSAGE_HEAD = struct.Struct(">qi")  # offset, message size
MESSAGE_FIXED = struct.Struct(">IBB")  # crc, magic, attributes
TIMESTAMP = struct.Struct(">q")
LENGTH = struct.Struct(">i")
CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08  # magic 1's timestamp type bit
LEGACY_CODECS = (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)
MAGIC_FOR_FETCH = {0: 0, 1: 0, 2: 1, 3: 1}  # Fetch version -> the magic its client reads
PRODUCE_LEGACY_BEFORE = 3  # Produce v0-2 carry message sets
FETCH_LEGACY_BEFORE = 4  # Fetch v0-3 read them


class LegacyError(ValueError):
    """A message set that cannot be converted (malformed, a bad CRC, an unknown codec, or
    records past the bound)."""


class Message(NamedTuple):
    timestamp_ms: int  # -1 for magic 0
    key: bytes | None
    value: bytes | None


def up_convert(message_set: bytes, *, now_ms: int, uncompressed_bytes_max: int) -> bytes:
    """One v2 batch of ``message_set``'s messages, in their codec (LegacyError if it cannot be)."""
    codec, messages = _flatten(memoryview(message_set), uncompressed_bytes_max)
    if not messages:
        raise LegacyError("the message set holds no whole message")
    builder = BatchBuilder(codec, batch_size=max(len(message_set), uncompressed_bytes_max))
    for message in messages:
        timestamp = message.timestamp_ms if message.timestamp_ms >= 0 else now_ms
        builder.append(timestamp, message.key, message.value)
    return bytes(builder.build())


def down_convert(
    batches: bytes | bytearray | memoryview, *, magic: int, from_offset: int, max_bytes: int
) -> bytes:
    """The data records of ``batches`` at or above ``from_offset`` as magic ``magic``
    messages, at most ``max_bytes`` of them (the first always whole, as a fetch gives)."""
    out = bytearray()
    view = memoryview(batches)
    try:
        for pos, header in iter_batches(view):
            if header.is_control:
                continue
            flags = LOG_APPEND_TIME if header.log_append_time and magic == 1 else 0
            for record in iter_batch_records(bytes(view[pos : pos + header.size])):
                if record.offset < from_offset:
                    continue
                message = encode_message(
                    magic, record.offset, record.timestamp, record.key, record.value, flags
                )
                if out and len(out) + len(message) > max_bytes:
                    return bytes(out)
                out += message
    except RecordError:
        pass  # a partial batch at the end of the answer (or damage): what came before is whole
    return bytes(out)


def encode_message(
    magic: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None, attributes: int = 0
) -> bytes:
    """One message with its offset and size in front, as a message set holds it."""
    body = bytearray(MESSAGE_FIXED.pack(0, magic, attributes))
    if magic == 1:
        body += TIMESTAMP.pack(timestamp_ms)
    for field in (key, value):
        if field is None:
            body += LENGTH.pack(-1)
        else:
            body += LENGTH.pack(len(field)) + field
    struct.pack_into(">I", body, 0, zlib.crc32(memoryview(body)[4:]))
    return MESSAGE_HEAD.pack(offset, len(body)) + bytes(body)


def _flatten(view: memoryview, budget: int) -> tuple[Compression, list[Message]]:
    """Every message of a produced set, wrappers opened: (the codec, the messages)."""
    codec = Compression.NONE
    messages: list[Message] = []
    left = budget
    for magic, attributes, timestamp, key, value in _messages(view):
        codec_id = attributes & CODEC_MASK
        wrapped = Compression(codec_id) if codec_id in LEGACY_CODECS else None
        if wrapped is None:
            raise LegacyError(
                f"attributes: codec {attributes & CODEC_MASK} is not one a magic {magic} message may use"
            )
        if wrapped == Compression.NONE:
            left -= len(key or b"") + len(value or b"")
            if left < 0:
                raise LegacyError(
                    f"the messages are larger than the bound ({budget} bytes: broker.uncompressed_batch_bytes_max)"
                )
            messages.append(Message(timestamp, key, value))
            continue
        if wrapped == Compression.LZ4 and magic == 0:
            raise LegacyError(
                "lz4 in a magic 0 message (its framing is Kafka's broken pre-0.10 one): use magic 1"
            )
        if value is None:
            raise LegacyError("a compressed wrapper message with a null value")
        try:
            inner = decompress(wrapped, value, left)
        except DecompressionError as e:
            raise LegacyError(
                f"a {wrapped.name.lower()} wrapper message: {e} (the bound: broker.uncompressed_batch_bytes_max)"
            ) from None
        left -= len(inner)
        codec = wrapped
        for inner_magic, inner_attributes, inner_timestamp, inner_key, inner_value in _messages(
            memoryview(inner)
        ):
            if inner_attributes & CODEC_MASK:
                raise LegacyError("a compressed message inside a compressed message")
            stamp = timestamp if magic == 1 and attributes & LOG_APPEND_TIME else inner_timestamp
            messages.append(Message(stamp if inner_magic == 1 else -1, inner_key, inner_value))
    return codec, messages


def _messages(view: memoryview) -> Iterator[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, attributes, timestamp, key, value) of each whole message; a partial one at
    the end is left out, as Kafka does; a malformed or corrupt one is a LegacyError."""
    pos = 0
    while pos + MESSAGE_HEAD.size <= len(view):
        _, size = MESSAGE_HEAD.unpack_from(view, pos)
        start = pos + MESSAGE_HEAD.size
        if size < MESSAGE_FIXED.size + 2 * LENGTH.size:
            raise LegacyError(f"a message of {size} bytes at byte {pos} is shorter than its fields")
        if start + size > len(view):
            return
        body = view[start : start + size]
        crc, magic, attributes = MESSAGE_FIXED.unpack_from(body)
        if magic not in (0, 1):
            raise LegacyError(f"magic: {magic} at byte {pos} (Produce v0-2 carry magic 0 or 1 messages)")
        if zlib.crc32(body[4:]) != crc:
            raise LegacyError(f"the message at byte {pos} fails its CRC")
        at = MESSAGE_FIXED.size
        timestamp = -1
        if magic == 1:
            (timestamp,) = TIMESTAMP.unpack_from(body, at)
            at += TIMESTAMP.size
        key, at = _bytes(body, at)
        value, at = _bytes(body, at)
        if at != size:
            raise LegacyError(f"the message at byte {pos} has {size - at} bytes after its value")
        yield magic, attributes, timestamp, key, value
        pos = start + size


def _bytes(body: memoryview, at: int) -> tuple[bytes | None, int]:
    if at + LENGTH.size > len(body):
        raise LegacyError("a message ends inside a length")
    (length,) = LENGTH.unpack_from(body, at)
    at += LENGTH.size
    if length < 0:
        return None, at
    if at + length > len(body):
        raise LegacyError("a message's key or value is longer than the message")
    return bytes(body[at : at + length]), at + length
