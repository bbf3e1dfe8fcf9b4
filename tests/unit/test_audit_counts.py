"""The pieces' record counts added up: any cut of the history gives the bounds and write
rate of the whole, at any bucket width the whole history can pick; each chunk's epochs,
LeaderChange records and rates go to Parquet as they were counted (Spark adds them up:
``tests/spark/test_tables.py``, ``tests/spark/test_job.py``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.audit.counts import WIDTHS_MS, Counts, bucket_ms, count
from raftka.audit.decode import LEADER_CHANGE
from raftka.audit.pieces import CANONICAL_SCHEMA
from raftka.audit.schema import to_batch

record = st.tuples(  # times before 1970 too: a node's clock can be wrong
    st.integers(1, 4), st.integers(-WIDTHS_MS[-1], 3 * WIDTHS_MS[-1]), st.sampled_from([LEADER_CHANGE, "NO_OP_RECORD"])
)


def _rows(records: list[tuple[int, int, str]]) -> list[tuple[Any, ...]]:
    return [(offset, offset, epoch, ms, kind, 1 if kind == LEADER_CHANGE else None,
             [1, 2] if kind == LEADER_CHANGE else None, None, None, None, None)
            for offset, (epoch, ms, kind) in enumerate(records)]  # fmt: skip


@settings(deadline=None)  # the first example loads Arrow's compute functions
@given(records=st.lists(record, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=4))
def test_any_cut_adds_up_to_the_whole(records: list[tuple[int, int, str]], cuts: list[int]) -> None:
    rows = _rows(records)
    bounds = [0, *sorted(cuts), len(rows)]
    chunks = [count(to_batch(rows[a:b], CANONICAL_SCHEMA)) for a, b in zip(bounds, bounds[1:], strict=False)]
    counts = Counts().add(chunk["bounds"] for chunk in chunks)
    if not rows:
        assert counts.bounds() == (None, None, None, None, 0)
        return
    offsets, times = [r[0] for r in rows], [r[3] for r in rows]
    assert counts.bounds() == (min(offsets), max(offsets), min(times), max(times), len(rows))
    opened = [row for chunk in chunks for row in chunk["opened"].to_pylist()]
    assert sorted(tuple(r.values()) for r in opened) == sorted(
        (r[2], 1, [1, 2], r[3]) for r in rows if r[4] == LEADER_CHANGE
    )
    width = bucket_ms(min(times), max(times))
    expected: dict[tuple[int, str], int] = {}
    for r in rows:
        expected[(r[3] // width * width, r[4])] = expected.get((r[3] // width * width, r[4]), 0) + 1
    rebucketed: dict[tuple[int, str], int] = {}  # as Spark adds them up (``job.per_bucket``)
    for rate in (chunk["rate"].to_pylist() for chunk in chunks):
        for r in rate:
            key = (r["bucket_ms"] - r["bucket_ms"] % width, r["type"])
            rebucketed[key] = rebucketed.get(key, 0) + r["count"]
    assert rebucketed == expected


def test_every_width_divides_the_wider_ones() -> None:
    assert all(wide % narrow == 0 for narrow, wide in zip(WIDTHS_MS, WIDTHS_MS[1:], strict=False))


@settings(deadline=None)
@given(records=st.lists(record, max_size=40))
def test_a_chunks_epoch_table_holds_each_epochs_offsets_times_and_records(
    records: list[tuple[int, int, str]],
) -> None:
    rows = _rows(records)
    table = count(to_batch(rows, CANONICAL_SCHEMA))["epochs"]
    assert sorted(r["epoch"] for r in table.to_pylist()) == sorted({r[2] for r in rows})
    for found in table.to_pylist():
        mine = [r for r in rows if r[2] == found["epoch"]]
        assert tuple(found.values())[1:] == (
            mine[0][0], mine[-1][0], min(r[3] for r in mine), max(r[3] for r in mine), len(mine)
        )  # fmt: skip
