"""A node's copies written in offset order without holding them (``write_effective``) are
exactly what sorting them all in memory gives (``effective``): for copies in any order, any
rewinds, any row-group size, in order already or not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raftka.audit.copies import COPY_SCHEMA, effective, newest_voters, read, rows, write_effective
from raftka.audit.decode import LEADER_CHANGE
from raftka.audit.schema import to_batch
from tests.unit.storage_support import memory_folder


@st.composite
def _met(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Copies in the order a walk meets them: files in sequence, each with its batches,
    which mostly follow one another and sometimes go back (a rewind, a repeat, damage)."""
    copies, base, order = [], draw(st.integers(0, 5)), 0
    for seq in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(0, 8))):
            base = max(0, base + draw(st.sampled_from((1, 1, 1, 2, 3, 0, -1, -4))))
            records = draw(st.integers(1, 3))
            epoch = draw(st.integers(0, 3))
            leader = draw(st.none() | st.integers(1, 3))
            kind, type_name = (
                ("LEADER_CHANGE", LEADER_CHANGE) if leader is not None else ("DATA", "TOPIC_RECORD")
            )
            voters = draw(st.lists(st.integers(1, 4), max_size=3)) if leader is not None else None
            copies.append((base, base + records - 1, epoch, base * 7 + epoch, kind, type_name, leader, 1_000 + base,
                           voters, "1", seq, order * 10, order, seq << 40 | order * 10))  # fmt: skip
            order += 1
            base += records
    return copies


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    met=_met(),
    rewinds=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=3),
    rows_per_group=st.integers(1, 7),
)
@example(met=[(b, b, 1, b, "DATA", "TOPIC_RECORD", None, b, None, "1", 0, b, b, b) for b in range(10)],
         rewinds=[], rows_per_group=3)  # fmt: skip
def test_copies_written_as_a_stream_are_the_copies_sorted_in_memory(
    met: list[tuple[Any, ...]], rewinds: list[tuple[int, int]], rows_per_group: int
) -> None:
    table = pa.Table.from_batches([to_batch(met, COPY_SCHEMA)])
    expected = effective(table, rewinds)
    with memory_folder("audit-copies-") as folder:
        walked, path = folder / ".met", folder / "copies.parquet"
        pq.write_table(table, walked, row_group_size=rows_per_group)
        voters = write_effective(walked, rewinds, path, rows_per_group)
        assert list(read(str(path))) == list(rows(expected))
        assert voters == newest_voters(expected)
        assert sorted(p.name for p in folder.iterdir()) == [".met", "copies.parquet"]  # nothing left behind
        written = pq.ParquetFile(path).metadata
        assert all(written.row_group(i).num_rows <= rows_per_group for i in range(written.num_row_groups))


def test_a_node_with_no_copies_writes_an_empty_file(tmp_path: Path) -> None:
    walked = tmp_path / ".met"
    pq.write_table(COPY_SCHEMA.empty_table(), walked)
    assert write_effective(walked, [], tmp_path / "copies.parquet", 4) is None
    assert list(read(str(tmp_path / "copies.parquet"))) == []
