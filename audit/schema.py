"""The columns of a decoded metadata log: one row per record, damage included.

Declared once, as Arrow types; the Spark schema is derived from it (``raftka.audit.source``), so
the batches the data source yields match the declared schema exactly, as PySpark checks.
Typed columns hold what the audits query; ``json`` holds the whole record and ``raw`` its
bytes, which the replay decodes again with the controllers' own code.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import pyarrow as pa

INT_LIST = pa.list_(pa.field("element", pa.int32()))

# (name, type, what it holds)
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("node", pa.string(), "node id, from meta.properties (or the folder name)"),
    ("file", pa.string(), "the file the row was read from"),
    ("file_seq", pa.int32(), "the file's place in the node's history, archive first"),
    ("source", pa.string(), "segment or snapshot"),
    ("archived", pa.bool_(), "the file is in archive/"),
    ("position", pa.int64(), "byte position of the batch (or damage) in a segment"),
    ("kind", pa.string(), "batch kind: DATA, LEADER_CHANGE, NOOP; SNAPSHOT for snapshot records"),
    ("batch_offset", pa.int64(), "base offset of the batch; a snapshot's offset"),
    ("batch_index", pa.int32(), "the record's index in its batch or snapshot"),
    ("batch_records", pa.int32(), "records in the batch or snapshot"),
    ("batch_crc", pa.int64(), "CRC-32C of the batch frame: equal batches on two nodes have equal CRCs"),
    ("offset", pa.int64(), "the record's offset; a snapshot's records carry the snapshot's offset"),
    ("epoch", pa.int32(), "raft epoch of the batch (or of the snapshot)"),
    ("timestamp_ms", pa.int64(), "batch timestamp (a snapshot's: its last batch's)"),
    ("type", pa.string(), "record type as kafka-dump-log names it, LEADER_CHANGE, NO_OP, DAMAGED or UNREADABLE"),
    ("topic_id", pa.string(), "topic id as Kafka prints a Uuid"),
    ("topic", pa.string(), "topic name, where the record itself names it"),
    ("partition", pa.int32(), "partition id"),
    ("broker", pa.int32(), "broker id (registrations, fencing, producer id blocks)"),
    ("broker_epoch", pa.int64(), "broker epoch"),
    ("leader", pa.int32(), "partition leader (-1 none, -2 unchanged); raft leader of a LEADER_CHANGE"),
    ("isr", INT_LIST, "in-sync replicas, when the record sets them"),
    ("replicas", INT_LIST, "replicas, when the record sets them"),
    ("group", pa.string(), "consumer group"),
    ("committed_offset", pa.int64(), "the offset an OffsetCommitRecord commits"),
    ("voters", INT_LIST, "the voter set a LEADER_CHANGE or a VOTERS batch names"),
    ("json", pa.string(), "the whole record as JSON (option recordJson)"),
    ("error", pa.string(), "what is wrong with a DAMAGED row; why an UNREADABLE file could not be read"),
    ("torn_tail", pa.bool_(), "a DAMAGED row that is a torn last write, not damage"),
    ("raw", pa.binary(), "the record's bytes"),
)
ROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind, _ in COLUMNS])
Row = namedtuple("Row", [name for name, _, _ in COLUMNS])  # type: ignore[misc]
# A row with every column empty, to build rows by keyword: EMPTY._replace(node=..., ...)
EMPTY = Row(*(None for _ in COLUMNS))


def record_batches(
    rows: Iterable[Sequence[Any]], schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Rows (tuples in schema order) as Arrow record batches of at most ``batch_rows`` rows."""
    iterator = iter(rows)
    while chunk := list(islice(iterator, batch_rows)):
        yield to_batch(chunk, schema)


def to_batch(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Rows as one batch; Arrow reads the tuples as structs, in C (a transpose in Python
    costs four times as much)."""
    return pa.RecordBatch.from_struct_array(pa.array(rows, type=pa.struct(schema)))

