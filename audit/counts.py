"""The canonical records counted by the replay pieces: per epoch, and per time bucket and type.

A piece counts its own records with Arrow (``count``), a chunk at a time. Each chunk's
counts per epoch, its LeaderChange records and its write rate per time bucket and type go
to Parquet as Arrow counted them, for Spark to add up (``raftka.audit.tables.per_epoch``,
``raftka.audit.job``): a history with a hundred thousand epochs, or two hundred chunks of a
thousand rates each, would otherwise hold them all on the driver. What the driver adds
(``Counts.add``) is the chunks' bounds. A chunk buckets time at the width ``bucket_ms``
picks for its own span: every width divides the wider ones, and the whole history's span
picks one at least as wide, so Spark re-buckets the chunks' rates exactly, without
scanning every record again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raftka.audit.decode import LEADER_CHANGE

WIDTHS_MS = (1_000, 5_000, 10_000, 60_000, 300_000, 900_000, 3_600_000, 21_600_000, 86_400_000, 604_800_000)
RATE_BUCKETS = 120  # the write-rate chart's buckets across the history
EPOCH_SCHEMA = pa.schema([
    ("epoch", pa.int32()), ("start_offset", pa.int64()), ("end_offset", pa.int64()), ("first_ms", pa.int64()),
    ("last_ms", pa.int64()), ("records", pa.int64()),
])  # fmt: skip
RATE_SCHEMA = pa.schema([("bucket_ms", pa.int64()), ("type", pa.string()), ("count", pa.int64())])
OPENED_SCHEMA = pa.schema([("epoch", pa.int32()), ("leader", pa.int32()), ("voters", pa.list_(pa.int32())),
                           ("start_ms", pa.int64())])  # fmt: skip


def bucket_ms(start_ms: int | None, end_ms: int | None, buckets: int = RATE_BUCKETS) -> int:
    """A round bucket width that cuts the span into about ``buckets`` pieces."""
    span = max(1, (end_ms or 0) - (start_ms or 0))
    return next((width for width in WIDTHS_MS if span / width <= buckets), WIDTHS_MS[-1])


def count(canonical: pa.RecordBatch) -> dict[str, Any]:
    """One chunk's counts: ``epochs`` (``EPOCH_SCHEMA``), ``opened`` (``OPENED_SCHEMA``) and
    ``rate`` (``RATE_SCHEMA``) as Arrow tables, for Parquet; ``bounds`` as a tuple, which
    travels back to the driver pickled (``Counts.add``)."""
    table = pa.Table.from_batches([canonical])
    epochs = table.group_by("epoch", use_threads=False).aggregate([
        ("offset", "min"), ("offset", "max"), ("timestamp_ms", "min"), ("timestamp_ms", "max"), ("offset", "count"),
    ])  # fmt: skip
    opened = table.filter(pc.equal(table["type"], LEADER_CHANGE)).select(
        ["epoch", "leader", "voters", "timestamp_ms"]
    )
    if table.num_rows:
        ms = table["timestamp_ms"].to_numpy()
        width = bucket_ms(int(ms.min()), int(ms.max()))
        # floored: Arrow's integer divide truncates, which puts a time before 1970 a bucket late
        rate = pa.table({"bucket_ms": ms // width * width, "type": table["type"]}).group_by(["bucket_ms", "type"]).aggregate([
            ("type", "count")
        ])  # fmt: skip
    else:
        rate = pa.table({"bucket_ms": [], "type": [], "type_count": []})
    return {
        "epochs": epochs.select(["epoch", "offset_min", "offset_max", "timestamp_ms_min", "timestamp_ms_max",
                                 "offset_count"]).rename_columns(EPOCH_SCHEMA.names).cast(EPOCH_SCHEMA),
        "opened": opened.rename_columns(OPENED_SCHEMA.names).cast(OPENED_SCHEMA),
        "rate": rate.rename_columns(RATE_SCHEMA.names).cast(RATE_SCHEMA),
        "bounds": _bounds(table),
    }  # fmt: skip


def _bounds(table: pa.Table) -> tuple[int, int, int, int, int] | None:
    """First and last offset, first and last time, records (None: no records)."""
    if not table.num_rows:
        return None
    offsets, times = pc.min_max(table["offset"]), pc.min_max(table["timestamp_ms"])
    return (offsets["min"].as_py(), offsets["max"].as_py(), times["min"].as_py(), times["max"].as_py(),
            table.num_rows)  # fmt: skip


@dataclass
class Counts:
    """The chunks' bounds added up (their epochs and rates are Spark's to add)."""

    first_offset: int | None = None
    last_offset: int | None = None
    first_ms: int | None = None
    last_ms: int | None = None
    records: int = 0

    def add(self, chunks: Iterable[tuple[int, int, int, int, int] | None]) -> Counts:
        """Add chunks' ``count(...)["bounds"]``."""
        for bounds in chunks:
            if bounds is not None:
                first, last, first_ms, last_ms, records = bounds
                self.first_offset = first if self.first_offset is None else min(self.first_offset, first)
                self.last_offset = last if self.last_offset is None else max(self.last_offset, last)
                self.first_ms = first_ms if self.first_ms is None else min(self.first_ms, first_ms)
                self.last_ms = last_ms if self.last_ms is None else max(self.last_ms, last_ms)
                self.records += records
        return self

    def bounds(self) -> tuple[int | None, int | None, int | None, int | None, int]:
        """First and last offset, first and last time, records: of the whole history."""
        return self.first_offset, self.last_offset, self.first_ms, self.last_ms, self.records
