"""Offset and time indexes and the lookups a segment makes with them (Kafka's
OffsetIndexTest and TimeIndexTest cases: floor lookups, empty, full, truncation, reload),
and that a segment answers every offset and timestamp as a scan of the whole log would,
whichever way it finds the batch (the in-memory tail, or the sparse index then a walk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.log import index
from raftka.broker.log.index import ENTRY_MEMORY_BYTES, IndexError_, LoadedIndexes, OffsetIndex, TimeIndex
from raftka.broker.log.segment import LogSegment
from raftka.records.batch import assign, read_header
from raftka.records.codec import BatchBuilder, read_records
from tests.unit.test_partition_log import append, open_log

NOW = 1_700_000_000_000


def test_floor_lookups_on_an_offset_index(tmp_path: Path) -> None:
    offsets = OffsetIndex(tmp_path / "0.index")
    assert offsets.floor(5) is None  # empty
    for relative, position in ((0, 0), (10, 400), (20, 900)):
        offsets.append(relative, position)
    assert [offsets.floor(k) for k in (0, 9, 10, 19, 25)] == [(0, 0), (0, 0), (10, 400), (10, 400), (20, 900)]
    assert offsets.floor(-1) is None


def test_truncation_drops_entries_from_a_key_on_in_memory_and_on_disk(tmp_path: Path) -> None:
    offsets = OffsetIndex(tmp_path / "0.index")
    for relative in range(0, 50, 10):
        offsets.append(relative, relative * 40)
    offsets.truncate_after(25)
    assert list(offsets.keys) == [0, 10, 20]
    reloaded = OffsetIndex(tmp_path / "0.index")
    reloaded.load(log_size=10_000)
    assert list(reloaded.keys) == [0, 10, 20] and list(reloaded.values) == [0, 400, 800]
    times = TimeIndex(tmp_path / "0.timeindex")
    for relative in range(5):
        times.append(NOW + relative, relative * 10)
    times.truncate_to_offset(20)
    assert list(times.values) == [0, 10]
    offsets.reset()
    assert len(offsets) == 0 and (tmp_path / "0.index").stat().st_size == 0


def test_an_index_is_full_at_its_entry_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "ENTRIES_MAX", 3)
    offsets = OffsetIndex(tmp_path / "0.index")
    for relative in range(3):
        assert not offsets.full
        offsets.append(relative, relative)
    assert offsets.full


@pytest.mark.parametrize(
    ("entries", "log_size"),
    [([(5, 10), (5, 20)], 100), ([(1, 30), (2, 20)], 100), ([(1, 10), (2, 200)], 100)],
    ids=["repeated offset", "positions going back", "position past the log"],
)
def test_an_offset_index_that_its_log_could_not_produce_is_refused(
    tmp_path: Path, entries: list[tuple[int, int]], log_size: int
) -> None:
    written = OffsetIndex(tmp_path / "0.index")
    for entry in entries:
        written.append(*entry)
    with pytest.raises(IndexError_):
        OffsetIndex(tmp_path / "0.index").load(log_size)


# segments ---------------------------------------------------------------------------------


def write_segment(directory: Path, batches: list[list[int]], interval: int) -> LogSegment:
    """A segment of ``batches``, each a list of record timestamps; offsets from 0."""
    segment = LogSegment(directory, 0, interval, NOW)
    offset = 0
    for timestamps in batches:
        builder = BatchBuilder()
        for timestamp in timestamps:
            builder.append(timestamp, None, b"v")
        data = builder.build()
        assign(data, 0, offset, 0)
        segment.append(data, [(0, read_header(data))])
        offset += len(timestamps)
    return segment


def expected_batch(batches: list[list[int]], offset: int) -> int | None:
    """The base offset of the batch holding ``offset``, by counting."""
    base = 0
    for timestamps in batches:
        if offset < base + len(timestamps):
            return base
        base += len(timestamps)
    return None


def expected_first_reaching(batches: list[list[int]], timestamp: int) -> int | None:
    base = 0
    for timestamps in batches:
        if max(timestamps) >= timestamp:
            return base
        base += len(timestamps)
    return None


segments = st.lists(
    st.lists(st.integers(min_value=NOW - 50, max_value=NOW + 50), min_size=1, max_size=4),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(batches=segments, interval=st.sampled_from([1, 150, 600, 1 << 20]))
def test_a_segment_finds_every_offset_and_timestamp_as_a_full_scan_would(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[int]], interval: int
) -> None:
    directory = tmp_path_factory.mktemp("segment")
    segment = write_segment(directory, batches, interval)
    total = sum(len(b) for b in batches)

    def answers(seg: LogSegment) -> tuple[list[int | None], list[int | None], int, int]:
        found = [seg.find(offset) for offset in range(total + 2)]
        reaching = [seg.first_batch_reaching(t) for t in range(NOW - 51, NOW + 52)]
        return (
            [None if f is None else f.header.base_offset for f in found],
            [None if r is None else r.header.base_offset for r in reaching],
            seg.next_offset,
            seg.max_timestamp,
        )

    expected = (
        [expected_batch(batches, offset) for offset in range(total + 2)],
        [expected_first_reaching(batches, t) for t in range(NOW - 51, NOW + 52)],
        total,
        max(max(b) for b in batches),
    )
    assert answers(segment) == expected
    segment.close()
    reloaded = LogSegment(directory, 0, interval, NOW)
    reloaded.load(trust_indexes=True)  # resumes from the indexes' last entries and the batches after them
    assert answers(reloaded) == expected
    reloaded.recover()  # rebuilt from the log alone
    assert answers(reloaded) == expected
    reloaded.close()


def test_the_time_index_gets_an_entry_per_index_interval_not_per_batch(tmp_path: Path) -> None:
    batches = [[NOW + i] for i in range(100)]  # each batch a new largest timestamp
    segment = write_segment(tmp_path, batches, interval=1000)
    batch_size = read_header(segment.read_batch(segment.find(0))).size
    per_entry = -(-1000 // batch_size)  # an entry once 1000 bytes have been written since the last
    assert list(segment.offset_index.keys) == list(range(0, 100, per_entry))
    assert segment.time_index.values == segment.offset_index.keys  # each indexed batch raised the max
    assert list(segment.time_index.keys) == [NOW + i for i in segment.offset_index.keys]


def test_truncation_leaves_a_segment_that_answers_as_if_the_rest_was_never_written(tmp_path: Path) -> None:
    batches = [[NOW + i % 7] for i in range(60)]
    segment = write_segment(tmp_path, batches, interval=300)
    segment.truncate_to(37)
    assert segment.next_offset == 37
    assert segment.find(36).header.base_offset == 36 and segment.find(37) is None
    assert segment.max_timestamp == max(NOW + i % 7 for i in range(37))
    assert segment.first_batch_reaching(NOW + 6).header.base_offset == 6


def test_a_reopened_log_of_many_segments_loads_an_index_only_when_a_lookup_needs_it(tmp_path: Path) -> None:
    """Kafka maps index files lazily; holding every entry of every segment from the start
    grew a broker's memory with its logs."""
    config = {"segment_bytes": 400, "index_interval_bytes": 1}
    log = open_log(tmp_path, **config)
    for i in range(60):
        append(log, b"v%d" % i)
    log.close()
    reopened = open_log(tmp_path, clean=True, **config)
    segments = reopened.segments
    assert len(segments) >= 5

    def loaded() -> list[tuple[int, str]]:
        return [
            (n, kind)
            for n, segment in enumerate(segments)
            for kind, found in (("offsets", segment.offset_index), ("times", segment.time_index))
            if found.loaded
        ]

    assert loaded() == []
    wanted = segments[2].base_offset + 1  # past its first batch: the offset index finds it
    assert next(read_records(reopened.read(wanted, 1 << 20).records)).offset == wanted
    assert loaded() == [(2, "offsets")]
    reopened.close()


def test_loaded_entries_stay_within_their_bound_the_least_recently_used_dropped_first(tmp_path: Path) -> None:
    loaded = LoadedIndexes(bytes_max=3 * 10 * ENTRY_MEMORY_BYTES)  # three indexes of ten entries
    indexes = [OffsetIndex(tmp_path / f"{n}.index", loaded) for n in range(5)]
    for n, offsets in enumerate(indexes):
        for relative in range(10):
            offsets.append(relative, relative * 100 + n)
    assert not any(offsets.loaded for offsets in indexes), "appends load nothing"
    for n, offsets in enumerate(indexes):
        assert offsets.floor(5) == (5, 500 + n)
    assert [offsets.loaded for offsets in indexes] == [False, False, True, True, True]
    assert loaded.bytes == 3 * 10 * ENTRY_MEMORY_BYTES
    indexes[2].floor(0)  # used again: the most recent
    assert indexes[0].floor(9) == (9, 900)  # read again from its file; 3 goes
    assert [offsets.loaded for offsets in indexes] == [True, False, True, False, True]
    indexes[4].append(10, 1004)  # a loaded index grows in memory too: over the bound, 2 goes
    assert indexes[4].floor(10) == (10, 1004)
    assert [offsets.loaded for offsets in indexes] == [True, False, False, False, True]
    assert loaded.bytes == 21 * ENTRY_MEMORY_BYTES


def test_a_segments_indexes_hold_no_descriptor_between_uses(tmp_path: Path) -> None:
    """Two index descriptors per segment were most of a broker's open files: 400 partitions
    of one segment took 1,200 of a default limit of 1,024."""
    config = {"segment_bytes": 400, "index_interval_bytes": 1}
    before = len(os.listdir("/proc/self/fd"))
    log = open_log(tmp_path, **config)
    for i in range(60):
        append(log, b"v%d" % i)
    segments = len(log.segments)
    assert segments >= 5
    assert next(read_records(log.read(log.segments[2].base_offset + 1, 1 << 20).records))
    assert len(os.listdir("/proc/self/fd")) - before <= segments + 1  # a log file each, the folder
    log.close()
    assert len(os.listdir("/proc/self/fd")) == before
