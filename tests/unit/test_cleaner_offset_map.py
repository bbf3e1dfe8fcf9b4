"""The cleaner's key map: last offset per key, bounded by its byte budget (Kafka's
SkimpyOffsetMap, 24 bytes an entry)."""

from __future__ import annotations

import sys
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftka.broker.log.cleaner.offset_map import ENTRY_BYTES, OffsetMap


@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 2**40)), max_size=200))
def test_the_map_answers_the_last_offset_put_for_each_key(puts: list[tuple[bytes, int]]) -> None:
    offset_map = OffsetMap(ENTRY_BYTES * 512)
    expected: dict[bytes, int] = {}
    for key, offset in puts:
        offset_map.put(key, offset)
        expected[key] = offset
    assert offset_map.size == len(expected)
    for key, offset in expected.items():
        assert offset_map.get(key) == offset
    assert offset_map.get(b"never put, longer than six") == -1


def test_the_map_is_full_at_its_load_factor_and_probes_past_collisions() -> None:
    offset_map = OffsetMap(ENTRY_BYTES * 10)  # filled to LOAD_FACTOR (0.9)
    assert offset_map.capacity == 9
    for i in range(9):
        offset_map.put(b"k%d" % i, i)
    assert offset_map.full
    assert [offset_map.get(b"k%d" % i) for i in range(9)] == list(range(9))
    offset_map.put(b"k3", 30)  # an update takes no new slot
    assert offset_map.size == 9 and offset_map.get(b"k3") == 30
    offset_map.put(b"k9", 9)  # the last free slot...
    with pytest.raises(OverflowError):
        offset_map.put(b"k10", 10)  # ...and never more than there are
    offset_map.clear()
    assert offset_map.size == 0 and offset_map.get(b"k3") == -1


def test_memory_is_the_budget_not_per_entry_python_objects() -> None:
    """The map's memory is its budget; a dict of digests to offsets would cost ~5x."""
    entries = 20_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    offset_map = OffsetMap(ENTRY_BYTES * entries)
    for i in range(int(entries * 0.9)):
        offset_map.put(b"key-%d" % i, 10**9 + i)
    ours = tracemalloc.get_traced_memory()[0] - before
    before = tracemalloc.get_traced_memory()[0]
    as_dict = {(b"%016d" % i): 10**9 + i for i in range(int(entries * 0.9))}
    theirs = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert ours <= ENTRY_BYTES * entries * 1.05
    assert theirs / len(as_dict) > 4 * ENTRY_BYTES, sys.getsizeof(as_dict)
