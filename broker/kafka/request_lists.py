"""The lists of a Kafka request, counted before the request is decoded.

kafka-python decodes a whole frame into Python objects at about a microsecond per list
entry, on the listener's one event loop, and the handlers then plan per entry: a 2 MiB
Metadata request naming 1,048,576 empty topics held a broker's loop for seconds (it
missed its heartbeats and was fenced). Kafka bounds a request only by its size; raftka's
loop cannot afford that, so before decoding, this walks the frame with the request's own
schema (kafka-python's, at the request's version), reading each list's length where the
decoder would, and refuses the request at the first list over a bound, without visiting
that list's entries:

- one list holds at most ``ENTRIES_PER_LIST_MAX`` entries (the data listener's bound on
  the topics of a Metadata request), except lists of partitions;
- all lists of one request hold at most ``ENTRIES_PER_REQUEST_MAX`` entries together:
  the replica manager's ``PARTITIONS_PER_REQUEST_MAX`` under ``ENTRIES_PER_LIST_MAX``
  topics, so the largest fetch or produce a client may send still fits;
- at most ``TAGGED_SECTIONS_MAX`` structs carry tagged fields, each at most
  ``ENTRIES_PER_LIST_MAX`` of them (kafka-python copies the rest of the frame to decode
  each such section; clients send tags in one or two).

It refuses a null (a length of -1) where the schema's field is not nullable at the
request's version, and any entry of a list that is null, as Kafka's parser refuses them
(a malformed request): kafka-python decodes them as ``None``, which no handler expects
(45 of 3,045 schema-valid requests raised in handlers, before any ACL check).

The walk itself visits at most ``ENTRIES_PER_REQUEST_MAX`` entries, so a request is
checked and decoded in tens of milliseconds however it is built. A refused request
closes its connection (``FrameError``), as Kafka closes one it cannot parse: the answer
types have no common place for an error, and nothing of the request was read.
"""

from __future__ import annotations

import struct
from typing import NoReturn

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.codecs import Bytes, String
from kafka.protocol.schemas.fields.struct import StructField

from raftka.broker.replica.manager import PARTITIONS_PER_REQUEST_MAX
from raftka.wire.frames import FrameError

ENTRIES_PER_LIST_MAX = 1_000
ENTRIES_PER_REQUEST_MAX = PARTITIONS_PER_REQUEST_MAX + ENTRIES_PER_LIST_MAX
TAGGED_SECTIONS_MAX = 8
PARTITION_LISTS = frozenset({"partitions", "partition_data", "partition_indexes"})  # schema field names
VARINT_BYTES_MAX = 5  # an unsigned varint of 32 bits

_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


def check_request_lists(request: type[ApiMessage], frame: memoryview, version: int) -> int:
    """The entries of every list in ``frame`` (a whole request with its header); raises
    ``FrameError`` naming the list over a bound, or the field the frame ends inside."""
    flexible = request.flexible_version_q(version)
    walk = _Walk(frame, f"a {request.name} v{version} request")
    header_version = RequestHeader._flexible_versions[0] if flexible else RequestHeader._valid_versions[0]
    walk.struct(RequestHeader._struct, header_version, False, flexible, "header.")
    walk.struct(request._struct, version, flexible, flexible, "")
    return walk.entries


class _Walk:
    """Moves through a frame as kafka-python's decoder would, counting list entries."""

    def __init__(self, frame: memoryview, what: str) -> None:
        self.data = frame
        self.pos = 0
        self.what = what
        self.entries = 0
        self.tagged_sections = 0

    def struct(
        self, struct: StructField, version: int, compact: bool, tagged: bool | None, path: str
    ) -> None:
        for step in _layout(struct, version, path):
            if type(step) is int:
                self.skip(step)
            else:
                self.field(step[0], version, compact, tagged, step[1])
        if tagged:
            self.tagged(struct, version, path)
        elif tagged is None:  # inside a tagged field: an empty section of its own
            self.skip(1)

    def field(self, field: BaseField, version: int, compact: bool, tagged: bool | None, path: str) -> None:
        if field.is_array():
            count = self.length(compact, _INT32)
            if count < 0:
                self.null(field.nullable_for_version_q(version), count, path, version)
                return
            if count == 0:
                return
            self.admit(path, count, field.name in PARTITION_LISTS)
            entry = field.array_of
            if field.is_struct_array():
                entry_path = path + "[]."
                for _ in range(count):
                    self.struct(entry, version, compact, tagged, entry_path)
            elif isinstance(entry._type.size, int):
                self.skip(entry._type.size * count)
            else:
                for _ in range(count):
                    self.simple(entry, compact, False, path + "[]", version)  # an entry is never null
        elif field.is_struct():
            if field.nullable_for_version_q(version) and self.byte() == 0xFF:
                return
            self.struct(field, version, compact, tagged, path + ".")
        else:
            self.simple(field, compact, field.nullable_for_version_q(version), path, version)

    def simple(self, field: BaseField, compact: bool, nullable: bool, path: str, version: int) -> None:
        codec = field._type
        if isinstance(codec, String) or codec is Bytes:
            size = self.length(compact, _INT16 if codec is not Bytes else _INT32)
            if size < 0:
                self.null(nullable, size, path, version)
            else:
                self.skip(size)
        else:
            self.skip(codec.size)

    def null(self, nullable: bool, length: int, path: str, version: int) -> None:
        """A length below 0: null, where the schema lets the field be null at ``version``."""
        if length < -1:
            self.refuse(f"{path}: a length of {length}")
        if not nullable:
            self.refuse(f"{path}: null, but the field is not nullable at version {version}")

    def tagged(self, struct: StructField, version: int, path: str) -> None:
        count = self.varint()
        if count == 0:
            return
        self.tagged_sections += 1
        if self.tagged_sections > TAGGED_SECTIONS_MAX:
            self.refuse(f"{path}_tagged_fields: more than {TAGGED_SECTIONS_MAX} structs with tagged fields")
        if count > ENTRIES_PER_LIST_MAX:
            self.refuse(f"{path}_tagged_fields: {count} fields, at most {ENTRIES_PER_LIST_MAX} in one struct")
        known = {f.tag: f for f in struct.tagged_fields(version)._fields}
        for _ in range(count):
            tag, size = self.varint(), self.varint()
            field = known.get(tag)
            if field is None:
                self.skip(size)
            else:  # decoded by its schema, as kafka-python does, not by its size
                self.field(field, version, True, None, path + field.name)

    def admit(self, path: str, count: int, partitions: bool) -> None:
        if not partitions and count > ENTRIES_PER_LIST_MAX:
            self.refuse(f"{path}: {count} entries, at most {ENTRIES_PER_LIST_MAX} in one list")
        self.entries += count
        if self.entries > ENTRIES_PER_REQUEST_MAX:
            self.refuse(
                f"{path}: {count} entries bring the request's lists past {ENTRIES_PER_REQUEST_MAX} entries"
            )

    def length(self, compact: bool, fixed: struct.Struct) -> int:
        """A list's or a string's length; -1 for null."""
        if compact:
            return self.varint() - 1
        self.need(fixed.size)
        (value,) = fixed.unpack_from(self.data, self.pos)
        self.pos += fixed.size
        return value

    def varint(self) -> int:
        pos = self.pos
        if pos < len(self.data) and self.data[pos] < 0x80:  # most are one byte: no loop
            self.pos = pos + 1
            return self.data[pos]
        value = 0
        for shift in range(0, 7 * VARINT_BYTES_MAX, 7):
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
        self.refuse(f"a varint at byte {self.pos} is longer than {VARINT_BYTES_MAX} bytes")

    def byte(self) -> int:
        self.need(1)
        self.pos += 1
        return self.data[self.pos - 1]

    def skip(self, count: int) -> None:
        self.need(count)
        self.pos += count

    def need(self, count: int) -> None:
        if self.pos + count > len(self.data):
            self.refuse(f"ends at byte {len(self.data)}, inside a field that needs {self.pos + count}")

    def refuse(self, why: str) -> NoReturn:
        raise FrameError(f"{self.what} is refused: {why}")


_LAYOUTS: dict[tuple[int, int, str], tuple[int | tuple[BaseField, str], ...]] = {}


def _layout(struct: StructField, version: int, path: str) -> tuple[int | tuple[BaseField, str], ...]:
    """``struct``'s untagged fields at ``version``: runs of fixed-size fields as the bytes
    they take, every other field with its path (made once per schema, not per entry)."""
    key = (id(struct), version, path)
    layout = _LAYOUTS.get(key)
    if layout is None:
        steps: list[int | tuple[BaseField, str]] = []
        for field in struct.untagged_fields(version):
            size = getattr(field, "_type", None) and field._type.size
            if isinstance(size, int) and not field.is_array():
                if steps and type(steps[-1]) is int:
                    steps[-1] += size
                else:
                    steps.append(size)
            else:
                steps.append((field, path + field.name))
        layout = _LAYOUTS[key] = tuple(steps)
    return layout
