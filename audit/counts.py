"""The canonical records counted by the replay pieces: per epoch, and per time bucket and type.

A piece counts its own records with Arrow (``count``), a chunk at a time; the driver adds
the chunks' counts (``Counts.add``). That gives the history's bounds, the epochs' offsets
and times for ``raftka.audit.tables.controller_epochs`` and the report's write rate without
Spark scanning every record again. A chunk buckets time at the width ``bucket_ms`` picks
for its own span: every width divides the wider ones, and the whole history's span picks
one at least as wide, so the driver re-buckets the chunks' counts exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
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
OPENED_SCHEMA = pa.schema([("epoch", pa.int32()), ("leader", pa.int32()), ("voters", pa.list_(pa.int32())),
                           ("start_ms", pa.int64())])  # fmt: skip


def bucket_ms(start_ms: int | None, end_ms: int | None, buckets: int = RATE_BUCKETS) -> int:
    """A round bucket width that cuts the span into about ``buckets`` pieces."""
    span = max(1, (end_ms or 0) - (start_ms or 0))
    return next((width for width in WIDTHS_MS if span / width <= buckets), WIDTHS_MS[-1])


def count(canonical: pa.RecordBatch) -> dict[str, Any]:
    """One piece's counts (plain lists: they travel back to the driver pickled)."""
    table = pa.Table.from_batches([canonical])
    epochs = table.group_by("epoch", use_threads=False).aggregate([
        ("offset", "min"), ("offset", "max"), ("timestamp_ms", "min"), ("timestamp_ms", "max"), ("offset", "count"),
    ])  # fmt: skip
    opened = table.filter(pc.equal(table["type"], LEADER_CHANGE)).select(
        ["epoch", "leader", "voters", "timestamp_ms"]
    )
    if table.num_rows:
        width = bucket_ms(pc.min(table["timestamp_ms"]).as_py(), pc.max(table["timestamp_ms"]).as_py())
        bucket = pc.multiply(pc.floor(pc.divide(table["timestamp_ms"], width)).cast(pa.int64()), width)
        rate = pa.table({"bucket_ms": bucket, "type": table["type"]}).group_by(["bucket_ms", "type"]).aggregate([
            ("type", "count")
        ])  # fmt: skip
    else:
        width, rate = WIDTHS_MS[0], pa.table({"bucket_ms": [], "type": [], "type_count": []})
    return {
        "epochs": list(zip(*(epochs[name].to_pylist() for name in
                             ("epoch", "offset_min", "offset_max", "timestamp_ms_min", "timestamp_ms_max",
                              "offset_count")), strict=True)),
        "opened": list(zip(*(opened[name].to_pylist() for name in opened.column_names), strict=True)),
        "rate": list(zip(rate["bucket_ms"].to_pylist(), rate["type"].to_pylist(), rate["type_count"].to_pylist(),
                         strict=True)),
    }  # fmt: skip


@dataclass
class Counts:
    """The pieces' counts added up."""

    epochs: dict[int, list[int]] = field(
        default_factory=dict
    )  # epoch: start, end offsets, first, last ms, records
    opened: list[tuple[Any, ...]] = field(
        default_factory=list
    )  # LeaderChange records: epoch, leader, voters, ms
    rate: dict[tuple[int, str], int] = field(default_factory=dict)  # (bucket start, type): records

    def add(self, pieces: Iterable[dict[str, Any]]) -> Counts:
        for piece in pieces:
            for epoch, start, end, first_ms, last_ms, records in piece["epochs"]:
                found = self.epochs.get(epoch)
                if found is None:
                    self.epochs[epoch] = [start, end, first_ms, last_ms, records]
                else:
                    found[:] = [min(found[0], start), max(found[1], end), min(found[2], first_ms),
                                max(found[3], last_ms), found[4] + records]  # fmt: skip
            self.opened += piece["opened"]
            for bucket, type_name, records in piece["rate"]:
                self.rate[(bucket, type_name)] = self.rate.get((bucket, type_name), 0) + records
        return self

    def epoch_rows(self) -> list[tuple[Any, ...]]:
        return [(epoch, *values) for epoch, values in self.epochs.items()]

    def bounds(self) -> tuple[int | None, int | None, int | None, int | None, int]:
        """First and last offset, first and last time, records: of the whole history."""
        values = list(self.epochs.values())
        if not values:
            return None, None, None, None, 0
        return (min(v[0] for v in values), max(v[1] for v in values), min(v[2] for v in values),
                max(v[3] for v in values), sum(v[4] for v in values))  # fmt: skip

    def rate_by(self, width: int) -> list[tuple[int, str, int]]:
        """(bucket start, type, records) at ``width``, a multiple of every piece's width."""
        out: dict[tuple[int, str], int] = {}
        for (bucket, type_name), records in self.rate.items():
            key = (bucket // width * width, type_name)
            out[key] = out.get(key, 0) + records
        return [(*key, records) for key, records in out.items()]
